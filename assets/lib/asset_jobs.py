"""The project's asset jobs: one per partitions definition (`asset_jobs`): `unpartitioned_assets_job`,
`dump_assets_job` (one Wikipedia dump file), `collection_assets_job` (one collection) and
`unit_assets_job` (one training unit). A run of `dagster-ir update` is a run of one of them, subset to
the stale assets of one partition (`dagster/partition` tag), so the UI's Runs page names its job, lists
its steps, and "Re-execute" works from there (the job exists in the definitions the UI loads).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable

import dagster as dg

UNPARTITIONED_JOB = "unpartitioned_assets_job"


# The project's partitions definitions (assets.lib.partitions) by name -> their job.
_KNOWN = {"wiki_dump": "dump_assets_job", "collection": "collection_assets_job", "unit": "unit_assets_job"}


def job_name(partitions_def: dg.PartitionsDefinition | None) -> str:
    """The name of the asset job that materializes the assets partitioned by `partitions_def`."""
    if partitions_def is None:
        return UNPARTITIONED_JOB
    kind = _project_kind(partitions_def)
    if kind is not None:
        return _KNOWN[kind]
    name = getattr(partitions_def, "name", None)
    if name:
        return f"{name}_assets_job"
    described = getattr(partitions_def, "partition_keys", None) or str(partitions_def)
    return f"partitioned_assets_job_{hashlib.sha1(repr(described).encode()).hexdigest()[:8]}"  # stable across processes


def _project_kind(partitions_def) -> str | None:
    module = sys.modules.get("assets.lib.partitions")
    if module is None:
        return None
    if partitions_def == module.wiki_dump_partitions:
        return "wiki_dump"
    if partitions_def == module.collection_partitions:
        return "collection"
    if partitions_def == module.unit_partitions:
        return "unit"
    return None


def asset_jobs(assets: Iterable) -> list:
    """One asset job per partitions definition over the materializable assets of `assets`."""
    keys: dict[str, list[dg.AssetKey]] = {}
    for item in assets:
        if not isinstance(item, dg.AssetsDefinition) or not (item.is_materializable and item.is_executable):
            continue
        for spec in item.specs:
            keys.setdefault(job_name(spec.partitions_def), []).append(spec.key)
    return [
        dg.define_asset_job(
            name,
            selection=dg.AssetSelection.assets(*sorted(found, key=lambda k: k.to_user_string())),
            description="The assets of one partitions definition; `dagster-ir update` submits runs of this job "
            "subset to the stale assets of one partition (re-execute them from here).",
        )
        for name, found in sorted(keys.items())
    ]
