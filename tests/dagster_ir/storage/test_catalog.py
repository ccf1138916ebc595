import multiprocessing as mp

import duckdb
import polars as pl

from dagster_ir.storage.catalog import Catalog, MaterializationRecord
from dagster_ir.storage.parquet import table_path, table_root, write_table


def _write(data_dir, asset, partition, values):
    path = table_path(data_dir, [asset], partition)
    write_table(pl.DataFrame({"x": values}), path, partition=partition)
    return MaterializationRecord(
        asset_key=asset, partition=partition, path=str(path), rows=len(values),
        table_root=str(table_root(data_dir, [asset])), partitioned=partition is not None,
        code_version="1", config={"k": 1}, inputs=[{"asset": "up", "partition": None}],
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
    meta = catalog.query("select asset_key, rows, code_version, config::varchar as c from materializations order by asset_key")
    assert meta.rows()[0] == ("graph", 1, "1", '{"k": 1}')
    assert catalog.pending() == []


def test_records_survive_a_catalog_held_by_another_process(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.record(_write(tmp_path, "t", None, [1]))
    holder = duckdb.connect(str(catalog.path))  # a user's duckdb shell in this process...
    try:
        # ...other processes cannot open it; recording must not fail, only stay pending
        ctx = mp.get_context("spawn")
        with ctx.Pool(2) as pool:
            synced = pool.starmap(_record_in_child, [(str(tmp_path), i) for i in range(4)])
        assert synced == [False] * 4
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
