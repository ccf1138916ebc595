"""UI metadata: previews and column descriptions on every table, report headlines under 64 KB, results as
one table, events capped, kinds and sources described."""

from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl

from assets.lib.io_managers import PolarsParquetIOManager
from assets.lib.metadata import COLUMN_DOCS, HEADLINE_LIMIT, headline_markdown
from dagster_ir.evaluation import ReportBook, ReportConfig, ReportFigure, SignificanceConfig, build_report
from dagster_ir.schemas import PER_QUERY_EVAL


@dg.asset
def segments() -> pl.DataFrame:
    """Seven segments, one with a long text."""
    return pl.DataFrame(
        {
            "article_id": [str(i) for i in range(7)],
            "segment_no": list(range(1, 8)),
            "text": ["x" * 500] + ["short"] * 6,
            "odd": [1.5] * 7,
        }
    )


def test_tables_get_a_preview_and_described_columns(tmp_path):
    result = dg.materialize([segments], resources={"io_manager": PolarsParquetIOManager(data_dir=str(tmp_path))})
    meta = result.asset_materializations_for_node("segments")[0].metadata
    table = meta["preview"].value
    assert len(table.records) == 5 and [c.name for c in table.schema.columns] == [
        "article_id",
        "segment_no",
        "text",
        "odd",
    ]
    first = table.records[0].data
    assert first["article_id"] == "0" and first["segment_no"] == 1 and len(first["text"]) == 80
    described = {c.name: c.description for c in meta["dagster/column_schema"].schema.columns}
    assert described["article_id"] == COLUMN_DOCS["article_id"] and described["odd"] is None
    assert meta["dagster/row_count"].value == 7


def _per_query(runs: int, queries: int = 40) -> pl.DataFrame:
    rng = np.random.default_rng(1)
    rows = [
        (f"run{r}" if r else "bm25", f"q{q}", m, float(rng.random()))
        for r in range(runs)
        for q in range(queries)
        for m in ("nDCG@10", "AP")
    ]
    return pl.DataFrame(rows, schema=PER_QUERY_EVAL, orient="row")


def test_report_headline_holds_the_main_tables_and_stays_under_the_limit():
    fast = ReportConfig(significance=SignificanceConfig(n_resamples=50))
    report = build_report(_per_query(3), "bm25", title="wiki-car: test queries", config=fast)
    text = headline_markdown(report, "/data/files/reports/wiki-car/report.html")
    assert text.startswith("# wiki-car: test queries") and "| run1 |" in text.replace("**", "")
    assert text.rstrip().endswith("`/data/files/reports/wiki-car/report.html`")
    assert "data:image" not in text and "left out" not in text
    sections = [build_report(_per_query(8), "bm25", title=f"Section {i}", config=fast) for i in range(8)]
    book = ReportBook.of("wiki-car: methods", sections)
    full = len(book.to_markdown(None).encode())
    small = headline_markdown(book, "report.html", limit=3_000)
    assert full > 3_000 and len(small.encode()) < 3_000
    assert "## Section 0" in small and "left out here to keep this entry under 3 KB" in small
    assert len(headline_markdown(book, "report.html").encode()) < HEADLINE_LIMIT
    recall = ReportFigure("recall", "Recall by depth", b"\x89PNG" + b"0" * 3000)
    with_figure = build_report(_per_query(3), "bm25", title="t", config=fast, extra_figures=[recall])
    assert "![Recall by depth](data:image/png;base64," in headline_markdown(with_figure, "r.html")
    assert "data:image" not in headline_markdown(with_figure, "r.html", limit=4_000)  # no room: tables only


def test_report_results_are_one_table_of_runs_by_measures():
    from assets.lib.metadata import results_table
    from dagster_ir.evaluation import aggregate

    table = results_table(aggregate(_per_query(3)), ("nDCG@10", "RR@10", "AP")).value
    assert [c.name for c in table.schema.columns] == ["run_name", "nDCG@10", "AP"]  # RR@10 not measured
    assert [r.data["run_name"] for r in table.records] == ["bm25", "run1", "run2"]
    assert all(isinstance(r.data["AP"], float) for r in table.records)


def test_capped_replaces_the_largest_entries_until_the_event_fits():
    from assets.lib.metadata import capped, metadata_size

    big = dg.MetadataValue.md("x" * 150_000)
    middle = dg.MetadataValue.md("y" * 40_000)
    out = capped({"big": big, "middle": middle, "n": 3}, limit=100_000)
    assert out["middle"] is middle and out["n"] == 3
    assert out["big"].value.startswith("left out: 150 KB would pass this event's 100 KB metadata limit")
    assert sum(metadata_size(v) for v in out.values()) <= 100_000
    small = {"a": dg.MetadataValue.md("z" * 10)}
    assert capped(small) == small


def test_a_large_figure_is_named_not_inlined():
    from assets.lib.metadata import INLINE_IMAGE_LIMIT

    fast = ReportConfig(significance=SignificanceConfig(n_resamples=50))
    large = ReportFigure("recall", "Recall by depth", b"\x89PNG" + b"0" * (INLINE_IMAGE_LIMIT + 1))
    report = build_report(_per_query(3), "bm25", title="t", config=fast, extra_figures=[large])
    text = headline_markdown(report, "r.html")
    assert "data:image" not in text and "`figures/recall.png`" in text


def test_a_chart_too_large_to_inline_becomes_a_table(monkeypatch):
    import assets.lib.metadata
    from assets.lib.plots import bar_chart_markdown

    assert bar_chart_markdown([1, 2], [0.5, 0.25], "step", "loss").value.startswith("![loss by step](data:image/png")
    monkeypatch.setattr(assets.lib.metadata, "INLINE_IMAGE_LIMIT", 100)
    table = bar_chart_markdown([1, 2], [0.5, 0.25], "step", "loss").value
    assert [r.data for r in table.records] == [{"step": "1", "loss": 0.5}, {"step": "2", "loss": 0.25}]


def test_column_descriptions_are_keyed_by_table_where_a_name_is_shared():
    from assets.lib.metadata import column_description
    from dagster_ir.methods.cet.lab import MANIFEST_SCHEMA

    assert column_description("wiki_stats", "value") == "the statistic's value"
    assert "query" in column_description("evaluation_report", "value")
    assert column_description("anything", "no_such_column") is None
    php_stage = ["stage", "path", "init", "examples", "steps", "seconds", "examples_per_s", "seed", "skipped"]
    cross_encoder = [
        "run_name",
        "init",
        "path",
        "examples",
        "steps",
        "seconds",
        "examples_per_s",
        "best_epoch",
        "dev_score",
        "train_seed",
        "fold",
        "seed",
    ]
    for table, columns in [
        ("php_hp", php_stage),
        ("cross_encoder", cross_encoder),
        ("cet", list(MANIFEST_SCHEMA)),
        ("word2vec", ["path", "words", "dim", "source", "seed", "epochs", "remove_stopwords", "lemmatize"]),
        ("bm25_index", ["path", "documents", "empty", "seconds"]),
    ]:
        missing = [c for c in columns if column_description(table, c) is None]
        assert not missing, (table, missing)


def test_definitions_show_kinds_sources_and_a_named_location():
    import yaml

    from assets.definitions import defs

    graph = defs.resolve_asset_graph()
    unkinded = [n.key.to_user_string() for n in graph.asset_nodes if n.is_materializable and not n.kinds]
    assert not unkinded
    assert graph.get(dg.AssetKey("cross_encoder")).kinds == {"polars", "parquet", "pytorch"}
    for source in ("wiki_dump_file", "collection_config", "collection_settings", "imported_runs"):
        node = graph.get(dg.AssetKey(source))
        assert node.kinds and {"observes", "a change makes stale"} <= set(node.metadata), source
    workspace = yaml.safe_load((Path(__file__).parents[2] / "workspace.yaml").read_text())
    assert workspace["load_from"][0]["python_module"]["location_name"] == "dagster-ir"
