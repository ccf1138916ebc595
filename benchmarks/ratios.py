"""The one line format every benchmark ends with, and the goals `make bench` checks them against.

A benchmark prints each of its ratios last, one a line, as `ratio: NAME = VALUE`. Ratios are
"ours over the baseline" in the direction where larger is better (speed over speed), except the
ones whose goal says `<=` (a cost, such as Model 1's scoring time over BM25's, or a memory ratio), and
a few absolute figures with a goal of their own (the demo's minutes, a no-op rerun's seconds).
`benchmarks/summary.py` runs every script, reads these lines and writes `benchmarks/out/summary.md`.
"""

from __future__ import annotations

import re

LINE = re.compile(r"^ratio: (?P<name>.+?) = (?P<value>[-+0-9.eE]+|nan|inf)\s*$")

# name -> (comparison, goal), from issue #20's table; a ratio without a goal is printed, not judged.
GOALS: dict[str, tuple[str, float]] = {
    # ">= 2x per core": WikiExtractor keeps about 1.4 cores busy with --processes 1, ours one
    "extraction MB/s per core (CPU time), ours / WikiExtractor --no-templates (cold, less start-up)": (">=", 2.0),
    "extraction, 2 processes / 1 on a multistream dump": (">=", 1.7),
    "BM25 q/s, ours / bm25s, cranfield": (">=", 1.0),
    "BM25 q/s, ours / bm25s, synthetic": (">=", 3.0),
    "rerank pairs/s, ours / sentence-transformers CrossEncoder, max length 128": (">=", 1.5),
    "rerank pairs/s, ours / sentence-transformers CrossEncoder, max length 256": (">=", 1.5),
    "rerank pairs/s, ours / sentence-transformers CrossEncoder, max length 512": (">=", 1.5),
    "rerank pairs/s, ours bf16 / sentence-transformers CrossEncoder, max length 128": (">=", 2.5),
    "rerank pairs/s, ours bf16 / sentence-transformers CrossEncoder, max length 256": (">=", 2.5),
    "rerank pairs/s, ours bf16 / sentence-transformers CrossEncoder, max length 512": (">=", 2.5),
    "rerank bf16 |nDCG@10 - fp32 nDCG@10| x 100, Cranfield BM25 top 10": ("<=", 0.2),  # 0.002
    "Model 1 (wp) scoring time / BM25 (wp)": ("<=", 4.0),
    "Model 1 (words) scoring time / BM25 (words)": ("<=", 4.0),
    "evaluation speed, ours / ir_measures (dicts)": (">=", 1.0),
    "dense passages/s, ours / sentence-transformers": (">=", 1.0),
    "training examples/s, ours / sentence-transformers CrossEncoderTrainer (fp32)": (">=", 1.5),
    "demo wall time, minutes": ("<=", 8.0),
    "no-op demo rerun, seconds": ("<=", 5.0),
}
# A figure read from a record instead of measured by this run says so in brackets after its name,
# e.g. "demo wall time, minutes (recorded 2026-12-03: ...)"; its goal is the bare name's.
SOURCE = re.compile(r" \((?:recorded|measured)\b.*\)$")


def print_ratio(name: str, value: float) -> None:
    """Print one ratio in the format `summary.py` reads."""
    print(f"ratio: {name} = {value:.3f}", flush=True)


def parse_ratios(output: str) -> dict[str, float]:
    """The ratios a benchmark printed, by name, in the order printed (a repeated name: the last wins)."""
    found: dict[str, float] = {}
    for line in output.splitlines():
        match = LINE.match(line.strip())
        if match:
            found[match["name"]] = float(match["value"])
    return found


def goal_name(name: str) -> str:
    """The name GOALS knows `name` by: without a trailing "(recorded ...)" or "(measured ...)"."""
    return SOURCE.sub("", name)


def meets(name: str, value: float) -> bool | None:
    """Whether `value` reaches the goal of `name`; None when the ratio has no goal."""
    if goal_name(name) not in GOALS:
        return None
    comparison, goal = GOALS[goal_name(name)]
    return value >= goal if comparison == ">=" else value <= goal
