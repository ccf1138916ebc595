"""Materialize the Wikipedia assets on the bundled sample, incrementally, into a temp directory."""

import bz2

import dagster as dg
import pytest

from assets.cli.commands import add_dump
from assets.cli.updates import update_all
from assets.definitions import defs, resources
from assets.lib.staleness import stale_partitions
from dagster_ir.storage.catalog import Catalog
from dagster_ir.storage.dumps import sample_dump_path

pytestmark = pytest.mark.slow
WIKI = dg.AssetSelection.groups("wikipedia")

EXTRA_DUMP = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
  <page><title>Zebra crossing</title><ns>0</ns><id>900001</id><revision><text xml:space="preserve">
A '''zebra crossing''' is a kind of [[Pedestrian crossing|crossing]] used in the [[United Kingdom]] and
elsewhere. {words}
</text></revision></page>
</mediawiki>
"""


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    with dg.instance_for_test(temp_dir=str(tmp_path_factory.mktemp("home"))) as instance:
        add_dump(root, str(sample_dump_path()), instance)
        first = update_all(defs, instance, resources=resources(str(root)), log=lambda _: None, selection=WIKI)
        yield root, instance, first


def test_everything_materializes_and_is_in_the_catalog(pipeline):
    root, _, first = pipeline
    assert first.materialized == 8  # every asset (partition) exactly once
    catalog = Catalog(root)
    for view in [
        "wiki_dump",
        "wiki_articles",
        "wiki_redirects",
        "wiki_raw_links",
        "wiki_links",
        "wiki_link_graph",
        "php_groups",
        "wiki_stats",
    ]:
        assert catalog.query(f"select count(*) from {view}").item() > 0, view
    partitions = catalog.query("select distinct partition from wiki_articles").to_series().to_list()
    assert partitions == [sample_dump_path().name]
    edges = catalog.query("select count(*) from wiki_link_graph").item()
    stat = catalog.query("select value from wiki_stats where statistic = 'in_corpus_edges'").item()
    assert stat == edges


def test_rerun_with_nothing_changed_is_up_to_date(pipeline):
    root, instance, _ = pipeline
    assert stale_partitions(defs, instance, WIKI) == []
    again = update_all(defs, instance, resources=resources(str(root)), log=lambda _: None, selection=WIKI)
    assert again.runs == []


def test_new_dump_file_is_parsed_alone(pipeline, tmp_path):
    root, instance, _ = pipeline
    dump = tmp_path / "extra.xml.bz2"
    dump.write_bytes(bz2.compress(EXTRA_DUMP.format(words="word " * 120).encode()))
    key = add_dump(root, str(dump), instance)
    report = update_all(defs, instance, resources=resources(str(root)), log=lambda _: None, selection=WIKI)
    partitioned_runs = [(p, keys) for p, keys in report.runs if p is not None]
    assert {p for p, _ in partitioned_runs} == {key}, "only the new dump file is parsed"
    assert "wiki_links" in {k for _, keys in report.runs for k in keys}
    articles = Catalog(root).query("select count(distinct partition) from wiki_articles").item()
    assert articles == 2
    assert stale_partitions(defs, instance, WIKI) == []


def test_out_of_core_links_equal_the_in_memory_rules(pipeline):
    """wiki_links (DuckDB under a memory_limit) holds the rows, in order, of the in-memory Polars rules."""
    import polars as pl

    from dagster_ir.wiki import latest_articles, latest_links, resolve_links

    root, _, _ = pipeline
    tables = root / "tables"
    scan = {
        name: pl.scan_parquet(str(tables / name / "*" / "data.parquet"))
        for name in ("wiki_articles", "wiki_raw_links", "wiki_redirects")
    }
    if len(list((tables / "wiki_articles").glob("*/data.parquet"))) == 1:  # one dump: the IO manager drops it
        scan = {name: frame.drop("partition") for name, frame in scan.items()}
    latest = latest_articles(scan["wiki_articles"])
    raw = latest_links(scan["wiki_raw_links"], latest).drop("partition", strict=False)
    expected = resolve_links(
        raw,
        latest.segments.select("article_id", "title").unique(),
        scan["wiki_redirects"].drop("partition", strict=False),
    ).collect()
    stored = pl.read_parquet(tables / "wiki_links" / "data.parquet")
    assert expected.height > 1000 and stored.equals(expected)


def test_groups_check_ran_over_the_stored_files_and_passed(pipeline):
    """The blocking check `php_groups_disjoint_and_covering` (DuckDB over the Parquet files) ran and passed."""
    _, instance, _ = pipeline
    key = dg.AssetCheckKey(dg.AssetKey("php_groups"), "php_groups_disjoint_and_covering")
    records = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
    assert records, "the check did not run"
    evaluation = records[0].event.dagster_event.event_specific_data
    assert evaluation.passed, evaluation.metadata
    assert evaluation.metadata["problems"].value == "none"


def test_stored_tables_have_the_schema_dtypes(pipeline):
    """The tables stored from Parquet parts (the parse's, DuckDB's files) keep the schemas' dtypes."""
    import polars as pl

    from dagster_ir.schemas import ARTICLES, LINK_GRAPH, LINKS, PHP_GROUPS, RAW_LINKS, REDIRECTS

    root, _, _ = pipeline
    tables = root / "tables"
    for name, schema in [("wiki_articles", ARTICLES), ("wiki_raw_links", RAW_LINKS), ("wiki_redirects", REDIRECTS)]:
        for path in (tables / name).glob("*/data.parquet"):
            assert pl.read_parquet_schema(path) == {**schema, "partition": pl.String}, name
    for name, schema in [("wiki_links", LINKS), ("wiki_link_graph", LINK_GRAPH), ("php_groups", PHP_GROUPS)]:
        assert pl.read_parquet_schema(tables / name / "data.parquet") == dict(schema), name
