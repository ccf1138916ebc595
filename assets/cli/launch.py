"""Runs of named asset jobs (`assets.lib.asset_jobs`): what `dagster-ir update`, `demo` and `reproduce` submit.

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

import os
import sys

import dagster as dg

from assets.lib.asset_jobs import asset_jobs, job_name
from dagster_ir.settings import data_dir


def project_job(name: str) -> dg.JobDefinition:
    """The project's job `name` (what each worker of a run rebuilds: see `dg.build_reconstructable_job`)."""
    from assets.definitions import defs  # reads the collections YAML at import

    return defs.resolve_job_def(name)


def reconstructable_project_job(name: str):
    return dg.build_reconstructable_job("assets.cli.launch", "project_job", reconstructable_args=(name,))


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
    from assets.lib.staleness import _data_root  # dagster: not loaded by --help

    root = _data_root(resources)
    if root is not None and os.path.realpath(root) != os.path.realpath(data_dir(None)):
        return False
    return executor_configured()


def executor_configured() -> bool:
    """Whether the project's YAML has an `executor:` section (without one, `update` runs in process)."""
    from assets.lib.project import config_path  # polars, DuckDB: not loaded by --help
    from dagster_ir.collections.config import read_config_document  # polars, DuckDB: not loaded by --help

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
