"""Interpolation with the first stage: weight 1 is the candidates, weight 0 the model, the weight is
chosen on validation queries only."""

from __future__ import annotations

import polars as pl
import pytest

from dagster_ir.evaluation import evaluate_run
from dagster_ir.fusion import choose_weight, interpolate, interpolated_run
from dagster_ir.schemas import QRELS, RUN


def run_of(rows: list[tuple[str, str, float]], name: str) -> pl.DataFrame:
    """A RUN frame from (query, doc, score), ranks by score (ties in row order)."""
    frame = pl.DataFrame([(q, d, s, 0, name) for q, d, s in rows], schema=RUN, orient="row")
    return frame.with_columns(rank=(pl.int_range(pl.len()).over("query_id") + 1).cast(pl.Int32))


def qrels_of(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=QRELS, orient="row")


# BM25 with a tie (b and c, b first by rank), a model that reverses BM25's order
BM25 = run_of([("q1", "a", 9.0), ("q1", "b", 5.0), ("q1", "c", 5.0), ("q1", "d", 1.0)], "bm25")
MODEL = run_of([("q1", "d", 0.9), ("q1", "c", 0.5), ("q1", "b", 0.4), ("q1", "a", 0.1)], "knrm")


def order(run: pl.DataFrame) -> list[str]:
    return run.sort("rank")["doc_id"].to_list()


def test_weight_one_reproduces_the_candidates_even_for_an_evaluator_that_reads_scores() -> None:
    mixed = interpolate(MODEL, BM25, 1.0, "knrm+bm25")
    assert order(mixed) == ["a", "b", "c", "d"]
    assert mixed["score"].is_sorted(descending=True) and mixed["score"].n_unique() == 4  # no tie left to re-sort
    qrels = qrels_of([("q1", "b", 1)])  # b above c only by rank: a score tie would put c (larger doc id) first
    assert evaluate_run(mixed, qrels, ["RR"])["value"].item() == pytest.approx(1 / 2)


def test_weight_zero_is_the_model_and_half_blends_normalised_scores() -> None:
    assert order(interpolate(MODEL, BM25, 0.0, "m")) == ["d", "c", "b", "a"]
    half = interpolate(MODEL, BM25, 0.5, "m")
    # normalised BM25 a 1, b .5, c .5, d 0; model d 1, c .5, b .375, a 0 -> a .5, b .4375, c .5, d .5
    scores = dict(zip(half["doc_id"], half["score"], strict=True))
    assert scores["b"] == pytest.approx(0.4375)
    assert order(half)[-1] == "b" and order(half)[:3] == ["a", "c", "d"]  # ties by BM25 rank


def test_the_weight_is_chosen_on_validation_queries_only() -> None:
    # validation query v: the model is right (relevant doc last in BM25); test query t: BM25 is right
    bm25 = run_of(
        [("v", "x", 3.0), ("v", "y", 2.0), ("v", "z", 1.0), ("t", "x", 3.0), ("t", "y", 2.0), ("t", "z", 1.0)], "bm25"
    )
    model = run_of(
        [("v", "z", 3.0), ("v", "y", 2.0), ("v", "x", 1.0), ("t", "z", 3.0), ("t", "y", 2.0), ("t", "x", 1.0)], "m"
    )
    qrels = qrels_of([("v", "z", 1), ("t", "x", 1)])
    validation, test = model.filter(pl.col("query_id") == "v"), model.filter(pl.col("query_id") == "t")
    run, choice = interpolated_run(validation, test, bm25, qrels, "m+bm25", "nDCG@10")
    assert choice.weight < 0.5  # validation prefers the model ...
    assert order(run) == ["z", "y", "x"]  # ... so test gets the model's order although BM25's would score better there
    assert choose_weight(test, bm25, qrels, "nDCG@10").weight == 1.0  # what test alone would have picked
    assert set(run["query_id"]) == {"t"}


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="weight must be in"):
        interpolate(MODEL, BM25, 1.5, "m")
    stranger = run_of([("q1", "zz", 1.0)], "m")
    with pytest.raises(ValueError, match="not among the candidates"):
        interpolate(stranger, BM25, 0.5, "m")
    with pytest.raises(ValueError, match="has qrels"):
        choose_weight(MODEL, BM25, qrels_of([("q9", "a", 1)]))
