"""Lineage in the catalog: multi-output steps record their inputs, the walk reaches the root."""

import dagster as dg
import polars as pl
import pytest

from assets.lib.io_managers import PolarsParquetIOManager
from dagster_ir.storage.catalog import Catalog
from dagster_ir.storage.lineage import render

parts = dg.StaticPartitionsDefinition(["x", "y"])


@dg.asset(code_version="1", partitions_def=parts)
def dump(context) -> pl.DataFrame:
    """The root: one row per partition."""
    return pl.DataFrame({"file": [f"{context.partition_key}.xml"]})


@dg.multi_asset(
    outs={"pages": dg.AssetOut(code_version="2"), "links": dg.AssetOut(code_version="2")}, partitions_def=parts
)
def parse(dump: pl.DataFrame):
    """Two outputs of one step, both from the dump."""
    return dump.with_columns(page=pl.lit(1)), dump.with_columns(link=pl.lit(2))


@dg.asset(
    code_version="3",
    ins={
        "pages": dg.AssetIn(partition_mapping=dg.AllPartitionMapping()),
        "links": dg.AssetIn(partition_mapping=dg.AllPartitionMapping()),
    },
)
def graph(pages: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """Unpartitioned, reads every partition of both outputs."""
    return pl.DataFrame({"edges": [pages.height + links.height]})


@dg.asset(code_version="1")
def runs(graph: pl.DataFrame) -> pl.DataFrame:
    """A run table: run names a and b."""
    return pl.DataFrame({"run_name": ["a", "b"], "query_id": ["q", "q"], "score": [1.0, 2.0]})


@dg.asset(code_version="1")
def other_runs() -> pl.DataFrame:
    """Another run table, run c, from nothing."""
    return pl.DataFrame({"run_name": ["c"], "query_id": ["q"], "score": [3.0]})


@dg.asset(code_version="4")
def model_report(runs: pl.DataFrame, other_runs: pl.DataFrame) -> pl.DataFrame:
    """Per-run values, a report named like the real one."""
    rows = pl.concat([runs, other_runs])
    return rows.select("run_name", pl.lit("nDCG@10").alias("measure"), pl.col("score").alias("value"))


ALL = [dump, parse, graph, runs, other_runs, model_report]


def _materialize(tmp_path, instance):
    io = PolarsParquetIOManager(data_dir=str(tmp_path))
    for key in parts.get_partition_keys():
        assert dg.materialize([dump, parse], partition_key=key, resources={"io_manager": io}, instance=instance).success
    assert dg.materialize(
        ALL, selection=["graph", "runs", "other_runs", "model_report"], resources={"io_manager": io}, instance=instance
    ).success
    return Catalog(tmp_path)


def test_every_output_of_a_multi_output_step_records_its_inputs(tmp_path):
    with dg.instance_for_test() as instance:
        catalog = _materialize(tmp_path, instance)
    edges = catalog.query(
        "select child_asset, child_partition, parent_asset, parent_partition from lineage_edges "
        "where child_asset in ('pages', 'links') order by 1, 2"
    )
    assert edges.rows() == [
        ("links", "x", "dump", "x"),
        ("links", "y", "dump", "y"),
        ("pages", "x", "dump", "x"),
        ("pages", "y", "dump", "y"),
    ]


def test_lineage_macro_reaches_the_root_through_every_intermediate(tmp_path):
    with dg.instance_for_test() as instance:
        catalog = _materialize(tmp_path, instance)
    walked = catalog.query(
        "select depth, asset, partition, code_version from lineage('model_report') order by depth, asset, partition"
    )
    assert walked.rows() == [
        (0, "model_report", None, "4"),
        (1, "other_runs", None, "1"),
        (1, "runs", None, "1"),
        (2, "graph", None, "3"),
        (3, "links", "x", "2"),
        (3, "links", "y", "2"),
        (3, "pages", "x", "2"),
        (3, "pages", "y", "2"),
        (4, "dump", "x", "1"),
        (4, "dump", "y", "1"),
    ]
    one = catalog.query("select asset, partition from lineage('pages', 'y') order by depth")
    assert one.rows() == [("pages", "y"), ("dump", "y")]
    read_by = catalog.query("select len(read_by) from lineage('model_report') where asset = 'dump' and partition = 'x'")
    assert read_by.item() == 2  # pages [x] and links [x]


def test_report_rows_carry_the_record_ids_of_their_runs(tmp_path):
    with dg.instance_for_test() as instance:
        catalog = _materialize(tmp_path, instance)
    ids = dict(catalog.query("select asset_key, record_id from materializations where asset_key like '%runs'").rows())
    rows = catalog.query("select run_name, measure, record_ids from report_row_lineage order by run_name")
    assert rows.rows() == [
        ("a", "nDCG@10", [ids["runs"]]),
        ("b", "nDCG@10", [ids["runs"]]),
        ("c", "nDCG@10", [ids["other_runs"]]),
    ]


def test_walk_follows_the_newest_record_and_renders_a_tree(tmp_path):
    with dg.instance_for_test() as instance:
        catalog = _materialize(tmp_path, instance)
        io = PolarsParquetIOManager(data_dir=str(tmp_path))
        # the dump of x again: the old graph still read the old pages, so its lineage is unchanged
        assert dg.materialize([dump], partition_key="x", resources={"io_manager": io}, instance=instance).success
    (tree,) = catalog.lineage("graph")
    assert [(p.asset, p.partition) for p in tree.parents] == [
        ("links", "x"),
        ("links", "y"),
        ("pages", "x"),
        ("pages", "y"),
    ]
    newest_dump = catalog.query(
        "select record_id from materializations where asset_key = 'dump' and partition = 'x' "
        "order by materialized_at desc limit 1"
    ).item()
    assert tree.parents[0].parents[0].record_id != newest_dump
    text = render([tree])
    assert text.splitlines()[0].startswith("graph  code=3")
    assert "    dump [x]  code=1" in text and "(see above)" not in text.splitlines()[1]
    with pytest.raises(KeyError, match="no catalog record of asset 'nope'"):
        catalog.lineage("nope")


def test_lineage_command_prints_the_tree_and_refuses_an_unknown_asset(tmp_path, monkeypatch, capsys):
    from assets.cli.main import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    with dg.instance_for_test() as instance:
        _materialize(tmp_path / "data", instance)
    assert main(["--data", str(tmp_path / "data"), "lineage", "pages", "--partition", "x"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("pages [x]  code=2") and lines[1].startswith("  dump [x]  code=1")
    assert lines[1].endswith("data.parquet") and len(lines) == 2
    assert main(["--data", str(tmp_path / "data"), "lineage", "nope"]) == 1
    assert capsys.readouterr().err.startswith("dagster-ir lineage: no catalog record of asset 'nope'")
