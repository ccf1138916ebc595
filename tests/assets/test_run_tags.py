"""Runs launched by `dagster-ir` say what they are: the command and the assets they materialize."""

import dagster as dg
import polars as pl

from assets.cli.updates import ASSETS_TAG, COMMAND_TAG, update_all
from assets.lib.io_managers import PolarsParquetIOManager


@dg.asset(code_version="1")
def first() -> pl.DataFrame:
    """One row."""
    return pl.DataFrame({"n": [1]})


@dg.asset(code_version="1")
def second(first: pl.DataFrame) -> pl.DataFrame:
    """Two rows."""
    return pl.concat([first, first])


def test_update_runs_carry_the_command_and_their_assets(tmp_path):
    defs = dg.Definitions(assets=[first, second])
    with dg.instance_for_test() as instance:
        report = update_all(
            defs,
            instance,
            resources={"io_manager": PolarsParquetIOManager(data_dir=str(tmp_path))},
            command="retraining",
            log=lambda _: None,
        )
        assert report.ok and report.materialized == 2
        runs = instance.get_runs(filters=dg.RunsFilter(tags={COMMAND_TAG: "retraining"}))
        assert sorted(run.tags[ASSETS_TAG] for run in runs) == ["first", "second"]
