"""A report's tables as data: what `dagster-ir reproduce` prints, read back section by section."""

import json

import numpy as np
import polars as pl
import pytest

from dagster_ir.evaluation import ReportBook, ReportConfig, SignificanceConfig, build_report, seed_spread
from dagster_ir.evaluation.summary import (
    SummaryFormatError,
    book_summary,
    format_summary,
    read_summary,
    write_summary,
)
from dagster_ir.schemas import PER_QUERY_EVAL

FAST = ReportConfig(significance=SignificanceConfig(n_resamples=200), difference_plots=False)


def per_query(seeds=(None,)) -> pl.DataFrame:
    """bm25 and a run 0.2 better on 20 queries (per seed, the better run shifted by the seed/100)."""
    rng = np.random.default_rng(3)
    base = rng.random(20) * 0.5
    rows = [("bm25", f"q{i}", "nDCG@10", float(v), None) for i, v in enumerate(base)]
    for seed in seeds:
        shift = 0.2 + (seed or 0) / 100
        rows += [("better", f"q{i}", "nDCG@10", float(v + shift), seed) for i, v in enumerate(base)]
    return pl.DataFrame(rows, schema={**PER_QUERY_EVAL, "seed": pl.Int64}, orient="row")


def book(seeds=(None,)) -> ReportBook:
    table = per_query(seeds)
    averaged = table.group_by("run_name", "query_id", "measure", maintain_order=True).agg(pl.col("value").mean())
    first = build_report(averaged, "bm25", ["nDCG@10"], "Section one", "Against bm25.", FAST, spread=seed_spread(table))
    second = build_report(averaged.filter(pl.col("query_id") != "q0"), "better", ["nDCG@10"], "Section two", "", FAST)
    return ReportBook.of("Methods on x", [first, second])


def test_summary_keeps_each_section_with_its_rows_and_marks(tmp_path):
    summary = read_summary(write_summary(book(), tmp_path))
    assert [s["title"] for s in summary["sections"]] == ["Section one", "Section two"]
    results = summary["sections"][0]["tables"]
    assert len(results) == 1  # one seed: no seed table
    assert results[0]["header"][1:] == ["nDCG@10"]
    rows = dict((label, cells) for label, cells in results[0]["rows"])
    assert set(rows) == {"bm25 (baseline)", "better"}
    mean = per_query().filter(pl.col("run_name") == "better")["value"].mean()
    assert rows["better"][0].startswith(f"{mean:.4f}") and rows["better"][0].endswith("*†")
    assert "*" not in rows["bm25 (baseline)"][0]


def test_several_seeds_add_the_seed_table():
    summary = book_summary(book(seeds=(0, 1, 2)))
    tables = summary["sections"][0]["tables"]
    assert len(tables) == 2
    text = json.dumps(tables[1])
    assert "0.01" in text  # the spread over the three seeds: sd of 0.20, 0.21, 0.22 is 0.01


def test_format_summary_text_and_markdown(tmp_path):
    summary = read_summary(write_summary(book(), tmp_path))
    text = format_summary(summary)
    assert text.index("Section one") < text.index("Section two")
    assert "Against bm25." in text and "better" in text
    markdown = format_summary(summary, markdown=True)
    assert "### Section one" in markdown and "|---|---:|" in markdown


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{oops", "not valid JSON"),
        ('{"title": "x"}', "sections: expected a list of sections"),
        ('{"sections": [{"tables": []}]}', "sections[0].title: expected a string"),
        (
            '{"sections": [{"title": "t", "tables": [{"header": ["Run", "A"], "rows": [["r", ["1", "2"]]]}]}]}',
            "sections[0].tables[0].rows[0]: expected [label, 1 cells]",
        ),
    ],
)
def test_a_bad_summary_names_the_file_and_field(tmp_path, content, fragment):
    path = tmp_path / "tables.json"
    path.write_text(content)
    with pytest.raises(SummaryFormatError) as error:
        read_summary(path)
    assert str(error.value).startswith(f"{path}: ") and fragment in str(error.value)
