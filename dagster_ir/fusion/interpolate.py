"""Interpolation of a reranker with its first stage: score = w * first stage + (1 - w) * model.

Both scores are min-max normalised per query over the reranked documents (a query whose scores
are all equal gets 0 for that side), so one weight suits every query. w = 1 is the candidates'
order exactly (ties broken by the candidate rank, scores made strictly decreasing), w = 0 the
model's own order; a row can fall below its candidates only where the weight chosen on validation
does worse on test. `choose_weight` picks w from a grid (default 0, 0.1, ..., 1) by a measure over
validation queries only; equal values prefer the larger w (closer to the candidates).

Interpolating with the first-stage score is standard on small collections (Birch, CEDR's and
monoBERT's BM25 interpolation), but none of the four papers reports such rows: they are beyond the
papers, shown beside the pure models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from dagster_ir.retrieval.runs import strictly_decreasing
from dagster_ir.schemas import QRELS, RUN, validate

GRID: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(11))


def minmax_per_query(run: pl.DataFrame, column: str = "score") -> pl.Expr:
    """(x - min) / (max - min) of `column` over each query (0 where a query's values are all equal)."""
    low, high = pl.col(column).min().over("query_id"), pl.col(column).max().over("query_id")
    return pl.when(high > low).then((pl.col(column) - low) / (high - low)).otherwise(0.0)


def interpolate(model_run: pl.DataFrame, candidates: pl.DataFrame, weight: float, run_name: str) -> pl.DataFrame:
    """RUN rows over the documents of `model_run` (one run): w * norm(first stage) + (1 - w) * norm(model).

    Every document of `model_run` must be among `candidates` (the run it reranked).
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"interpolate: weight must be in [0, 1], got {weight}")
    validate(model_run, RUN, "model_run")
    validate(candidates, RUN, "candidates")
    joined = model_run.select("query_id", "doc_id", model="score").join(
        candidates.select("query_id", "doc_id", first="score", first_rank="rank"), on=["query_id", "doc_id"], how="left"
    )
    missing = joined.filter(pl.col("first").is_null())
    if missing.height:
        row = missing.row(0, named=True)
        raise ValueError(
            f"interpolate: {missing.height} documents of the model run are not among the candidates "
            f"(e.g. query {row['query_id']!r}, doc {row['doc_id']!r})"
        )
    scored = joined.with_columns(first=minmax_per_query(joined, "first"), model=minmax_per_query(joined, "model"))
    scored = scored.with_columns(score=weight * pl.col("first") + (1.0 - weight) * pl.col("model"))
    ranked = (
        scored.sort(["query_id", "score", "first_rank"], descending=[False, True, False])
        .with_columns(rank=(pl.int_range(pl.len()).over("query_id") + 1).cast(pl.Int32), run_name=pl.lit(run_name))
        .select(list(RUN))
    )
    return strictly_decreasing(ranked).sort(["query_id", "rank"])


@dataclass(frozen=True)
class WeightChoice:
    """The weight chosen on validation queries, and the validation value of every weight tried."""

    weight: float
    measure: str
    validation: dict[float, float]


def choose_weight(
    model_run: pl.DataFrame,
    candidates: pl.DataFrame,
    qrels: pl.DataFrame,
    measure: str = "nDCG@10",
    grid: Sequence[float] = GRID,
) -> WeightChoice:
    """The weight of `grid` whose interpolation of `model_run` (validation queries only) scores best on
    `measure` over those queries' qrels; ties prefer the larger weight."""
    from dagster_ir.evaluation import evaluate_run

    validate(qrels, QRELS, "qrels")
    if not grid:
        raise ValueError("choose_weight: empty grid")
    queries = model_run["query_id"].unique().implode()
    judged = qrels.filter(pl.col("query_id").is_in(queries))
    if judged.height == 0:
        raise ValueError(f"choose_weight: none of the {model_run['query_id'].n_unique()} validation queries has qrels")
    values = {}
    for w in grid:
        run = interpolate(model_run, candidates, float(w), "validation")
        values[float(w)] = float(evaluate_run(run, judged, [measure])["value"].mean())
    best = max(values, key=lambda w: (values[w], w))
    return WeightChoice(best, measure, values)


def interpolated_run(
    validation_run: pl.DataFrame,
    test_run: pl.DataFrame,
    candidates: pl.DataFrame,
    qrels: pl.DataFrame,
    run_name: str,
    measure: str = "nDCG@10",
    grid: Sequence[float] = GRID,
) -> tuple[pl.DataFrame, WeightChoice]:
    """The test queries' interpolation under the weight chosen on the validation queries' run."""
    choice = choose_weight(validation_run, candidates, qrels, measure, grid)
    return interpolate(test_run, candidates, choice.weight, run_name), choice
