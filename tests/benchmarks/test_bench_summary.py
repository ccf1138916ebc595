"""`benchmarks/summary.py`: the Markdown fragment the documentation's Performance page includes."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from summary import docs_fragment  # noqa: E402


def test_the_fragment_names_command_date_commit_machine_and_judges_each_ratio():
    rows = [
        ("bm25_speed", "BM25 q/s, ours / bm25s, cranfield", 0.29),
        ("model1_speed", "Model 1 (wp) scoring time / BM25 (wp)", 1.76),
        ("ghrm_speed", "GHRM pairs/s, no goal", 97.8),
        ("rerank_speed", "rerank bf16 |nDCG@10 - fp32 nDCG@10| x 100, Cranfield BM25 top 10", 0.05),
    ]
    runs = ["| bm25_speed | ok | 40 s | 0.3 |"]
    text = docs_fragment(rows, runs, "2026-12-02 05:55 UTC", "abc1234", "Intel Xeon, 2 cores", None)
    lines = text.splitlines()
    assert lines[0].startswith(
        "Measured by `make bench` on 2026-12-02 05:55 UTC, commit `abc1234`, on Intel Xeon, 2 cores."
    )
    assert "| bm25_speed | BM25 q/s, ours / bm25s, cranfield | 0.29 | >= 1.0 | **no** |" in lines
    assert "| model1_speed | Model 1 (wp) scoring time / BM25 (wp) | 1.76 | <= 4.0 | yes |" in lines
    assert "| ghrm_speed | GHRM pairs/s, no goal | 97.80 | - | - |" in lines
    assert (
        "| rerank_speed | rerank bf16 \\|nDCG@10 - fp32 nDCG@10\\| x 100, Cranfield BM25 top 10 | 0.05 | <= 0.2 | yes |"
        in lines
    )
    assert runs[0] in lines
    partial = docs_fragment(rows[:1], runs, "d", "c", "m", ["bm25_speed"])
    assert partial.startswith("Measured by `benchmarks/summary.py --only bm25_speed` on d")


def test_every_goal_has_a_line_measured_or_not():
    from ratios import GOALS
    from summary import table

    rows = [
        ("bm25_speed", "BM25 q/s, ours / bm25s, cranfield", 1.2),
        ("demo_time", "demo wall time, minutes (recorded 2026-12-03: fresh clone, install included)", 24.0),
        ("ghrm_speed", "GHRM pairs/s, no goal", 97.8),
    ]
    lines = table(rows, ran={"bm25_speed", "demo_time", "ghrm_speed", "rerank_speed"})
    body = lines[2:]
    assert len(body) == len(GOALS) + 1  # one line a goal, then the ratio without one
    assert body[-1] == "| ghrm_speed | GHRM pairs/s, no goal | 97.80 | - | - |"
    assert "| bm25_speed | BM25 q/s, ours / bm25s, cranfield | 1.20 | >= 1.0 | yes |" in body
    # a recorded figure is judged against its bare name's goal and keeps its source in the table
    assert (
        "| demo_time | demo wall time, minutes (recorded 2026-12-03: fresh clone, install included) | 24.00 "
        "| <= 8.0 | **no** |"
    ) in body
    # a script that ran but printed no such line, and one that was not run
    assert (
        "| rerank_speed | rerank pairs/s, ours / sentence-transformers CrossEncoder, max length 128 "
        "| not measured | >= 1.5 | **no** (not measured) |"
    ) in body
    assert (
        "| train_speed | training examples/s, ours / sentence-transformers CrossEncoderTrainer (fp32) "
        "| not run | >= 1.5 | **no** (not run) |"
    ) in body
    assert [line.split(" | ")[1] for line in body[: len(GOALS)]][:2] == list(GOALS)[:2]  # in the goals' order


def test_the_demo_timings_are_read_from_the_record(tmp_path, capsys, monkeypatch):
    import demo_time

    monkeypatch.setattr(sys, "argv", ["demo_time.py"])
    demo_time.main()
    from ratios import meets, parse_ratios

    printed = parse_ratios(capsys.readouterr().out)
    assert len(printed) == 2 and all("(recorded 20" in name for name in printed)
    assert all(meets(name, value) is not None for name, value in printed.items())
    bad = tmp_path / "recorded.json"
    bad.write_text('{"demo wall time, minutes": {"value": 3}}')
    monkeypatch.setattr(sys, "argv", ["demo_time.py", "--recorded", str(bad)])
    try:
        demo_time.main()
    except SystemExit as error:
        assert "lacks ['conditions', 'date']" in str(error) and str(bad) in str(error)
    else:
        raise AssertionError("a record without its date and conditions was accepted")


def test_the_table_can_be_made_from_an_earlier_runs_logs(tmp_path, monkeypatch, capsys):
    import summary

    (tmp_path / "bm25_speed.log").write_text("noise\nratio: BM25 q/s, ours / bm25s, cranfield = 0.809\n")
    monkeypatch.setattr(summary, "run_one", lambda *a: (_ for _ in ()).throw(AssertionError("ran a script")))
    monkeypatch.setattr(
        sys, "argv", ["summary.py", "--from-logs", "--out", str(tmp_path), "--only", "bm25_speed", "train_speed"]
    )
    summary.main()
    written = (tmp_path / "summary.md").read_text()
    assert "| bm25_speed | BM25 q/s, ours / bm25s, cranfield | 0.81 | >= 1.0 | **no** |" in written
    assert "| train_speed | no log | - | - |" in written and "| bm25_speed | from its log | - | - |" in written
    assert (
        "| train_speed | training examples/s, ours / sentence-transformers CrossEncoderTrainer (fp32) "
        "| not measured | >= 1.5 | **no** (not measured) |"
    ) in written
