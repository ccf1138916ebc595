"""Run utilities: cut a run to its top k, recall@k against qrels, import an external TREC run.

The `rank` column of a RUN frame is authoritative: "top k" means rank <= k after ordering by rank.
"""

from __future__ import annotations

import os

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
