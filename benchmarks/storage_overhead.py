"""What the reliability guarantees cost: repeated-id checks on a local corpus, fsync on every write.

Both are measured against the same work without them, in this process, alternating which goes
first, best of `--repeat` (the machine is shared):
- reading a synthetic TSV corpus (`--docs` documents) with `iter_corpus`, with and without the
  check that no document id repeats (64-bit hashes of the ids seen, 8 bytes a document);
- writing a Parquet table of `--rows` rows with `write_table` (temp file, fsync, rename, fsync of the
  folder) and with the fsyncs turned off.

    .venv/bin/python benchmarks/storage_overhead.py [--docs 300000] [--rows 2000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import numpy as np
import polars as pl
from ratios import print_ratio  # benchmarks/ratios.py: the line format make bench reads

from dagster_ir.collections import local
from dagster_ir.storage import atomic
from dagster_ir.storage.parquet import write_table


def best_of(repeat: int, *runs: Callable[[], object]) -> list[float]:
    """Best wall time of each run, the runs alternating which goes first."""
    best = [float("inf")] * len(runs)
    for r in range(repeat):
        order = range(len(runs)) if r % 2 == 0 else reversed(range(len(runs)))
        for i in order:
            started = time.perf_counter()
            runs[i]()
            best[i] = min(best[i], time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=300_000)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "docs.tsv"
        words = np.array([f"w{i}" for i in range(5000)])
        with corpus.open("w") as out:
            for i in range(args.docs):
                out.write(f"doc{i}\t{' '.join(rng.choice(words, 30))}\n")

        def read() -> int:
            return sum(b.height for b in local.iter_corpus(corpus))

        def read_unchecked() -> int:
            with mock.patch.object(local._SeenIds, "checked", lambda self, batch, lines: batch):
                return read()

        checked, unchecked = best_of(args.repeat, read, read_unchecked)
        print(
            f"iter_corpus, {args.docs} docs: {checked:.2f} s with the repeated-id check, "
            f"{unchecked:.2f} s without: x{checked / unchecked:.2f}"
        )

        frame = pl.DataFrame({"a": rng.integers(0, 1 << 30, args.rows), "b": rng.random(args.rows)})
        target = Path(folder) / "t" / "data.parquet"

        def write() -> int:
            return write_table(frame, target)

        def write_unsynced() -> int:
            with mock.patch.object(atomic, "_fsync", lambda path: None):
                return write_table(frame, target)

        synced, unsynced = best_of(args.repeat, write, write_unsynced)
        print(
            f"write_table, {args.rows} rows: {synced:.2f} s with fsync, {unsynced:.2f} s without: "
            f"x{synced / unsynced:.2f}"
        )
        print_ratio("storage: time with the repeated-id check / without", checked / unchecked)
        print_ratio("storage: time with fsync / without", synced / unsynced)


if __name__ == "__main__":
    main()
