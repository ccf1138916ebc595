import base64
import re

import ir_measures
import numpy as np
import polars as pl
import pytest

from dagster_ir.evaluation import (
    ReportConfig,
    ReportFigure,
    SignificanceConfig,
    build_report,
    evaluate_run,
    recall_curve,
    recall_curve_plot,
    write_report,
)
from dagster_ir.retrieval.trec import parse_qrels_text, parse_run_text
from dagster_ir.schemas import PER_QUERY_EVAL

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FAST = ReportConfig(significance=SignificanceConfig(n_resamples=300))


def synthetic_per_query() -> pl.DataFrame:
    """bm25, a clearly better run and a run that is the baseline plus noise, on 30 queries."""
    rng = np.random.default_rng(5)
    base = {"AP": rng.random(30) * 0.6, "nDCG@10": rng.random(30) * 0.6}
    runs = {
        "bm25": base,
        "better": {m: v + 0.2 + rng.normal(0, 0.02, 30) for m, v in base.items()},
        "noise": {m: np.clip(v + rng.normal(0, 0.1, 30), 0, 1) for m, v in base.items()},
    }
    rows = [
        (run, f"q{i}", measure, float(value))
        for run, by_measure in runs.items()
        for measure, vector in by_measure.items()
        for i, value in enumerate(vector)
    ]
    return pl.DataFrame(rows, schema=PER_QUERY_EVAL, orient="row")


def markdown_rows(markdown: str, table: int) -> list[list[str]]:
    """Body rows of the `table`-th (1-based) Markdown table, as cell lists."""
    block = markdown.split(f"**Table {table}.**")[1].split("\n\n", 2)[1]
    lines = [line for line in block.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


def test_results_table_has_one_row_per_run_best_in_bold_and_markers_where_significant():
    per_query = synthetic_per_query()
    report = build_report(per_query, "bm25", title="Demo", config=FAST)
    rows = markdown_rows(report.to_markdown(), 1)
    assert [r[0] for r in rows] == ["bm25 (baseline)", "better", "noise"]
    comparison = report.comparison
    for label, cells in zip(["bm25", "better", "noise"], rows):
        for measure, cell in zip(["AP", "nDCG@10"], cells[1:]):
            got = comparison.filter((pl.col("run_name") == label) & (pl.col("measure") == measure)).row(0, named=True)
            assert cell.endswith("†") == (got["p_value"] is not None and got["p_value"] < 0.05)
            assert cell.strip("*†") == f"{got['mean']:.4f}"
            assert cell.startswith("**") == (label == "better")
    assert all(cell.endswith("†") for cell in rows[1][1:])
    assert not any(cell.endswith("†") for cell in rows[2][1:])


def test_caption_names_the_baseline_the_test_and_the_correction():
    markdown = build_report(synthetic_per_query(), "bm25", config=FAST).to_markdown()
    assert "baseline bm25 (paired two-sided t-test, p < 0.05)" in markdown
    holm = ReportConfig(significance=SignificanceConfig(n_resamples=300, correction="holm", alpha=0.01))
    markdown = build_report(synthetic_per_query(), "bm25", config=holm).to_markdown()
    assert "p < 0.01, Holm-corrected for the 2 runs compared per measure" in markdown


def test_report_numbers_equal_ir_measures_on_the_same_trec_text():
    qrels_text = "q1 0 a 1\nq1 0 b 2\nq2 0 c 1\nq3 0 d 1\n"
    runs = {
        "bm25": "q1 Q0 x 1 3 bm25\nq1 Q0 a 2 2 bm25\nq1 Q0 b 3 1 bm25\nq2 Q0 c 1 5 bm25\n",
        "rr": "q1 Q0 b 1 3 rr\nq1 Q0 a 2 2 rr\nq2 Q0 y 1 5 rr\nq2 Q0 c 2 4 rr\nq3 Q0 d 1 1 rr\n",
    }
    run = pl.concat([parse_run_text(text)[0] for text in runs.values()])
    per_query = evaluate_run(run, parse_qrels_text(qrels_text)[0], ["nDCG@10", "AP", "RR@10"])
    report = build_report(per_query, "bm25", config=FAST)
    measures = [ir_measures.nDCG @ 10, ir_measures.AP, ir_measures.RR @ 10]
    for name, text in runs.items():
        qrels, trec_run = ir_measures.read_trec_qrels(qrels_text), ir_measures.read_trec_run(text)
        direct = ir_measures.calc_aggregate(measures, qrels, trec_run)
        ours = report.comparison.filter(pl.col("run_name") == name)
        assert dict(ours.select("measure", "mean").iter_rows()) == pytest.approx({str(m): v for m, v in direct.items()})
        label = f"{name} (baseline)" if name == "bm25" else name
        row = next(r for r in markdown_rows(report.to_markdown(), 1) if r[0] == label)
        assert [cell.strip("*†") for cell in row[1:]] == [f"{direct[m]:.4f}" for m in measures]


def test_interval_and_difference_tables_show_the_bootstrap_intervals():
    report = build_report(synthetic_per_query(), "bm25", config=FAST)
    intervals = markdown_rows(report.to_markdown(), 2)
    got = report.comparison.filter((pl.col("run_name") == "noise") & (pl.col("measure") == "AP")).row(0, named=True)
    assert intervals[2][1] == f"{got['mean']:.4f} [{got['ci_low']:.4f}, {got['ci_high']:.4f}]"
    differences = markdown_rows(report.to_markdown(), 3)
    assert [r[0] for r in differences] == ["better", "noise"]
    interval = f"[{got['delta_ci_low']:+.4f}, {got['delta_ci_high']:+.4f}]"
    assert differences[1][1].startswith(f"{got['delta']:+.4f} {interval}, p=")


def test_html_is_self_contained_with_embedded_png_and_intervals_on_hover():
    report = build_report(synthetic_per_query(), "bm25", title="A <b>title</b>", config=FAST)
    page = report.to_html()
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 2  # one difference plot per non-baseline run
    assert all(base64.b64decode(image).startswith(PNG_SIGNATURE) for image in images)
    assert "<style>" in page and "<link" not in page and "http" not in page.replace("http-equiv", "")
    assert "A &lt;b&gt;title&lt;/b&gt;" in page
    assert re.search(r"<td title='95% CI \[[0-9.]+, [0-9.]+\]; difference [+-][0-9.]+ \[", page)
    assert page.count("<sup class='sig'>†</sup>") == 4  # `better` on both measures, in tables 1 and 3


def test_terminal_text_is_a_plain_aligned_table():
    text = build_report(synthetic_per_query(), "bm25", title="Demo", config=FAST).to_terminal()
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Run "))
    assert lines[header + 2].startswith("bm25 (baseline)")
    assert lines[header + 3].startswith("better") and lines[header + 3].endswith("*†")
    assert lines[header + 4].startswith("noise") and "†" not in lines[header + 4]
    assert "* marks the best value per measure." in text and not re.search(r"</?[a-z]", text)
    better = next(line for line in lines[header + 5 :] if line.startswith("better"))  # difference table
    assert better.endswith("p<0.0001†")


def test_config_settings_change_the_report():
    per_query = synthetic_per_query()
    two = ReportConfig(significance=SignificanceConfig(n_resamples=300), decimals=2)
    assert markdown_rows(build_report(per_query, "bm25", config=two).to_markdown(), 1)[0][1].count(".") == 1
    assert len(markdown_rows(build_report(per_query, "bm25", config=two).to_markdown(), 1)[0][1].split(".")[1]) == 2
    no_plots = ReportConfig(significance=SignificanceConfig(n_resamples=300), difference_plots=False)
    assert build_report(per_query, "bm25", config=no_plots).figures == ()
    ndcg = ReportConfig(significance=SignificanceConfig(n_resamples=300), difference_plot_measure="nDCG@10")
    assert all("nDCG" in f.name for f in build_report(per_query, "bm25", config=ndcg).figures)
    bad = ReportConfig(difference_plot_measure="P@5")
    with pytest.raises(ValueError, match="difference_plot_measure 'P@5'"):
        build_report(per_query, "bm25", config=bad)


def test_measures_select_and_order_the_columns():
    report = build_report(synthetic_per_query(), "bm25", ["nDCG@10", "AP"], config=FAST)
    assert report.measures == ("nDCG@10", "AP")
    assert "| Run | nDCG@10 | AP |" in report.to_markdown()


def test_write_report_writes_every_file_atomically(tmp_path):
    qrels = parse_qrels_text("q1 0 a 1\nq2 0 b 1\n")[0]
    run = pl.concat(
        [
            parse_run_text("q1 Q0 a 1 2 r1\nq1 Q0 z 2 1 r1\nq2 Q0 z 1 2 r1\nq2 Q0 b 2 1 r1\n")[0],
            parse_run_text("q1 Q0 z 1 2 r2/x\nq1 Q0 a 2 1 r2/x\nq2 Q0 b 1 2 r2/x\n")[0],
        ]
    )
    curve = ReportFigure.from_figure("recall curves", "Recall.", recall_curve_plot(recall_curve(run, qrels)))
    report = build_report(evaluate_run(run, qrels, ["AP"]), "r1", config=FAST, extra_figures=[curve])
    files = write_report(report, tmp_path / "out")
    assert [p.name for p in files.figures] == ["01_difference_AP_r2_x.png", "recall_curves.png"]
    for path in (files.markdown, files.html, files.text, *files.figures):
        assert path.is_file() and path.parent.is_relative_to(tmp_path / "out")
    for path in files.figures:
        assert path.read_bytes().startswith(PNG_SIGNATURE)
        assert f"(figures/{path.name})" in files.markdown.read_text()
    assert files.text.read_text() == report.to_terminal()
    leftovers = [p for p in (tmp_path / "out").rglob("*") if p.name.startswith(".")]
    assert leftovers == []


def test_figures_with_the_same_name_are_refused():
    extra = ReportFigure("01_difference_AP_better", "clash", b"")
    with pytest.raises(ValueError, match="figure names must differ"):
        build_report(synthetic_per_query(), "bm25", config=FAST, extra_figures=[extra])


def test_unknown_baseline_is_refused():
    with pytest.raises(ValueError, match="baseline run 'bert' not in"):
        build_report(synthetic_per_query(), "bert", config=FAST)


def test_report_book_holds_sections_with_their_own_baselines(tmp_path):
    import polars as pl

    from dagster_ir.evaluation import ReportBook, build_report, write_report
    from dagster_ir.schemas import PER_QUERY_EVAL

    rows = [
        (run, f"q{i}", "nDCG@10", value + 0.01 * i)
        for i in range(6)
        for run, value in (("bm25", 0.2), ("bert", 0.4), ("php", 0.5))
    ]
    per_query = pl.DataFrame(rows, schema=list(PER_QUERY_EVAL), orient="row").cast(PER_QUERY_EVAL)
    first = build_report(per_query.filter(pl.col("run_name") != "php"), "bm25", title="First stage")
    second = build_report(per_query.filter(pl.col("run_name") != "bm25"), "php", title="PHP")
    with pytest.raises(ValueError, match="figure names must differ"):
        _ = ReportBook("clash", (first, second)).figures  # both plot bert against their baseline
    book = ReportBook.of("wiki-car", [first, second])
    assert [f.name[:3] for f in book.figures] == ["s1_"] * len(first.figures) + ["s2_"] * len(second.figures)
    markdown = book.to_markdown(None)
    assert markdown.startswith("# wiki-car") and "## First stage" in markdown and "## PHP" in markdown
    assert "php (baseline)" in markdown and "bm25 (baseline)" in markdown
    assert book.to_html().count("<h2>") == 2
    files = write_report(book, tmp_path)
    assert files.html.read_text().count("<table") == 6
    assert len(files.figures) == len(first.figures) + len(second.figures)
    with_notes = ReportBook.of("wiki-car", [first, second], [("Worked examples", "query `a <b>`\n\n| t | c |")])
    markdown = with_notes.to_markdown(None)
    assert markdown.index("## PHP") < markdown.index("## Worked examples") and "| t | c |" in markdown
    assert "<h2>Worked examples</h2>" in with_notes.to_html() and "a &lt;b&gt;" in with_notes.to_html()
    assert with_notes.to_terminal().rstrip().endswith("| t | c |")
