"""The same assets on Dask (a LocalCluster of two worker processes) give the same tables as on the
multiprocess executor: the Wikipedia chain on the bundled sample and the wiki-car BM25 index."""

from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from assets.cli.commands import add_dump
from dagster_ir.storage.dumps import sample_dump_path
from dagster_ir.storage.parquet import frame_version

pytest.importorskip("dagster_dask", reason="the dask extra (dagster-dask) is not installed")
pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
# bm25_index's row names its index folder (under each data directory) and the build time.
VOLATILE = {"bm25_index": ["path", "seconds"]}


def _materialize(executor: str, root: Path, home: Path, monkeypatch) -> dict[str, str]:
    import dist_defs

    monkeypatch.setenv("DAGSTER_IR_DATA", str(root))
    home.mkdir(parents=True)
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        dump = add_dump(root, str(sample_dump_path()), instance)
        runs = {}
        for stage, partition in [("dump", dump), ("graph", None), ("collection", "wiki-car")]:
            job = dg.build_reconstructable_job(
                "dist_defs", "stage_job", (executor, stage), reconstructor_working_directory=str(HERE)
            )
            tags = {"dagster/partition": partition} if partition else {}
            with dg.execute_job(job, instance=instance, tags=tags) as result:
                assert result.success, f"{executor} {stage}: {[e.message for e in result.get_step_failure_events()]}"
                runs[stage] = {e.step_key for e in result.get_step_success_events()}
        assert set(dist_defs.STAGES["graph"]) <= runs["graph"]
    return _table_versions(root)


def _table_versions(root: Path) -> dict[str, str]:
    versions = {}
    for path in sorted((root / "tables").rglob("*.parquet")):
        asset = path.relative_to(root / "tables").parts[0]
        frame = pl.read_parquet(path).drop(VOLATILE.get(asset, []))
        versions[str(path.relative_to(root))] = frame_version(frame)
    return versions


def test_dask_local_cluster_gives_the_multiprocess_tables(tmp_path, monkeypatch):
    import dist_defs
    from distributed import LocalCluster

    # One cluster of two worker processes for the three runs (each worker imports the code once),
    # reached by address as a remote scheduler would be; the workers inherit $DAGSTER_IR_DATA.
    monkeypatch.setenv("DAGSTER_IR_DATA", str(tmp_path / "dask"))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        monkeypatch.setenv(dist_defs.SCHEDULER_ENV, cluster.scheduler_address)
        on_dask = _materialize("dask", tmp_path / "dask", tmp_path / "home-dask", monkeypatch)
        assert len(cluster.workers) == 2
    on_processes = _materialize("multiprocess", tmp_path / "mp", tmp_path / "home-mp", monkeypatch)
    every_asset = {a for assets in dist_defs.STAGES.values() for a in assets}
    assert {Path(p).parts[1] for p in on_dask} == every_asset
    assert on_dask == on_processes
