import multiprocessing as mp
import shutil
import subprocess
import sys

import duckdb
import polars as pl
import pytest

from dagster_ir.storage.catalog import Catalog, CatalogBusyError, CatalogQueryError, MaterializationRecord
from dagster_ir.storage.parquet import table_path, table_root, write_table


def _write(data_dir, asset, partition, values):
    path = table_path(data_dir, [asset], partition)
    write_table(pl.DataFrame({"x": values}), path, partition=partition)
    return MaterializationRecord(
        asset_key=asset,
        partition=partition,
        path=str(path),
        rows=len(values),
        table_root=str(table_root(data_dir, [asset])),
        partitioned=partition is not None,
        code_version="1",
        config={"k": 1},
        inputs=[{"asset": "up", "partition": None}],
    )


def test_views_cover_all_partitions_with_partition_column(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.record(_write(tmp_path, "links", "a/b.xml", [1, 2]))  # a key with a slash
    catalog.record(_write(tmp_path, "links", "c.xml", [3]))
    catalog.record(_write(tmp_path, "graph", None, [7]))
    links = catalog.query("select partition, sum(x) as s from links group by 1 order by 1")
    assert links.rows() == [("a/b.xml", 3), ("c.xml", 3)]
    graph = catalog.query("select x, partition from graph")
    assert graph.rows() == [(7, None)]
    meta = catalog.query(
        "select asset_key, rows, code_version, config::varchar as c from materializations order by asset_key"
    )
    assert meta.rows()[0] == ("graph", 1, "1", '{"k": 1}')
    assert catalog.pending() == []


@pytest.mark.processes
def test_records_survive_a_catalog_held_by_another_process(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.record(_write(tmp_path, "t", None, [1]))
    holder = duckdb.connect(str(catalog.path))  # a user's duckdb shell in this process...
    try:
        # ...other processes cannot open it; recording must not fail, only stay pending
        ctx = mp.get_context("spawn")
        with ctx.Pool(2) as pool:
            synced = pool.starmap(_record_in_child, [(str(tmp_path), i) for i in range(4)])
        assert synced == ["pending"] * 4
        assert len(catalog.pending()) == 4
    finally:
        holder.close()
    assert catalog.sync() is True
    assert catalog.query("select count(*) from materializations").item() == 5
    assert catalog.pending() == []


def _record_in_child(data_dir, i):
    return Catalog(data_dir).record(_write(data_dir, f"child{i}", None, [i]))


def test_concurrent_writers_all_land(tmp_path):
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        pool.starmap(_record_in_child, [(str(tmp_path), i) for i in range(8)])
    catalog = Catalog(tmp_path)
    assert catalog.query("select count(*) from materializations").item() == 8
    assert catalog.query("select sum(x) from child7").item() == 7


def test_a_poisoned_journal_blocks_nothing(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.pending_dir.mkdir(parents=True)
    (catalog.pending_dir / "00000000000000000001-empty.json").write_text("")
    (catalog.pending_dir / "00000000000000000002-torn.json").write_text('{"asset_key": "t", "partit')
    (catalog.pending_dir / "00000000000000000003-nokey.json").write_text('{"path": "x"}')
    (catalog.pending_dir / "notes.txt").write_text("copied here by hand")  # never folded: rejected, not kept
    (catalog.pending_dir / ".x.json.0000abcd-1-ff.tmp").write_text("")  # a writer's temporary file: left alone
    assert catalog.record(_write(tmp_path, "good", None, [1, 2])) == "synced"
    assert catalog.query("select asset_key from materializations").rows() == [("good",)]
    assert catalog.query("select sum(x) from good").item() == 3
    assert catalog.pending() == []
    rejected = sorted(p.name for p in catalog.rejected_dir.iterdir())
    assert rejected == [
        "00000000000000000001-empty.json",
        "00000000000000000001-empty.json.reason.txt",
        "00000000000000000002-torn.json",
        "00000000000000000002-torn.json.reason.txt",
        "00000000000000000003-nokey.json",
        "00000000000000000003-nokey.json.reason.txt",
        "notes.txt",
        "notes.txt.reason.txt",
    ]
    assert [p.name for p in catalog.rejected()][-1] == "notes.txt"
    assert "not a journal record" in (catalog.rejected_dir / "notes.txt.reason.txt").read_text()
    assert [p.name for p in catalog.pending_dir.iterdir()] == [".x.json.0000abcd-1-ff.tmp"]
    reason = (catalog.rejected_dir / "00000000000000000002-torn.json.reason.txt").read_text()
    assert "00000000000000000002-torn.json" in reason and "not valid JSON" in reason
    assert "asset_key" in (catalog.rejected_dir / "00000000000000000003-nokey.json.reason.txt").read_text()


def test_record_never_raises(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.path.write_bytes(b"this is not a duckdb file" * 100)  # a damaged catalog
    record = _write(tmp_path, "t", None, [1])
    status = catalog.record(record)
    assert status == "pending" and len(catalog.pending()) == 1  # journaled; folded once repaired
    catalog.path.unlink()
    assert catalog.sync() is True
    assert catalog.query("select count(*) from materializations").item() == 1
    (tmp_path / "catalog" / "pending").rmdir()
    (tmp_path / "catalog" / "pending").write_text("a file where the journal folder should be")
    status = catalog.record(_write(tmp_path, "t", None, [2]))
    assert status.startswith("not journaled:") and "pending" in status


def test_query_accepts_only_read_statements(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.record(_write(tmp_path, "t", None, [1, 2]))
    target = tmp_path / "tables" / "t" / "data.parquet"
    before = target.read_bytes()
    for sql in [
        f"copy (select 42 as x) to '{target}' (format parquet)",
        "select 1; copy (select 1) to 'x.csv'",
        f"attach '{tmp_path / 'other.duckdb'}' as other (read_only false)",
        "create table z as select 1",
        "pragma enable_profiling",
        "set threads = 1",
    ]:
        with pytest.raises(CatalogQueryError, match="only read statements"):
            catalog.query(sql)
    assert target.read_bytes() == before
    assert not (tmp_path / "other.duckdb").exists()
    assert catalog.query("with a as (select x from t) select sum(x) from a").item() == 3
    assert catalog.query("describe t").height >= 1


def test_a_copied_data_directory_reads_its_own_tables(tmp_path, monkeypatch):
    original = tmp_path / "original"
    catalog = Catalog(original)
    catalog.record(_write(original, "t", None, [1, 2]))
    catalog.record(_write(original, "p", "a", [5]))
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    write_table(pl.DataFrame({"x": [100]}), table_path(copy, ["t"], None))
    write_table(pl.DataFrame({"x": [7]}), table_path(copy, ["p"], "a"), partition="a")
    assert Catalog(copy).query("select sum(x) from t").item() == 100
    assert Catalog(copy).query("select sum(x) from p").item() == 7
    assert Catalog(original).query("select sum(x) from t").item() == 3
    monkeypatch.chdir(copy)  # a plain duckdb shell opened in the data directory
    with duckdb.connect("catalog.duckdb", read_only=True) as con:
        assert con.sql("select sum(x) from t").fetchall() == [(100,)]


def test_query_on_a_held_catalog_says_so(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.record(_write(tmp_path, "t", None, [1]))
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(catalog.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(CatalogBusyError, match="held by another process"):
            catalog.query("select 1", open_timeout=0.2)
    finally:
        holder.kill()
        holder.wait()


_HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("holding", flush=True)
time.sleep(60)
"""
