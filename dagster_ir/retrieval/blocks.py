"""Candidate runs written per block of queries, so their memory does not grow with the queries.

`write_runs_in_blocks` runs each searcher on one block of queries at a time (queries in query_id
order), writes every block's rows as a Parquet part and appends its TREC lines to the run's file,
and accumulates recall@k per query. Only one block's rows of one run are in memory at once; the
result is a LazyFrame over the parts (stream it to the asset's table). The TREC files and the
recall figures equal those of the whole run at once (`write_run`, `recall_at_k`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from dagster_ir.retrieval.runs import top_k
from dagster_ir.retrieval.trec import write_run
from dagster_ir.schemas import QRELS, RUN, validate
from dagster_ir.storage.atomic import atomic_path, temp_name

Searcher = Callable[[pl.DataFrame], pl.DataFrame]  # a block of QUERIES -> its RUN rows


@dataclass
class BlockedRuns:
    runs: pl.LazyFrame  # every run's rows, over the Parquet parts
    trec_files: dict[str, Path]
    recall: dict[str, dict[int, float]]  # run -> k -> R@k (mean over judged queries)
    seconds: dict[str, float] = field(default_factory=dict)  # searching time per run
    blocks: int = 0


def write_runs_in_blocks(
    queries: pl.DataFrame | pl.LazyFrame,
    searchers: Mapping[str, Searcher],
    parts_dir: Path,
    trec_dir: Path,
    *,
    qrels: pl.DataFrame | None = None,
    block_size: int = 2_000,
    ks: Sequence[int] = (100, 1000),
    extra_runs: Mapping[str, pl.DataFrame] | None = None,
) -> BlockedRuns:
    """Run every searcher block by block (see the module docstring); `extra_runs` (imported runs,
    already whole) are written as they are. `parts_dir` is replaced; TREC files are atomic."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    queries = queries.lazy().sort("query_id")
    n_queries = queries.select(pl.len()).collect().item()
    relevant = _relevant(qrels)
    found: dict[str, dict[int, float]] = {name: {k: 0.0 for k in ks} for name in [*searchers, *(extra_runs or {})]}
    seconds = {name: 0.0 for name in searchers}
    shutil.rmtree(parts_dir, ignore_errors=True)
    parts_dir.mkdir(parents=True)
    trec_files = {name: trec_dir / f"{name}.trec" for name in found}
    part = 0
    with ExitStack() as stack:
        temps = {name: stack.enter_context(atomic_path(path)) for name, path in trec_files.items()}
        outputs = {name: stack.enter_context(open(temp, "wb")) for name, temp in temps.items()}
        blocks = 0
        for start in range(0, n_queries, block_size):
            block = queries.slice(start, block_size).collect()
            blocks += 1
            for name, searcher in searchers.items():
                started = time.monotonic()
                rows = searcher(block)
                seconds[name] += time.monotonic() - started
                part = _write_block(rows, name, parts_dir, part, outputs[name], trec_dir, relevant, found, ks)
        for name, rows in (extra_runs or {}).items():
            part = _write_block(rows, name, parts_dir, part, outputs[name], trec_dir, relevant, found, ks)
        for handle in outputs.values():
            handle.close()
    n_judged = relevant.select("query_id").n_unique() if relevant is not None else 0
    recall = {
        name: {k: (v / n_judged if n_judged else float("nan")) for k, v in by_k.items()} for name, by_k in found.items()
    }
    runs = pl.scan_parquet(str(parts_dir / "part-*.parquet")) if part else pl.LazyFrame(schema=RUN)
    return BlockedRuns(runs=runs, trec_files=trec_files, recall=recall, seconds=seconds, blocks=blocks)


def _relevant(qrels: pl.DataFrame | None) -> pl.DataFrame | None:
    if qrels is None:
        return None
    validate(qrels, QRELS, "qrels")
    relevant = qrels.filter(pl.col("relevance") > 0).select("query_id", "doc_id").unique()
    if relevant.height == 0:
        raise ValueError("write_runs_in_blocks: no query in the qrels has a relevant document")
    return relevant


def _write_block(
    rows: pl.DataFrame,
    name: str,
    parts_dir: Path,
    part: int,
    output,
    trec_dir: Path,
    relevant: pl.DataFrame | None,
    found: dict,
    ks: Sequence[int],
) -> int:
    """Write one block of one run (part file, TREC lines, recall sums); returns the next part number."""
    if rows.height == 0:
        return part
    rows = rows.with_columns(run_name=pl.lit(name)).select(list(RUN))
    validate(rows, RUN, name)
    rows.write_parquet(parts_dir / f"part-{part:06d}.parquet")
    # validated, ranked, sorted lines, through a file named for this process (two writers of one folder
    # never share it; a killed writer's is removed by `clean_orphans`), gone whatever happens
    block_file = temp_name(trec_dir / f"{name}.block.trec")
    try:
        output.write(write_run(rows, block_file).read_bytes())
    finally:
        block_file.unlink(missing_ok=True)
    if relevant is not None:
        judged = relevant.join(rows.select("query_id").unique(), on="query_id", how="semi")
        for k in ks:
            retrieved = top_k(rows, k).select("query_id", "doc_id", hit=pl.lit(True))
            per_query = (
                judged.join(retrieved, on=["query_id", "doc_id"], how="left")
                .group_by("query_id")
                .agg(pl.col("hit").fill_null(False).mean())
            )
            found[name][k] += float(per_query["hit"].sum())
    return part + 1
