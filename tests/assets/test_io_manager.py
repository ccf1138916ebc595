import sys
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest

from assets.lib.io_managers import PolarsParquetIOManager
from dagster_ir.storage.catalog import Catalog

sys.path.insert(0, str(Path(__file__).parent))


@dg.asset(code_version="7")
def numbers() -> pl.DataFrame:
    """Numbers."""
    return pl.DataFrame({"n": [1, 2, 3]})


@dg.asset(code_version="1")
def doubled(numbers: pl.DataFrame) -> pl.DataFrame:
    """Doubled."""
    return numbers.with_columns(n=pl.col("n") * 2)


@dg.asset
def not_a_frame() -> dict:
    """Not a frame."""
    return {"a": 1}


def test_round_trip_metadata_and_lineage(tmp_path):
    io = PolarsParquetIOManager(data_dir=str(tmp_path))
    result = dg.materialize([numbers, doubled], resources={"io_manager": io})
    assert result.success
    meta = result.asset_materializations_for_node("doubled")[0].metadata
    assert meta["dagster/row_count"].value == 3
    assert meta["path"].value == "tables/doubled/data.parquet"  # relative: a copied directory's entry stays true
    path = tmp_path / meta["path"].value
    assert pl.read_parquet(path)["n"].to_list() == [2, 4, 6]
    assert [c.name for c in meta["dagster/column_schema"].schema.columns] == ["n"]
    record = (
        Catalog(tmp_path)
        .query(
            "select code_version, inputs->>'$[0].asset' as up, inputs->>'$[0].data_version' as v "
            "from materializations where asset_key = 'doubled'"
        )
        .row(0)
    )
    numbers_version = (
        Catalog(tmp_path).query("select data_version from materializations where asset_key = 'numbers'").item()
    )
    assert record == ("1", "numbers", numbers_version)
    assert Catalog(tmp_path).query("select sum(n) from doubled").item() == 12


def test_rejects_non_frames_without_pickling(tmp_path):
    io = PolarsParquetIOManager(data_dir=str(tmp_path))
    with pytest.raises(Exception, match="stores Polars frames, got dict"):
        dg.materialize([not_a_frame], resources={"io_manager": io})
    assert not (tmp_path / "tables").exists()


@pytest.mark.processes
def test_multiprocess_run_with_catalog_held_open(tmp_path, monkeypatch):
    import concurrent_defs

    monkeypatch.setenv("DAGSTER_IR_DATA", str(tmp_path / "data"))
    catalog = Catalog(tmp_path / "data")
    catalog.sync()
    holder = duckdb.connect(str(catalog.path))  # a user's duckdb shell holds the catalog
    try:
        (tmp_path / "home").mkdir()
        with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
            result = dg.execute_job(dg.reconstructable(concurrent_defs.parallel_job), instance=instance)
            assert result.success
            starts = {
                e.step_key: e.timestamp
                for e in instance.all_logs(result.run_id)
                if e.dagster_event and e.dagster_event.event_type_value == "STEP_START"
            }
            ends = {
                e.step_key: e.timestamp
                for e in instance.all_logs(result.run_id)
                if e.dagster_event and e.dagster_event.event_type_value == "STEP_SUCCESS"
            }
            assert max(starts.values()) < min(ends.values()), "the two steps did not overlap"
    finally:
        holder.close()
    assert len(catalog.pending()) == 2  # journaled, not lost
    assert catalog.sync()
    assert catalog.query("select count(*) from materializations").item() == 2
    assert catalog.query("select count(*) from right_table").item() == 5


def test_a_poisoned_journal_does_not_fail_materializations(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.pending_dir.mkdir(parents=True)
    (catalog.pending_dir / "00000000000000000001-empty.json").write_text("")  # a record cut short by a kill
    io = PolarsParquetIOManager(data_dir=str(tmp_path))
    result = dg.materialize([numbers, doubled], resources={"io_manager": io})
    assert result.success
    assert result.asset_materializations_for_node("doubled")[0].metadata["catalog"].value == "synced"
    assert catalog.query("select asset_key from materializations order by 1").to_series().to_list() == [
        "doubled",
        "numbers",
    ]
    assert [p.name for p in catalog.rejected()] == ["00000000000000000001-empty.json"]
    assert catalog.pending() == []


def _manifest_asset(root: Path):
    @dg.asset(name="manifest")
    def manifest() -> pl.DataFrame:
        """Checkpoints under the data directory beside names and paths that are not."""
        return pl.DataFrame(
            {
                "path": [str(root / "files" / "a"), "/opt/elsewhere/b"],
                "init": [str(root / "files" / "start"), "bert-base-uncased"],
                "relevance_path": [str(root / "files" / "r"), str(root)],
                "selection_path": [None, "/opt/elsewhere/s"],
            }
        )

    return manifest


@dg.asset(name="reader")
def reader(manifest: pl.DataFrame) -> pl.DataFrame:
    """What a downstream asset is given."""
    return manifest.rename({c: f"read_{c}" for c in manifest.columns})


def test_a_copied_data_directory_gives_its_own_paths_and_stores_none_of_the_original(tmp_path):
    import shutil

    first, copy = tmp_path / "first", tmp_path / "copy"
    io = PolarsParquetIOManager(data_dir=str(first))
    assert dg.materialize([_manifest_asset(first), reader], resources={"io_manager": io}).success
    stored = pl.read_parquet(first / "tables" / "manifest" / "data.parquet")
    assert stored.to_dict(as_series=False) == {
        "path": ["files/a", "/opt/elsewhere/b"],
        "init": ["./files/start", "bert-base-uncased"],
        "relevance_path": ["./files/r", "."],
        "selection_path": [None, "/opt/elsewhere/s"],
    }
    shutil.copytree(first, copy)
    shutil.rmtree(first)
    io = PolarsParquetIOManager(data_dir=str(copy))
    # the copy rebuilds `reader` from its own `manifest` table
    result = dg.materialize([_manifest_asset(copy), reader], selection=["reader"], resources={"io_manager": io})
    assert result.success
    read = pl.read_parquet(copy / "tables" / "reader" / "data.parquet")
    # `reader` stores what it was given, under its own names: absolute paths into the copy
    assert read.to_dict(as_series=False) == {
        "read_path": [str(copy / "files" / "a"), "/opt/elsewhere/b"],
        "read_init": [str(copy / "files" / "start"), "bert-base-uncased"],
        "read_relevance_path": [str(copy / "files" / "r"), str(copy)],
        "read_selection_path": [None, "/opt/elsewhere/s"],
    }
