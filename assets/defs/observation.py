"""Observing the source assets while the UI runs: two observation jobs and `source_observation_sensor`.

The observable sources (`wiki_dump_file`, `collection_config`, `collection_settings`,
`run_profile_setting`, `imported_runs`) are what Dagster's staleness compares: a new data version of
one makes exactly the asset partitions that read it stale. `dagster-ir update` observes them before
it looks; in the UI, `source_observation_sensor` (on by default) does it, so that a collections YAML
edited or a dump file replaced while `dagster dev` runs shows as "stale" on the assets that read it.

Each tick (every 30 s) the sensor computes a cheap identity of what the sources read (the YAML's bytes,
the size and mtime of the files it names, each registered dump file's identity, the dump partitions)
and compares it with the one of its last launch (the sensor's cursor). Unchanged, it launches
nothing; changed (and at its first tick), it launches a run of the observation job of what changed
(`observe_collection_sources_job`: the YAML's sources; `observe_dump_sources_job`: the dump files;
a job holds one partitions definition), which runs each source's own observation function, so the
versions it records are the ones `dagster-ir update` records. A YAML that does not load skips the tick with the file's error, and the next tick retries.

The run-wide profile (`--profile` of the command line) is part of two sources' versions. An
observation run of the sensor carries the profile the last observation of `run_profile_setting`
recorded (the `dagster_ir/profile` tag), so observing in the UI does not switch the profile the
assets were last built with; the retraining schedules' runs carry it too.
"""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from assets.defs.automation import SOURCES
from assets.lib.dagster_private import latest_observed_version
from assets.lib.partitions import wiki_dump_partitions
from assets.lib.project import config_path
from assets.lib.resources import DataDirResource
from assets.lib.settings import PROFILE_TAG
from dagster_ir.collections import CollectionConfigError
from dagster_ir.collections.config import inputs_identity

COLLECTION_SOURCES_JOB = "observe_collection_sources_job"
DUMP_SOURCES_JOB = "observe_dump_sources_job"
OBSERVATION_SENSOR = "source_observation_sensor"
OBSERVE_COMMAND = "observe"  # the `dagster_ir/command` tag of its runs
INTERVAL_SECONDS = 30
DUMP_SOURCES = ("wiki_dump_file",)  # (a job holds one partitions definition besides unpartitioned assets)
COLLECTION_SOURCES = tuple(name for name in SOURCES if name not in DUMP_SOURCES)

observe_collection_sources_job = dg.define_asset_job(
    COLLECTION_SOURCES_JOB,
    selection=dg.AssetSelection.assets(*COLLECTION_SOURCES),
    description="Observe the sources the collections YAML defines (each collection's section and files, its "
    "settings, its imported runs; the run-wide profile): a new data version makes what reads it "
    "stale. source_observation_sensor launches it when one of them changed.",
)
observe_dump_sources_job = dg.define_asset_job(
    DUMP_SOURCES_JOB,
    selection=dg.AssetSelection.assets(*DUMP_SOURCES),
    description="Observe the registered Wikipedia dump files: a replaced file makes what was parsed from it "
    "stale. source_observation_sensor launches it when one of them changed.",
)
observation_jobs = [observe_collection_sources_job, observe_dump_sources_job]


def profile_tags(instance: dg.DagsterInstance) -> dict[str, str]:
    """The run-wide profile the sources were last observed with, as a run tag ({} for none)."""
    profile = latest_observed_version(instance, dg.AssetKey("run_profile_setting"))
    return {PROFILE_TAG: profile} if profile not in (None, "default") else {}


def sources_identity(instance: dg.DagsterInstance, data: DataDirResource) -> dict[str, str]:
    """A cheap identity of what each observation job's sources read, by job (see the module docstring)."""
    collections = hashlib.blake2b(inputs_identity(config_path()).encode(), digest_size=12)
    collections.update(",".join(sorted(profile_tags(instance).values())).encode())
    dumps = hashlib.blake2b(b"dumps", digest_size=12)
    registry = data.dumps()
    entries = registry.entries()
    for key in sorted(instance.get_dynamic_partitions(wiki_dump_partitions.name)):
        dumps.update(f"{key}={registry.identity(key) if key in entries else 'unregistered'};".encode())
    return {COLLECTION_SOURCES_JOB: collections.hexdigest(), DUMP_SOURCES_JOB: dumps.hexdigest()}


@dg.sensor(
    name=OBSERVATION_SENSOR,
    jobs=observation_jobs,
    minimum_interval_seconds=INTERVAL_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Observes the source assets when what they read changed (the collections YAML, the files "
    "it names, the registered dump files), so the assets that read them show as stale. Cheap: "
    "a tick compares file sizes and times; it launches an observation run only on a change.",
)
def source_observation_sensor(context: dg.SensorEvaluationContext, data: DataDirResource):
    try:
        identity = sources_identity(context.instance, data)
    except (CollectionConfigError, ValueError, OSError) as error:
        return dg.SkipReason(f"not observed: {error}")
    last = json.loads(context.cursor) if context.cursor else {}
    changed = [job for job in sorted(identity) if identity[job] != last.get(job)]
    if not changed:
        return dg.SkipReason("no source changed since the last observation")
    tags = {"dagster_ir/command": OBSERVE_COMMAND, **profile_tags(context.instance)}
    return dg.SensorResult(
        run_requests=[dg.RunRequest(job_name=job, tags=tags) for job in changed],
        cursor=json.dumps(identity, sort_keys=True),
    )
