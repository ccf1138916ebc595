"""Two independent catalog-writing assets, run in parallel by the multiprocess executor."""

import os
import time

import dagster as dg
import polars as pl

from assets.lib.io_managers import PolarsParquetIOManager


def _slow_frame(n: int) -> pl.DataFrame:
    time.sleep(1.0)  # make the two steps overlap
    return pl.DataFrame({"i": list(range(n))})


@dg.asset(code_version="1")
def left_table() -> pl.DataFrame:
    """Left."""
    return _slow_frame(3)


@dg.asset(code_version="1")
def right_table() -> pl.DataFrame:
    """Right."""
    return _slow_frame(5)


def parallel_job() -> dg.JobDefinition:
    defs = dg.Definitions(
        assets=[left_table, right_table],
        resources={"io_manager": PolarsParquetIOManager(data_dir=os.environ["DAGSTER_IR_DATA"])},
        jobs=[dg.define_asset_job("parallel", executor_def=dg.multiprocess_executor.configured({"max_concurrent": 2}))],
    )
    return defs.resolve_job_def("parallel")


# --- two `update` processes on one data directory (tests/assets/test_updates.py) ----------------


def _count(name: str) -> None:
    with open(os.path.join(os.environ["COUNT_DIR"], "counted.txt"), "a") as log:
        log.write(name + "\n")


@dg.asset(code_version="1")
def counted() -> pl.DataFrame:
    """Counted: slow, and logs each computation."""
    time.sleep(3.0)  # long enough for the other process to arrive while it runs
    _count("counted")
    return pl.DataFrame({"i": [1, 2]})


@dg.asset(code_version="1")
def derived(counted: pl.DataFrame) -> pl.DataFrame:
    """Derived from counted; logs each computation."""
    time.sleep(1.0)
    _count("derived")
    return counted.with_columns(j=pl.col("i") * 2)


def counting_defs(data_dir: str) -> tuple[dg.Definitions, dict]:
    from assets.lib.resources import DataDirResource

    os.environ["COUNT_DIR"] = data_dir
    os.makedirs(data_dir, exist_ok=True)
    resources = {"io_manager": PolarsParquetIOManager(data_dir=data_dir), "data": DataDirResource(path=data_dir)}
    return dg.Definitions(assets=[counted, derived], resources=resources), resources
