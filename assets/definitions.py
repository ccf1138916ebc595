"""The one Definitions object of dagster-ir."""

from __future__ import annotations

import dagster as dg

from assets.io_managers import PolarsParquetIOManager
from assets.jobs import all_jobs, all_sensors
from assets.resources import DataDirResource
from assets.checks import collection_checks
from assets.collections import collection_assets
from assets.evaluation import evaluation_assets
from assets.retrieval import retrieval_assets
from assets.wiki import wiki_assets, wiki_checks

all_assets = [*wiki_assets, *collection_assets, *retrieval_assets, *evaluation_assets]
all_checks = [*wiki_checks, *collection_checks]


def resources(data_dir: str = "") -> dict:
    """The resources every asset uses, rooted at `data_dir` ("" = $DAGSTER_IR_DATA or ./data)."""
    return {
        "io_manager": PolarsParquetIOManager(data_dir=data_dir),
        "data": DataDirResource(path=data_dir),
    }


defs = dg.Definitions(
    assets=all_assets,
    asset_checks=all_checks,
    jobs=all_jobs,
    sensors=all_sensors,
    resources=resources(),
    executor=dg.multiprocess_executor,
)
