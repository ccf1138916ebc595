"""The demo's wall time and a no-op rerun's, as `make bench` reports them beside their goals.

Without options nothing is run: both figures are read from `benchmarks/recorded.json` (the last
measurement someone recorded, with its date and conditions), and each printed line says
"(recorded <date>: <conditions>)". Running the demo takes 15-25 minutes on 2 cores, too long for
every `make bench`.

`--run` measures both in this run: `dagster-ir demo` on a fresh data folder in a temporary
directory (the demo's wall time, the install not included), then `dagster-ir demo` again on it (the
no-op rerun: nothing is stale, so it is start-up and the staleness check). `--data DIR` times only
the no-op rerun, on a folder where the demo has already run (`make demo`'s is `./data`); a rerun
that materialized anything was not a no-op and is refused.

    .venv/bin/python benchmarks/demo_time.py [--run | --data ./data] [--recorded benchmarks/recorded.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ratios import print_ratio  # benchmarks/ratios.py: the line format make bench reads

HERE = Path(__file__).resolve().parent
DEMO = "demo wall time, minutes"
NOOP = "no-op demo rerun, seconds"
MATERIALIZED = re.compile(r"^(\d+) asset partitions materialized in \d+ runs, (\d+) were already up to date", re.M)


def read_recorded(path: Path) -> dict[str, dict]:
    """{figure name: {"value", "date", "conditions"}} from the record; a clear error on a bad one."""
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"{path}: cannot read the recorded timings ({error})") from error
    for name, record in records.items():
        missing = {"value", "date", "conditions"} - set(record)
        if missing:
            raise SystemExit(f"{path}: {name!r} lacks {sorted(missing)}")
    return records


def demo(data: Path) -> tuple[float, int]:
    """(wall seconds, asset partitions materialized) of `dagster-ir demo` on `data`."""
    env = {**os.environ, "DAGSTER_IR_DATA": str(data), "DAGSTER_HOME": str(data / "dagster_home")}
    (data / "dagster_home").mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "assets.cli.main", "demo"], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"dagster-ir demo failed on {data} (exit {done.returncode}):\n{done.stderr[-2000:]}")
    found = MATERIALIZED.search(done.stdout)
    if found is None:
        raise SystemExit(f"dagster-ir demo on {data}: no 'N asset partitions materialized' line in its output")
    return seconds, int(found[1])


def noop_rerun(data: Path) -> float:
    seconds, materialized = demo(data)
    if materialized:
        raise SystemExit(
            f"{data}: the rerun materialized {materialized} asset partitions, so it was not a no-op; "
            "run the demo there to the end first"
        )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="run the demo on a fresh folder, then rerun it")
    parser.add_argument("--data", type=Path, help="time a no-op rerun on this folder, where the demo has run")
    parser.add_argument("--recorded", type=Path, default=HERE / "recorded.json")
    args = parser.parse_args()
    recorded = read_recorded(args.recorded)
    figures: dict[str, tuple[float, str]] = {
        name: (float(r["value"]), f"recorded {r['date']}: {r['conditions']}") for name, r in recorded.items()
    }
    if args.run:
        with tempfile.TemporaryDirectory() as tmp:
            seconds, materialized = demo(Path(tmp) / "data")
            print(f"demo: {materialized} asset partitions materialized in {seconds / 60:.1f} min")
            figures[DEMO] = (seconds / 60, "measured")
            figures[NOOP] = (noop_rerun(Path(tmp) / "data"), "measured")
    elif args.data:
        figures[NOOP] = (noop_rerun(args.data), "measured")
    for name in (DEMO, NOOP):
        if name in figures:
            value, source = figures[name]
            print_ratio(f"{name} ({source})", value)


if __name__ == "__main__":
    main()
