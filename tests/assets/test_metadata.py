"""UI metadata: previews and column descriptions on every table, report headlines under 64 KB."""

import dagster as dg
import numpy as np
import polars as pl

from assets.io_managers import PolarsParquetIOManager
from assets.metadata import COLUMN_DOCS, HEADLINE_LIMIT, headline_markdown
from dagster_ir.evaluation import ReportBook, ReportConfig, ReportFigure, SignificanceConfig, build_report
from dagster_ir.schemas import PER_QUERY_EVAL


@dg.asset
def segments() -> pl.DataFrame:
    """Seven segments, one with a long text."""
    return pl.DataFrame({"article_id": [str(i) for i in range(7)], "segment_no": list(range(1, 8)),
                         "text": ["x" * 500] + ["short"] * 6, "odd": [1.5] * 7})


def test_tables_get_a_preview_and_described_columns(tmp_path):
    result = dg.materialize([segments], resources={"io_manager": PolarsParquetIOManager(data_dir=str(tmp_path))})
    meta = result.asset_materializations_for_node("segments")[0].metadata
    table = meta["preview"].value
    assert len(table.records) == 5 and [c.name for c in table.schema.columns] == ["article_id", "segment_no", "text", "odd"]
    first = table.records[0].data
    assert first["article_id"] == "0" and first["segment_no"] == 1 and len(first["text"]) == 80
    described = {c.name: c.description for c in meta["dagster/column_schema"].schema.columns}
    assert described["article_id"] == COLUMN_DOCS["article_id"] and described["odd"] is None
    assert meta["row_count"].value == 7


def _per_query(runs: int, queries: int = 40) -> pl.DataFrame:
    rng = np.random.default_rng(1)
    rows = [(f"run{r}" if r else "bm25", f"q{q}", m, float(rng.random()))
            for r in range(runs) for q in range(queries) for m in ("nDCG@10", "AP")]
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
