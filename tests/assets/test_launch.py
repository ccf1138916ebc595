"""Runs of `update` are runs of named asset jobs of the definitions, under the configured executor:
the Runs page names their job, a run can be re-executed, and with `executor: {kind: dask}` the steps run
on the Dask workers."""

import os
import re

import dagster as dg
import polars as pl
import pytest

from assets.cli.updates import update_all
from assets.lib.asset_jobs import UNPARTITIONED_JOB, asset_jobs, job_name
from assets.lib.io_managers import PolarsParquetIOManager

EPHEMERAL = "__ephemeral_asset_job__"
parts = dg.StaticPartitionsDefinition(["a", "b"])


@dg.asset(code_version="1")
def base() -> pl.DataFrame:
    """One row."""
    return pl.DataFrame({"n": [1]})


@dg.asset(code_version="1", partitions_def=parts)
def per_part(context, base: pl.DataFrame) -> pl.DataFrame:
    """One row per partition."""
    return base.with_columns(p=pl.lit(context.partition_key))


def test_update_runs_belong_to_one_named_job_per_partitions_definition(tmp_path):
    jobs = {job.name for job in asset_jobs([base, per_part])}
    assert jobs == {UNPARTITIONED_JOB, job_name(parts)} and EPHEMERAL not in jobs
    with dg.instance_for_test() as instance:
        report = update_all(
            dg.Definitions(assets=[base, per_part]),
            instance,
            log=lambda _: None,
            resources={"io_manager": PolarsParquetIOManager(data_dir=str(tmp_path))},
        )
        assert report.ok and report.materialized == 3
        runs = instance.get_runs()
        assert sorted((run.job_name, run.tags.get("dagster/partition")) for run in runs) == sorted(
            [(UNPARTITIONED_JOB, None), (job_name(parts), "a"), (job_name(parts), "b")]
        )


# Subprocess tests against the project's definitions (the YAML is read when they are imported).
SMALL = """
from assets.cli.launch import reconstructable_project_job
from assets.cli.updates import COMMAND_TAG
report = update_all(defs, instance, resources=resources(str(root)), log=lambda line: print(line, flush=True),
                    selection=dg.AssetSelection.assets("corpus", "queries", "qrels"))
assert report.ok, report.failures
runs = instance.get_runs(filters=dg.RunsFilter(tags={COMMAND_TAG: "update"}))
names = {job.name for job in defs.jobs}
out = {"jobs": sorted({instance.get_run_by_id(run.run_id).job_name for run in runs}), "in_defs": [],
       "partitions": sorted(run.tags.get("dagster/partition") or "" for run in runs)}
out["in_defs"] = [run.job_name in names for run in runs]
pids = {}
for run in runs:
    for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS):
        pids[entry.dagster_event.step_key] = entry.dagster_event.pid
out["step_pids"] = sorted(set(pids.values()))
out["own_pid"] = os.getpid()
parent = runs[0]
# (the UI's "Re-execute" copies the parent's tags; `execute_job` wants the partition tag given again)
with dg.execute_job(reconstructable_project_job(parent.job_name), instance=instance,
                    tags={"dagster/partition": parent.tags["dagster/partition"]},
                    reexecution_options=dg.ReexecutionOptions(parent_run_id=parent.run_id)) as again:
    child = instance.get_run_by_id(again.run_id)
    out["reexecution"] = {"ok": again.success, "job": child.job_name, "same_job": child.job_name == parent.job_name,
                          "parent": child.parent_run_id == parent.run_id,
                          "partition": child.tags.get("dagster/partition") == parent.tags.get("dagster/partition"),
                          "steps": sorted(e.step_key for e in again.get_step_success_events()),
                          "parent_steps": sorted(e.dagster_event.step_key for e in instance.all_logs(
                              parent.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)),
                          "errors": [e.step_failure_data.error.to_string()[-3000:]
                                     for e in again.get_step_failure_events()]}
print(json.dumps(out))
"""


def _project_update(tmp_path, executor: str) -> dict:
    from test_updates import WORDS, _local_collection, _run

    config = "collections:\n" + _local_collection(tmp_path, "tiny", WORDS) + f"executor: {executor}\n"
    return _run(tmp_path, SMALL, config, timeout=600)


def _check_named_jobs(result: dict) -> None:
    assert result["jobs"] == ["collection_assets_job"] and all(result["in_defs"])
    assert EPHEMERAL not in result["jobs"] and result["partitions"] == ["tiny"] * len(result["in_defs"])
    again = result["reexecution"]
    assert again["ok"], again["errors"]
    assert again["same_job"] and again["parent"] and again["partition"]
    assert again["steps"] == again["parent_steps"] and again["steps"]  # the same steps ran again


@pytest.mark.slow
def test_a_project_update_submits_runs_of_named_jobs_that_can_be_reexecuted(tmp_path):
    result = _project_update(tmp_path, "{kind: in_process}")
    _check_named_jobs(result)
    assert result["step_pids"] == [result["own_pid"]]  # in_process: the steps ran in the update's process


@pytest.mark.slow
def test_with_the_dask_executor_the_update_runs_its_steps_on_dask_workers(tmp_path, monkeypatch):
    pytest.importorskip("dagster_dask", reason="the dask extra (dagster-dask) is not installed")
    from distributed import Client, LocalCluster
    from test_updates import HERE

    # The workers get the environment the update's subprocess gets (config, data directory, instance).
    monkeypatch.setenv("DAGSTER_IR_CONFIG", str(tmp_path / "dagster-ir.yaml"))
    monkeypatch.setenv("DAGSTER_IR_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([os.getcwd(), str(HERE), os.environ.get("PYTHONPATH", "")]))
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        workers = set(client.run(os.getpid).values())
        result = _project_update(tmp_path, "{kind: dask, address: '" + cluster.scheduler_address + "'}")
    _check_named_jobs(result)
    assert result["step_pids"] and set(result["step_pids"]) <= workers, (result["step_pids"], workers)


@pytest.mark.slow
def test_the_update_command_runs_every_step_on_the_configured_dask_cluster(tmp_path, monkeypatch):
    """`dagster-ir update --first-stage` itself (the sample dump's chain and one small collection)."""
    pytest.importorskip("dagster_dask", reason="the dask extra (dagster-dask) is not installed")
    import subprocess
    import sys

    from distributed import Client, LocalCluster
    from test_updates import HERE, WORDS, _local_collection

    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    for name, value in {
        "DAGSTER_IR_CONFIG": tmp_path / "dagster-ir.yaml",
        "DAGSTER_IR_DATA": tmp_path / "data",
        "DAGSTER_HOME": home,
    }.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([os.getcwd(), str(HERE), os.environ.get("PYTHONPATH", "")]))
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        (tmp_path / "dagster-ir.yaml").write_text(
            "collections:\n"
            + _local_collection(tmp_path, "tiny", WORDS)
            + f"executor: {{kind: dask, address: '{cluster.scheduler_address}'}}\n"
        )
        workers = set(client.run(os.getpid).values())
        done = subprocess.run(
            [sys.executable, "-m", "assets.cli.main", "update", "--first-stage"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"\[ *1/\d+\] start ", done.stdout) and " done " in done.stdout  # the progress lines
    with dg.DagsterInstance.get() as instance:
        runs = [run for run in instance.get_runs() if run.tags.get("dagster_ir/command") == "update"]
        names = {"unpartitioned_assets_job", "dump_assets_job", "collection_assets_job", "unit_assets_job"}
        assert runs and {run.job_name for run in runs} <= names
        pids = {
            entry.dagster_event.pid
            for run in runs
            for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
        }
    assert pids and pids <= workers, (pids, workers)
