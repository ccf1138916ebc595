"""Runs trained under several seeds: per-seed evaluation, seed-averaged per-query values, the spread.

A run frame may carry a `seed` column (the training unit's seed; see
`dagster_ir.collections.protocol`). Untrained runs (BM25, say) carry none, or null: they are the
same under every seed. `evaluate_seeds` evaluates each (run, seed) on its own, so a run merged over
the folds of one seed is evaluated over every query it covers; `average_seeds` gives the per-query
mean over seeds, the values the paired significance test compares (one value per query, so the
test's unit stays the query); `seed_spread` gives, per run and measure, the mean over seeds of the
per-seed means and their sample standard deviation, which says how much of a difference training
noise alone could make.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from dagster_ir.evaluation.measures import EvaluationConfig, evaluate_run
from dagster_ir.schemas import PER_QUERY_EVAL

SEED = "seed"
SEED_SPREAD = {
    "run_name": pl.String,
    "measure": pl.String,
    "seeds": pl.UInt32,
    "mean": pl.Float64,
    "sd": pl.Float64,
    "min": pl.Float64,
    "max": pl.Float64,
}


def evaluate_seeds(
    runs: pl.DataFrame, qrels: pl.DataFrame, measures: Sequence[str], config: EvaluationConfig | None = None
) -> pl.DataFrame:
    """PER_QUERY_EVAL rows plus `seed` (null for a run without one), each (run, seed) evaluated alone."""
    if SEED not in runs.columns:
        runs = runs.with_columns(pl.lit(None, dtype=pl.Int64).alias(SEED))
    duplicated = runs.select(pl.struct("run_name", SEED, "query_id", "doc_id").is_duplicated().any()).item()
    if duplicated:
        raise ValueError(
            "evaluate_seeds: a (run_name, seed, query_id, doc_id) occurs twice: "
            "two units scored the same query under one seed"
        )
    parts = []
    for (seed,), part in runs.partition_by(SEED, as_dict=True, maintain_order=True).items():
        values = evaluate_run(part.drop(SEED), qrels, list(measures), config or EvaluationConfig())
        parts.append(values.with_columns(pl.lit(seed, dtype=pl.Int64).alias(SEED)))
    if not parts:
        return pl.DataFrame(schema={**PER_QUERY_EVAL, SEED: pl.Int64})
    return pl.concat(parts)


def average_seeds(per_query: pl.DataFrame) -> pl.DataFrame:
    """PER_QUERY_EVAL rows: each (run, query, measure) averaged over the run's seeds."""
    if SEED not in per_query.columns:
        return per_query.select(list(PER_QUERY_EVAL))
    return (
        per_query.group_by("run_name", "query_id", "measure", maintain_order=True)
        .agg(pl.col("value").mean())
        .select(list(PER_QUERY_EVAL))
        .cast(PER_QUERY_EVAL)
    )


def seed_spread(per_query: pl.DataFrame) -> pl.DataFrame:
    """SEED_SPREAD rows: per run and measure, the per-seed means' mean, sample sd (null for one
    seed), min and max over the seeds; a run without seeds counts as one."""
    if SEED not in per_query.columns:
        per_query = per_query.with_columns(pl.lit(None, dtype=pl.Int64).alias(SEED))
    per_seed = per_query.group_by("run_name", "measure", SEED, maintain_order=True).agg(pl.col("value").mean())
    return (
        per_seed.group_by("run_name", "measure", maintain_order=True)
        .agg(
            seeds=pl.len().cast(pl.UInt32),
            mean=pl.col("value").mean(),
            sd=pl.col("value").std(ddof=1),
            min=pl.col("value").min(),
            max=pl.col("value").max(),
        )
        .cast(SEED_SPREAD)
    )
