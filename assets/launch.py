"""Runs of named asset jobs: what `dagster-ir update`, `demo` and `reproduce` submit.

The definitions hold one asset job per partitions definition (`asset_jobs`): `unpartitioned_assets_job`,
`dump_assets_job` (one Wikipedia dump file), `collection_assets_job` (one collection) and
`unit_assets_job` (one training unit). A run of `dagster-ir update` is a run of one of them, subset to
the stale assets of one partition (`dagster/partition` tag), so the UI's Runs page names its job, lists
its steps, and "Re-execute" works from there (the job exists in the definitions the UI loads).

How the run executes (`launch_run`):
- for the project's definitions (`assets.definitions.defs`) on a persistent instance, with an
  `executor:` section in dagster-ir.yaml, the run is `dg.execute_job` of the reconstructable job under
  that executor (`multiprocess`: each step in a child process; `in_process`; `dask`; `k8s`); the
  command waits for it. The job is rebuilt in each worker from `assets.definitions` (its resources read the
  data directory from $DAGSTER_IR_DATA, which `dagster-ir` sets), so the caller's resources must be
  rooted at that same directory;
- otherwise (no `executor:` section, other definitions, an ephemeral instance, resources rooted
  elsewhere) the same named job runs in this process (`execute_in_process`) with the caller's
  resources. Without an `executor:` section this is what `dagster-ir update` does: a run's steps in
  the command's own process is several times faster on one machine than the multiprocess executor,
  whose every step starts a process that imports the project (measured: 30-35 s instead of 3-4 s per
  run of the sample dump's chain on 2 cores); the UI's runs still use the multiprocess executor.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterable

import dagster as dg

UNPARTITIONED_JOB = "unpartitioned_assets_job"
# The project's partitions definitions (assets.partitions) by name -> their job.
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
    module = sys.modules.get("assets.partitions")
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


def project_job(name: str) -> dg.JobDefinition:
    """The project's job `name` (what each worker of a run rebuilds: see `dg.build_reconstructable_job`)."""
    from assets.definitions import defs

    return defs.resolve_job_def(name)


def reconstructable_project_job(name: str):
    return dg.build_reconstructable_job("assets.launch", "project_job", reconstructable_args=(name,))


def launch_run(
    definitions,
    *,
    selection: dg.AssetSelection,
    instance: dg.DagsterInstance,
    resources: dict,
    partition_key: str | None,
    tags: dict,
    run_config: dict,
    defs: dg.Definitions,
    raise_on_error: bool = False,
):
    """Materialize `selection` (one partition) as a run of its named asset job; returns the run's result
    (`success`, `run_id`, `get_step_failure_events()`). Keys under several partitions definitions
    (one partition key string shared by two of them) run as one run per job, stopping at a failure.
    `definitions` (the asset and check list `dg.materialize` took) is not needed: `defs` has them."""
    graph = defs.resolve_asset_graph()
    by_job: dict[str, list[dg.AssetKey]] = {}
    for key in sorted(selection.resolve(graph), key=lambda k: k.to_user_string()):
        by_job.setdefault(job_name(graph.get(key).partitions_def), []).append(key)
    result = None
    for name, keys in sorted(by_job.items()):
        run_tags = {**tags, **({"dagster/partition": partition_key} if partition_key is not None else {})}
        if _submits_to_project_job(defs, instance, resources):
            with dg.execute_job(
                reconstructable_project_job(name),
                instance=instance,
                run_config=run_config,
                tags=run_tags,
                asset_selection=keys,
                raise_on_error=raise_on_error,
            ) as result:
                pass
        else:
            job = _in_process_defs(defs, resources).resolve_job_def(name)
            result = job.execute_in_process(
                run_config=run_config,
                instance=instance,
                partition_key=partition_key,
                raise_on_error=raise_on_error,
                tags=tags,
                asset_selection=keys,
            )
        if not result.success:
            break
    return result


def _submits_to_project_job(defs: dg.Definitions, instance: dg.DagsterInstance, resources: dict) -> bool:
    """Whether the run can be the project's reconstructable job under its configured executor."""
    project = sys.modules.get("assets.definitions")
    if project is None or defs is not getattr(project, "defs", None) or not instance.is_persistent:
        return False
    from assets.updates import _data_root
    from dagster_ir.settings import data_dir

    root = _data_root(resources)
    if root is not None and os.path.realpath(root) != os.path.realpath(data_dir(None)):
        return False
    return executor_configured()


def executor_configured() -> bool:
    """Whether the project's YAML has an `executor:` section (without one, `update` runs in process)."""
    from assets.project import config_path
    from dagster_ir.collections.config import read_config_document

    path = config_path()
    return path is not None and read_config_document(path).get("executor") is not None


_IN_PROCESS: dict[tuple[int, int], tuple] = {}


def _in_process_defs(defs: dg.Definitions, resources: dict) -> dg.Definitions:
    """`defs`' assets and checks with the named jobs and the caller's resources (cached per pair)."""
    key = (id(defs), id(resources))
    if key not in _IN_PROCESS:  # the entry holds both objects, so their ids stay theirs
        merged = dg.Definitions(
            assets=list(defs.assets or []),
            asset_checks=list(defs.asset_checks or []),
            jobs=asset_jobs(defs.assets or []),
            resources=resources,
        )
        _IN_PROCESS[key] = (defs, resources, merged)
    return _IN_PROCESS[key][2]
