"""Run utilities: cut a run to its top k, recall@k against qrels, import an external TREC run,
make scores agree with ranks, append a first stage's candidates below a reranked top k.

The `rank` column of a RUN frame is authoritative: "top k" means rank <= k after ordering by rank.
trec_eval (and so `dagster_ir.evaluation`) reads scores, not ranks, and orders tied scores by doc id;
`strictly_decreasing` nudges tied scores down by the fewest float64 steps, so every evaluator sees
the run's own order (a reranker's ties keep the first-stage order that `rank` holds).
"""

from __future__ import annotations

import os

import numpy as np
import polars as pl

from dagster_ir.retrieval.trec import rank_run, read_run
from dagster_ir.schemas import QRELS, RUN, validate


def top_k(run: pl.DataFrame, k: int) -> pl.DataFrame:
    """The first `k` rows of every query by rank (equal ranks by doc_id), sorted by query, rank."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    validate(run, RUN, "run")
    ordered = run.sort(["query_id", "rank", "doc_id"])
    return ordered.filter(pl.int_range(pl.len()).over("query_id") < k)


def strictly_decreasing(run: pl.DataFrame) -> pl.DataFrame:
    """`run` (sorted by query, rank) with every score lowered where needed so that within a (run_name,
    query) scores strictly decrease along rank: score_i = min(score_i, the float64 just below score_{i-1}).

    A run whose scores already strictly decrease comes back with the same scores; tied scores move
    by a few units in the last place, in rank order.
    """
    validate(run, RUN, "run")
    ordered = run.sort(["run_name", "query_id", "rank", "doc_id"])
    scores = ordered["score"].to_numpy().astype(np.float64, copy=True)
    group = ordered.select(pl.struct("run_name", "query_id").rle_id())[:, 0].to_numpy()
    bad = np.flatnonzero((scores[1:] >= scores[:-1]) & (group[1:] == group[:-1])) + 1
    if bad.size == 0:
        return ordered
    for start in np.unique(group[bad]):  # only the groups that need it, in rank order
        rows = np.flatnonzero(group == start)
        for a, b in zip(rows[:-1], rows[1:]):
            if scores[b] >= scores[a]:
                scores[b] = np.nextafter(scores[a], -np.inf)
    return ordered.with_columns(score=pl.Series(scores, dtype=pl.Float64))


def append_candidates(run: pl.DataFrame, candidates: pl.DataFrame, keys: tuple[str, ...] = ()) -> pl.DataFrame:
    """`run` with, below each (run_name, query, *keys) ranking, the `candidates` of that query it lacks, in
    the candidates' rank order (ranks continue after the run's last; scores strictly below its lowest).

    A reranker holds the first stage's top k only; with the rest appended a measure deeper than k
    reads the candidates' own order below k, as a reranking of the top k of a deeper run would.
    `candidates` is one run (its run_name is not read); extra columns of `run` (`keys`, e.g. seed) are kept.
    """
    validate(run, RUN, "run")
    validate(candidates, RUN, "candidates")
    group = ["run_name", "query_id", *keys]
    tails = run.group_by(group).agg(last_rank=pl.col("rank").max(), floor=pl.col("score").min())
    below = (
        candidates.select("query_id", "doc_id", first_rank="rank")
        .join(tails, on="query_id", how="inner")
        .join(run.select(*group, "doc_id"), on=[*group, "doc_id"], how="anti", nulls_equal=True)
        .sort([*group, "first_rank", "doc_id"])
        .with_columns(step=pl.int_range(1, pl.len() + 1).over(group))
    )
    extra = below.select(
        *(c for c in run.columns if c not in RUN or c in group),
        "doc_id",
        score=pl.col("floor") - pl.col("step") * (1.0 + pl.col("floor").abs()),
        rank=(pl.col("last_rank") + pl.col("step")).cast(pl.Int32),
    )
    return pl.concat([run, extra.select(run.columns)], how="vertical_relaxed").sort([*group, "rank"])


def recall_at_k(run: pl.DataFrame, qrels: pl.DataFrame, k: int) -> float:
    """Mean over the queries with a relevant document of |relevant in top k| / |relevant|.

    Relevant means relevance > 0. A judged query the run does not answer counts as 0; run queries
    without relevant documents are ignored.
    """
    validate(qrels, QRELS, "qrels")
    relevant = qrels.filter(pl.col("relevance") > 0).select("query_id", "doc_id").unique()
    if relevant.height == 0:
        raise ValueError("recall_at_k: no query in the qrels has a relevant document")
    retrieved = top_k(run, k).select("query_id", "doc_id", found=pl.lit(True))
    per_query = (
        relevant.join(retrieved, on=["query_id", "doc_id"], how="left")
        .group_by("query_id")
        .agg(pl.col("found").fill_null(False).mean().alias("recall"))
    )
    return float(per_query["recall"].mean())


def import_run(path: str | os.PathLike[str], run_name: str) -> pl.DataFrame:
    """Read an external TREC run file (e.g. ANCE top-100) as a RUN frame named `run_name`.

    Ranks are reassigned in trec_eval's order (score descending, ties by doc id descending), the
    order every evaluator uses, whatever the file's rank column says.
    """
    return rank_run(read_run(path, run_name=run_name)).select(list(RUN))
