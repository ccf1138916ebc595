"""Run every benchmark and write one table of their ratios: `benchmarks/out/summary.md` (`make bench`).

Each script runs in a fresh interpreter, one after the other (never two at once: they measure the
same cores), with its output kept in `benchmarks/out/<script>.log`. The table holds every line a
script printed as `ratio: NAME = VALUE` (see `ratios.py`), its goal beside it and whether it is
met - every goal has a line, "not measured" where its script printed nothing for it - with the
commit, the date, the cores and the load average before each script (a loaded machine slows
whichever side runs while the load lasts: read the ratios with it). The demo's time and a no-op
rerun's are read from `benchmarks/recorded.json` (their lines say "recorded" and when) unless
`demo_time.py --run` measures them (see that script).
`--docs PATH` also writes the tables as a Markdown fragment headed by the date, the commit and the
machine: the documentation's Performance page includes `docs/snippets/bench.md`, which `make bench`
writes so.

    .venv/bin/python benchmarks/summary.py [--only bm25_speed ...] [--timeout 1800] [--docs PATH] [--from-logs]
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ratios import GOALS, goal_name, meets, parse_ratios  # noqa: E402

from dagster_ir.provenance import commit_of, machine  # noqa: E402

# Every benchmark with the arguments `make bench` gives it (each script's defaults otherwise).
BENCHMARKS: dict[str, list[str]] = {
    "wiki_extraction": [],
    "bm25_speed": [],
    "rerank_speed": ["--php-steps", "0"],
    "bert_baselines_speed": [],
    "model1_speed": [],
    "evaluation_speed": [],
    "dense_speed": [],
    "ghrm_speed": [],
    "storage_overhead": [],
    "train_speed": [],
    "demo_time": [],  # the recorded demo timings unless run with --run (about 20 minutes more)
}
# the script that measures each goal's figure, by the start of its name
SCRIPT_OF_GOAL = {
    "extraction": "wiki_extraction",
    "BM25": "bm25_speed",
    "rerank": "rerank_speed",
    "Model 1": "model1_speed",
    "evaluation": "evaluation_speed",
    "dense": "dense_speed",
    "training": "train_speed",
    "demo": "demo_time",
    "no-op": "demo_time",
}


def run_one(name: str, args: list[str], out: Path, timeout: float) -> tuple[dict[str, float], str, float]:
    """Run benchmark `name`; its ratios, how it ended and its wall time. Output goes to its log."""
    started = time.perf_counter()
    log = out / f"{name}.log"
    try:
        done = subprocess.run(
            [sys.executable, str(HERE / f"{name}.py"), *args], capture_output=True, text=True, timeout=timeout
        )
        output, ended = done.stdout + done.stderr, ("ok" if done.returncode == 0 else f"exit {done.returncode}")
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode() if isinstance(expired.stdout, bytes) else (expired.stdout or "")
        ended = f"timed out after {timeout:.0f} s"
    log.write_text(output)
    return parse_ratios(output), ended, time.perf_counter() - started


def docs_fragment(
    rows: list[tuple[str, str, float]], runs: list[str], when: str, commit: str, on: str, only: list[str] | None
) -> str:
    """The Markdown the documentation includes: what was run, where and when, then the two tables."""
    command = "make bench" if only is None else f"benchmarks/summary.py --only {' '.join(only)}"
    head = (
        f"Measured by `{command}` on {when}, commit `{commit}`, on {on}. Each ratio is ours over the "
        "baseline run in the same process on the same inputs; the load average before each script is in "
        "the second table (a loaded machine slows whichever side runs while the load lasts). Every goal has "
        "a line. The demo's minutes and a no-op rerun's seconds are absolute figures: \"recorded\" ones are "
        "read from `benchmarks/recorded.json` with their date, not measured by this run."
    )
    return "\n".join(
        [
            head,
            "",
            *table(rows, None if only is None else set(only)),
            "",
            "| script | ended | wall | load before |",
            "|---|---|---:|---:|",
            *runs,
            "",
        ]
    )


def script_of_goal(name: str) -> str:
    return next((script for start, script in SCRIPT_OF_GOAL.items() if name.startswith(start)), "-")


def table(rows: list[tuple[str, str, float]], ran: set[str] | None = None) -> list[str]:
    """One Markdown table: every goal first, in GOALS' order, with its measured value or "not
    measured" (the script failed or printed no such line) or "not run" (a script not in `ran`;
    None: all ran); then the ratios without a goal, in the order measured."""
    lines = ["| benchmark | ratio | value | goal | met |", "|---|---|---:|---|---|"]

    def line(script: str, name: str, value: str, verdict: str) -> str:
        goal = " ".join(map(str, GOALS[goal_name(name)])) if goal_name(name) in GOALS else "-"
        cell = name.replace("|", "\\|")  # a ratio's name may hold |x|, which would split the Markdown row
        return f"| {script} | {cell} | {value} | {goal} | {verdict} |"

    for wanted in GOALS:
        found = [(script, name, value) for script, name, value in rows if goal_name(name) == wanted]
        for script, name, value in found:
            lines.append(line(script, name, f"{value:.2f}", "yes" if meets(name, value) else "**no**"))
        if not found:
            script = script_of_goal(wanted)
            absent = "not run" if ran is not None and script not in ran else "not measured"
            lines.append(line(script, wanted, absent, f"**no** ({absent})"))
    lines += [line(script, name, f"{value:.2f}", "-") for script, name, value in rows if meets(name, value) is None]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="run these benchmarks only")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed to each script")
    parser.add_argument("--out", type=Path, default=HERE / "out")
    parser.add_argument("--docs", type=Path, help="also write the tables as the docs' Markdown fragment there")
    parser.add_argument(
        "--from-logs",
        action="store_true",
        help="run nothing: make the table from the logs an earlier run left in --out (one stopped "
        "part-way, say); a script without a log counts as not measured",
    )
    args = parser.parse_args()
    unknown = set(args.only or []) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmarks {sorted(unknown)}; have {sorted(BENCHMARKS)}")
    args.out.mkdir(parents=True, exist_ok=True)

    rows, runs = [], []
    for name, script_args in BENCHMARKS.items():
        if args.only is not None and name not in args.only:
            continue
        if args.from_logs:
            log = args.out / f"{name}.log"
            ratios = parse_ratios(log.read_text()) if log.is_file() else {}
            runs.append(f"| {name} | {'from its log' if log.is_file() else 'no log'} | - | - |")
        else:
            load = os.getloadavg()[0]
            print(f"{name} ... (load {load:.1f})", flush=True)
            ratios, ended, seconds = run_one(name, script_args, args.out, args.timeout)
            runs.append(f"| {name} | {ended} | {seconds:.0f} s | {load:.1f} |")
        rows += [(name, ratio, value) for ratio, value in ratios.items()]
        for ratio, value in ratios.items():
            print(f"  {ratio} = {value:.2f}", flush=True)

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit = commit_of()
    ran = None if args.only is None else set(args.only)
    text = [
        f"# Benchmarks: commit {commit}, {now}, {os.cpu_count()} cores",
        "",
        *table(rows, ran),
        "",
        "| script | ended | wall | load before |",
        "|---|---|---:|---:|",
        *runs,
        "",
    ]
    target = args.out / "summary.md"
    target.write_text("\n".join(text))
    print("\n".join(table(rows, ran)))
    print(f"written {target}")
    if args.docs:
        args.docs.write_text(docs_fragment(rows, runs, now, commit, machine(), args.only))
        print(f"written {args.docs}")


if __name__ == "__main__":
    main()
