import io

import ir_measures
import polars as pl
import pytest

from dagster_ir.evaluation import evaluate_run
from dagster_ir.evaluation.cli import main_report, print_report, read_runs
from dagster_ir.retrieval.trec import parse_qrels_text, parse_run_text

QRELS = "q1 0 a 1\nq1 0 b 0\nq2 0 c 2\nq3 0 d 1\n"
BM25 = "q1 Q0 b 1 2.0 bm25\nq1 Q0 a 2 1.0 bm25\nq2 Q0 c 1 3.0 bm25\nq3 Q0 x 1 1.0 bm25\n"
RERANK = "q1 Q0 a 1 2.0 tag\nq1 Q0 b 2 1.0 tag\nq2 Q0 c 1 3.0 tag\nq3 Q0 d 1 1.0 tag\n"


@pytest.fixture
def trec_files(tmp_path):
    paths = {name: tmp_path / name for name in ("qrels.txt", "bm25.run", "rerank.run")}
    for path, text in zip(paths.values(), (QRELS, BM25, RERANK)):
        path.write_text(text)
    return paths


def table_rows(output: str) -> dict[str, list[str]]:
    """Rows of the first table in the terminal output: label -> cells."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Run ")) + 2
    rows = {}
    for line in lines[start:]:
        if not line.strip():
            break
        label, *cells = line.rsplit(maxsplit=2)
        rows[label.strip()] = cells
    return rows


def test_report_from_trec_files_prints_the_values_ir_measures_computes(trec_files, tmp_path, capsys):
    argv = [
        "--qrels",
        str(trec_files["qrels.txt"]),
        "--run",
        str(trec_files["bm25.run"]),
        "--run",
        f"ce={trec_files['rerank.run']}",
        "--baseline",
        "bm25",
        "--measures",
        "MRR@10",
        "AP",
        "--resamples",
        "200",
        "--plot-measure",
        "MRR@10",
        "--out",
        str(tmp_path / "report"),
    ]
    assert main_report(argv) == 0
    rows = table_rows(capsys.readouterr().out)
    assert list(rows) == ["bm25 (baseline)", "ce"]
    measures = [ir_measures.RR @ 10, ir_measures.AP]
    direct = ir_measures.calc_aggregate(measures, ir_measures.read_trec_qrels(QRELS), ir_measures.read_trec_run(RERANK))
    assert [cell.strip("*†") for cell in rows["ce"]] == [f"{direct[m]:.4f}" for m in measures]
    written = sorted(p.relative_to(tmp_path / "report").as_posix() for p in (tmp_path / "report").rglob("*.*"))
    assert written == [
        "figures/01_difference_RR_10_ce.png",
        "figures/recall_curves.png",
        "report.html",
        "report.md",
        "report.txt",
    ]


def test_report_from_a_per_query_parquet_file(trec_files, tmp_path, capsys):
    run = pl.concat([parse_run_text(BM25)[0], parse_run_text(RERANK, run_name="ce")[0]])
    per_query = evaluate_run(run, parse_qrels_text(QRELS)[0], ["AP", "nDCG@10"])
    per_query.write_parquet(tmp_path / "per_query.parquet")
    argv = ["--per-query", str(tmp_path / "per_query.parquet"), "--baseline", "ce", "--resamples", "50"]
    assert main_report(argv) == 0
    out = capsys.readouterr().out
    assert list(table_rows(out)) == ["ce (baseline)", "bm25"]
    assert "baseline ce" in out


def test_print_report_takes_a_frame_and_writes_to_the_given_stream():
    run = pl.concat([parse_run_text(BM25)[0], parse_run_text(RERANK, run_name="ce")[0]])
    per_query = evaluate_run(run, parse_qrels_text(QRELS)[0], ["AP"])
    stream = io.StringIO()
    report = print_report(per_query, "bm25", ["AP"], file=stream)
    assert stream.getvalue() == report.to_terminal()


def test_bad_input_returns_1_with_a_message(trec_files, tmp_path, capsys):
    argv = ["--qrels", str(trec_files["qrels.txt"]), "--run", str(trec_files["bm25.run"]), "--baseline", "ce"]
    assert main_report(argv) == 1
    assert "error: baseline run 'ce' not in the per-query table (runs: ['bm25'])" in capsys.readouterr().err
    (tmp_path / "empty.parquet").write_bytes(b"")
    assert main_report(["--per-query", str(tmp_path / "empty.parquet"), "--baseline", "x"]) == 1
    assert f"{tmp_path / 'empty.parquet'}: cannot read it as Parquet" in capsys.readouterr().err
    assert main_report(["--per-query", str(tmp_path / "missing.parquet"), "--baseline", "x"]) == 1
    assert "missing.parquet" in capsys.readouterr().err
    pl.DataFrame({"run_name": ["x"]}).write_parquet(tmp_path / "bad.parquet")
    assert main_report(["--per-query", str(tmp_path / "bad.parquet"), "--baseline", "x"]) == 1
    assert f"per-query evaluation {tmp_path / 'bad.parquet'}: missing column 'query_id'" in capsys.readouterr().err
    argv = ["--per-query", str(tmp_path / "bad.parquet"), "--baseline", "x", "--alpha", "2"]
    assert main_report(argv) == 1
    assert "alpha must be in (0, 1), got 2.0" in capsys.readouterr().err


def test_argument_errors_exit_with_usage(trec_files):
    with pytest.raises(SystemExit) as exit_info:
        main_report(["--qrels", str(trec_files["qrels.txt"]), "--baseline", "bm25"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        main_report(["--baseline", "bm25"])


def test_runs_are_named_by_tag_or_name_and_must_not_clash(trec_files):
    runs = read_runs([str(trec_files["bm25.run"]), f"ce={trec_files['rerank.run']}"])
    assert runs["run_name"].unique(maintain_order=True).to_list() == ["bm25", "ce"]
    with pytest.raises(ValueError, match="run name 'bm25' in both"):
        read_runs([str(trec_files["bm25.run"]), f"bm25={trec_files['rerank.run']}"])
