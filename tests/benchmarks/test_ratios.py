"""The ratio lines the benchmarks print and `make bench` reads (benchmarks/ratios.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from ratios import GOALS, meets, parse_ratios, print_ratio  # noqa: E402


def test_printed_ratios_are_read_back(capsys):
    print("some other line = 3")
    print_ratio("BM25 q/s, ours / bm25s, cranfield", 0.1875)
    print_ratio("Model 1 (wp) scoring time / BM25 (wp)", 7.04)
    assert parse_ratios(capsys.readouterr().out) == {
        "BM25 q/s, ours / bm25s, cranfield": 0.188,
        "Model 1 (wp) scoring time / BM25 (wp)": 7.04,
    }


def test_goals_are_judged_in_their_direction():
    assert meets("BM25 q/s, ours / bm25s, cranfield", 1.0) is True
    assert meets("BM25 q/s, ours / bm25s, cranfield", 0.99) is False
    assert meets("Model 1 (wp) scoring time / BM25 (wp)", 3.9) is True  # a cost: lower is better
    assert meets("Model 1 (wp) scoring time / BM25 (wp)", 7.0) is False
    assert meets("a ratio without a goal", 5.0) is None
    assert all(comparison in (">=", "<=") for comparison, _ in GOALS.values())


def test_a_recorded_figure_is_judged_by_its_bare_name():
    assert meets("demo wall time, minutes (recorded 2026-12-03: fresh clone (install included))", 7.5) is True
    assert meets("demo wall time, minutes (measured)", 9.0) is False
    assert meets("no-op demo rerun, seconds (recorded 2026-12-03: 2 cores)", 10.0) is False
    assert meets("demo wall time, minutes (other words)", 1.0) is None
