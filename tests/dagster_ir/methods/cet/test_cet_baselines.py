"""RocketQA denoising and RANCE sampling: known curves and weights, rejected candidates never drawn."""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl
import pytest

from dagster_ir.methods.cet.baselines import (
    DenoiseConfig,
    RanceConfig,
    denoised_negatives,
    rance_rank_weights,
    relevance_by_rank,
    sample_negatives_by_rank,
)
from dagster_ir.schemas import NEGATIVES, QRELS, RUN


def run_of(ranking: dict[str, list[str]]) -> pl.DataFrame:
    rows = [(q, d, -float(r), r, "dense") for q, docs in ranking.items() for r, d in enumerate(docs, start=1)]
    return pl.DataFrame(rows, schema=RUN, orient="row")


def qrels_of(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=QRELS, orient="row")


def test_relevance_by_rank_counts_relevant_documents_per_rank() -> None:
    run = run_of({"a": ["a1", "a2", "a3"], "b": ["b1", "b2", "b3"], "c": ["c1"]})
    dense = qrels_of([("a", "a1", 1), ("a", "a2", 2), ("b", "b1", 1), ("b", "b3", 0), ("c", "c9", 1)])
    curve = relevance_by_rank(run, dense, ["a", "b", "c"], depth=4)
    assert curve.rows() == [(1, 2 / 3), (2, 1 / 3), (3, 0.0), (4, 0.0)]  # 3 queries answered
    with pytest.raises(ValueError, match="none of the requested"):
        relevance_by_rank(run, dense, ["zzz"], depth=2)


def test_rance_weights_match_a_direct_computation() -> None:
    curve = pl.DataFrame(
        {"rank": [1, 2, 3, 4], "p_relevant": [0.5, 0.25, 0.0, 0.0]}, schema={"rank": pl.Int32, "p_relevant": pl.Float64}
    )
    gains = np.array([0.5 / np.log(2), 0.75 / np.log(3), 1 / np.log(4), 1 / np.log(5)])
    raw = rance_rank_weights(curve, RanceConfig(smoothing=1))  # a window of one rank: no smoothing
    assert raw == pytest.approx((gains - gains.min()) / (gains - gains.min()).sum())
    smoothed_gains = np.array([gains[:2].mean(), gains[:3].mean(), gains[1:].mean(), gains[2:].mean()])
    expected = smoothed_gains - smoothed_gains.min()
    assert rance_rank_weights(curve, RanceConfig(smoothing=2)) == pytest.approx(expected / expected.sum())
    flat = pl.DataFrame({"rank": [1, 2], "p_relevant": [1.0, 1.0]}, schema=curve.schema)
    assert rance_rank_weights(flat).tolist() == [0.5, 0.5]  # all gains 0: uniform


def test_rank_weighted_sampling_follows_the_weights_and_skips_positives() -> None:
    run = run_of({"q": ["d1", "d2", "d3", "d4", "d5"]})
    labels = qrels_of([("q", f"p{i}", 1) for i in range(600)] + [("q", "d5", 1)])  # d5 is labelled
    weights = np.array([0.0, 1.0, 0.0, 3.0, 5.0])
    sample = sample_negatives_by_rank(run, labels, ["q"], weights, RanceConfig(n_per_positive=1, seed=7))
    assert sample.negatives.schema == pl.Schema(NEGATIVES)
    drawn = Counter(sample.negatives["neg_doc_id"].to_list())
    assert set(drawn) == {"d2", "d4"}  # zero-weight ranks and the positive d5 never drawn
    assert drawn["d4"] / 601 == pytest.approx(0.75, abs=0.06)
    again = sample_negatives_by_rank(run.reverse(), labels.reverse(), ["q"], weights, RanceConfig(seed=7))
    assert again.negatives.equals(sample.negatives)
    sparse = np.array([0.0, 1.0, 0.0, 3.0, 0.0])  # two documents of positive weight, three asked for
    three = sample_negatives_by_rank(run, labels.head(1), ["q"], sparse, RanceConfig(n_per_positive=3))
    drawn = three.negatives.sort("sample_no")["neg_doc_id"].to_list()
    assert set(drawn[:2]) == {"d2", "d4"} and drawn[2] in {"d1", "d3", "d5"}  # then a zero-weight one
    with pytest.raises(ValueError, match="rank_weights"):
        sample_negatives_by_rank(run, labels, ["q"], np.array([1.0, -1.0]))


def test_denoising_keeps_exactly_the_candidates_scored_at_most_eta() -> None:
    run = run_of({"q": [f"d{i}" for i in range(1, 7)], "r": ["e1", "e2"]})
    labels = qrels_of([("q", f"p{i}", 1) for i in range(300)] + [("r", "e0", 1)])
    # eta 0.5 on the first ranker's raw scale: d2 and d5 (1.0) and both of r's candidates lie above it.
    doc_scores = {"d1": -2.0, "d2": 1.0, "d3": -1.0, "d4": 0.5, "d5": 1.0, "d6": -3.0, "e1": 2.0, "e2": 3.0}
    calls: list[int] = []

    def score(pairs: pl.DataFrame) -> np.ndarray:
        calls.append(pairs.height)
        return np.array([doc_scores[d] for d in pairs["doc_id"]])  # a positive would raise KeyError

    result = denoised_negatives(run, labels, ["q", "r"], score, DenoiseConfig(depth=6, eta=0.5, seed=1))
    negatives = result.sample.negatives
    drawn = Counter(negatives["neg_doc_id"].to_list())
    assert set(drawn) == {"d1", "d3", "d4", "d6"}  # d4 sits at eta: kept; uniform over the rest, ~75 each
    assert min(drawn.values()) > 45
    assert "r" not in negatives["query_id"].to_list()  # both candidates of r are rejected
    assert result.sample.counts.positives == 300
    assert result.scored == 8  # every candidate at most once, positives never
    assert result.rejected > 0 and len(calls) <= 4  # scored in a few batches, lazily
    loose = denoised_negatives(run, labels, ["q"], score, DenoiseConfig(depth=6, eta=1.0, seed=1))
    assert {"d2", "d5"} <= set(loose.sample.negatives["neg_doc_id"].to_list())  # at eta 1 they are kept
    strict = denoised_negatives(run, labels, ["q"], score, DenoiseConfig(depth=6, eta=-1.5, seed=1))
    assert set(strict.sample.negatives["neg_doc_id"]) == {"d1", "d6"}


def test_denoising_rejects_bad_scorers_and_settings() -> None:
    run = run_of({"q": ["d1"]})
    labels = qrels_of([("q", "p", 1)])
    with pytest.raises(ValueError, match="finite scores"):
        denoised_negatives(run, labels, ["q"], lambda pairs: np.full(pairs.height, np.nan))
    with pytest.raises(ValueError, match="eta"):
        DenoiseConfig(eta=float("inf"))
