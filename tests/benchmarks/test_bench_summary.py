"""`benchmarks/summary.py`: the Markdown fragment the documentation's Performance page includes."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from summary import docs_fragment  # noqa: E402


def test_the_fragment_names_command_date_commit_machine_and_judges_each_ratio():
    rows = [("bm25_speed", "BM25 q/s, ours / bm25s, cranfield", 0.29),
            ("model1_speed", "Model 1 (wp) scoring time / BM25 (wp)", 1.76),
            ("ghrm_speed", "GHRM pairs/s, no goal", 97.8),
            ("rerank_speed", "rerank bf16 |nDCG@10 - fp32 nDCG@10| x 100, Cranfield BM25 top 10", 0.05)]
    runs = ["| bm25_speed | ok | 40 s | 0.3 |"]
    text = docs_fragment(rows, runs, "2026-12-02 05:55 UTC", "abc1234", "Intel Xeon, 2 cores", None)
    lines = text.splitlines()
    assert lines[0].startswith("Measured by `make bench` on 2026-12-02 05:55 UTC, commit `abc1234`, on Intel Xeon, 2 cores.")
    assert "| bm25_speed | BM25 q/s, ours / bm25s, cranfield | 0.29 | >= 1.0 | **no** |" in lines
    assert "| model1_speed | Model 1 (wp) scoring time / BM25 (wp) | 1.76 | <= 4.0 | yes |" in lines
    assert "| ghrm_speed | GHRM pairs/s, no goal | 97.80 | - | - |" in lines
    assert "| rerank_speed | rerank bf16 \\|nDCG@10 - fp32 nDCG@10\\| x 100, Cranfield BM25 top 10 | 0.05 | <= 0.2 | yes |" in lines
    assert runs[0] in lines
    partial = docs_fragment(rows[:1], runs, "d", "c", "m", ["bm25_speed"])
    assert partial.startswith("Measured by `benchmarks/summary.py --only bm25_speed` on d")
