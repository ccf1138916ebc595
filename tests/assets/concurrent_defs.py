"""Two independent catalog-writing assets, run in parallel by the multiprocess executor."""

import os
import time

import dagster as dg
import polars as pl

from assets.io_managers import PolarsParquetIOManager


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
