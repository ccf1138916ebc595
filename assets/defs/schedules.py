"""The retraining schedules: on their cron tick, request runs of the trained asset partitions that are stale.

The cron comes from the project's YAML (`schedules: {retraining: "0 3 * * 0"}`, UTC; default weekly,
Sunday 03:00). There is one schedule per named asset job holding trained assets (assets.cli.launch:
`retraining_unpartitioned_assets` for the PHP pre-training, `retraining_collection_assets`,
`retraining_unit_assets`), all on that cron: a Dagster schedule launches runs of one job, and a
named job holds the assets of one partitions definition. A tick asks Dagster's staleness (as
`dagster-ir update` does: a code version, a config section or an upstream data version changed, or
the partition is missing) which trained asset partitions are stale, and returns one `RunRequest` per
partition key of its job holding some (its stale assets selected, `dagster/partition` set): runs of
that named job, so the UI's Runs page names the job, and each run has its steps in its own event log
and is re-executable from the UI. With none stale it launches nothing (the tick says why). The runs
carry the run-wide profile the sources were last observed with (assets.defs.observation).

A stale partition that reads another stale partition of the same tick (a collection's report over
units being retrained) is not requested at that tick: both runs would start at once and the reader
would read the old checkpoints. It is requested at the next tick, or at once by the automation
sensor's conditions when that sensor is on.

The schedules are on by default (they run whenever `dagster dev` or the daemon runs). The default
automation sensor's cron condition on the trained assets does the same retraining by the other
route; while that sensor is on, the schedules' ticks launch nothing (they say so), so the two never
retrain twice.
"""

from collections.abc import Callable
from pathlib import Path

import dagster as dg

from assets.defs.automation import AUTOMATION_SENSOR, DEFAULT_RETRAINING_CRON, TIMEZONE, TRAINED_GROUPS
from assets.defs.observation import profile_tags
from assets.lib.asset_jobs import job_name
from assets.lib.dagster_private import sensor_running
from assets.lib.project import config_path
from assets.lib.staleness import _State, stale_partitions
from dagster_ir.collections import CollectionConfigError
from dagster_ir.collections.config import read_config_document

SECTION = "schedules"
TRAINED_SELECTION = dg.AssetSelection.groups(*TRAINED_GROUPS)
RETRAIN_TAG = "dagster_ir/retrain"  # what a retraining run was launched for


def retraining_cron(path: str | Path | None = None) -> str:
    """The retraining cron of the YAML file at `path` (default: the project's), else weekly."""
    path = config_path() if path is None else Path(path)
    if path is None:
        return DEFAULT_RETRAINING_CRON
    section = read_config_document(path).get(SECTION)
    if section is None:
        return DEFAULT_RETRAINING_CRON
    if not isinstance(section, dict):
        raise CollectionConfigError(f"{path}: {SECTION}: expected a mapping like {{retraining: '0 3 * * 0'}}")
    unknown = sorted(set(section) - {"retraining"})
    if unknown:
        raise CollectionConfigError(f"{path}: {SECTION}.{unknown[0]}: unknown key (allowed: retraining)")
    cron = section.get("retraining", DEFAULT_RETRAINING_CRON)
    if not isinstance(cron, str) or not is_valid_cron(cron):
        raise CollectionConfigError(
            f"{path}: {SECTION}.retraining: {cron!r} is not a cron expression (five fields, e.g. '0 3 * * 0')"
        )
    return cron


def is_valid_cron(cron: str) -> bool:
    """Whether Dagster accepts `cron` as a schedule's cron string (asked through a throwaway definition)."""
    try:
        dg.ScheduleDefinition(name="cron_check", cron_schedule=cron, job_name="cron_check")
    except dg.DagsterInvalidDefinitionError:
        return False
    return True


def stale_trained(
    defs: dg.Definitions, instance: dg.DagsterInstance, selection: dg.AssetSelection = TRAINED_SELECTION
) -> list[tuple[dg.AssetKey, str | None]]:
    """The stale or missing asset partitions of `selection` (Dagster's staleness, as `update` sees it)."""

    return sorted(stale_partitions(defs, instance, selection), key=lambda kp: (kp[0].to_user_string(), kp[1] or ""))


def retraining_requests(
    defs: dg.Definitions, instance: dg.DagsterInstance, selection: dg.AssetSelection = TRAINED_SELECTION
) -> list[dg.RunRequest]:
    """One run request per (named asset job, partition key) holding stale trained asset partitions (its
    stale assets selected, `job_name` set), upstream partitions first; a partition that reads another
    stale partition of this list waits (see the module docstring)."""

    stale = set(stale_trained(defs, instance, selection))
    state = _State(defs, instance, None, selection)
    graph = defs.resolve_asset_graph()
    groups: dict[tuple[str, str | None], list[dg.AssetKey]] = {}
    for key, partition in sorted(stale, key=lambda kp: (kp[1] or "", kp[0].to_user_string())):
        groups.setdefault((job_name(graph.get(key).partitions_def), partition), []).append(key)
    profile = profile_tags(instance)
    requests = []
    for (job, partition), keys in sorted(groups.items(), key=lambda item: (item[0][1] or "", item[0][0])):
        reads = {parent for key in keys for parent in state.parents(key, partition)}
        if any(parent in stale and parent[1] != partition for parent in reads):
            continue  # requested at a later tick, once what it reads was retrained
        names = [key.to_user_string() for key in keys]
        requests.append(
            dg.RunRequest(
                run_key=f"retrain:{job}:{partition or 'unpartitioned'}",
                job_name=job,
                asset_selection=keys,
                partition_key=partition,
                tags={
                    RETRAIN_TAG: ", ".join(names)[:4000],
                    "dagster_ir/command": "retraining",
                    "dagster_ir/assets": ", ".join(names)[:4000],
                    **profile,
                },
            )
        )
    return requests


def schedule_name(job: str) -> str:
    """The retraining schedule of named asset job `job` (`unit_assets_job` -> `retraining_unit_assets`)."""
    return f"retraining_{job.removesuffix('_job')}"


def make_retraining_schedule(
    cron: str,
    load_defs: Callable[[], dg.Definitions],
    job: str,
    selection: dg.AssetSelection = TRAINED_SELECTION,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.RUNNING,
) -> dg.ScheduleDefinition:
    """The retraining schedule of the named asset job `job` on `cron`: the stale partitions of `selection`
    (in the definitions `load_defs()` returns) that belong to that job."""

    @dg.schedule(
        name=schedule_name(job),
        cron_schedule=cron,
        execution_timezone=TIMEZONE,
        job_name=job,
        default_status=default_status,
        description=f"Retrain the stale trained assets of {job} (groups {', '.join(TRAINED_GROUPS)}) on "
        f"'{cron}' ({TIMEZONE}): one run per stale partition; a tick with nothing stale "
        f"launches nothing, and none while {AUTOMATION_SENSOR} is on (it retrains them then). "
        "Set the cron in dagster-ir.yaml (schedules: {retraining: ...}).",
    )
    def retraining(context: dg.ScheduleEvaluationContext):
        if sensor_running(context.instance, AUTOMATION_SENSOR):
            return dg.SkipReason(
                f"{AUTOMATION_SENSOR} is on: the trained assets' automation conditions retrain "
                "them at this cron tick; launched nothing (stop one of the two)"
            )
        requests = [r for r in retraining_requests(load_defs(), context.instance, selection) if r.job_name == job]
        if not requests:
            return dg.SkipReason(f"nothing stale among the trained assets of {job}: launched nothing")
        return requests

    return retraining


def retraining_schedules(
    assets, cron: str, load_defs: Callable[[], dg.Definitions], groups: tuple[str, ...] = TRAINED_GROUPS
) -> list[dg.ScheduleDefinition]:
    """One retraining schedule per named asset job (assets.cli.launch) holding trained assets of `groups`."""
    jobs = sorted(
        {
            job_name(spec.partitions_def)
            for item in assets
            if isinstance(item, dg.AssetsDefinition) and item.is_materializable and item.is_executable
            for spec in item.specs
            if spec.group_name in groups
        }
    )
    return [make_retraining_schedule(cron, load_defs, job, dg.AssetSelection.groups(*groups)) for job in jobs]
