"""Coordinate ascent finds known optima; the direct ranking measures agree with ir_measures."""

import numpy as np
import polars as pl
import pytest

from dagster_ir.evaluation import aggregate, evaluate_run
from dagster_ir.fusion import CoordinateAscentConfig, RankingObjective, coordinate_ascent, learn_fusion

QRELS_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32}


def test_finds_the_optimum_of_a_smooth_objective():
    target = np.array([0.2, -0.5, 0.3])  # unit L1 norm: the optimum among normalised weights

    def objective(w):
        return -float(np.sum((w / np.abs(w).sum() - target) ** 2))

    result = coordinate_ascent(objective, 3, CoordinateAscentConfig(restarts=3, seed=1))
    np.testing.assert_allclose(result.weights, target, atol=0.01)
    assert result.score == pytest.approx(0.0, abs=1e-3)
    assert len(result.restart_scores) == 3 and result.evaluations > 0


def test_line_search_reaches_a_far_optimum():
    # a plateau around the uniform start; the only peak is far away, at w = (-1, 0)
    def objective(w):
        w = w / np.abs(w).sum()
        return 1.0 if w[0] < -0.9 else 0.0

    short = coordinate_ascent(objective, 2, CoordinateAscentConfig(restarts=1, max_steps=1))
    long = coordinate_ascent(objective, 2, CoordinateAscentConfig(restarts=1, max_steps=25))
    assert short.score == 0.0 and long.score == 1.0


def test_random_restarts_escape_where_single_coordinates_cannot():
    # the peak needs two weights negative at once: no single-coordinate move from uniform reaches it
    def objective(w):
        w = w / np.abs(w).sum()
        return 1.0 if w[0] < -0.3 and w[1] < -0.3 else 0.0

    assert coordinate_ascent(objective, 3, CoordinateAscentConfig(restarts=1)).score == 0.0
    assert coordinate_ascent(objective, 3, CoordinateAscentConfig(restarts=20, seed=0)).score == 1.0


def synthetic_candidates(n_queries=30, seed=0):
    """Feature a separates relevant documents (when weighted 1); feature b is large noise."""
    rng = np.random.default_rng(seed)
    rows, qrels = [], []
    for q in range(n_queries):
        for d in range(10):
            relevant = d < 2
            rows.append(
                {
                    "query_id": f"q{q}",
                    "doc_id": f"d{q}_{d}",
                    "a": (1.0 if relevant else 0.0) + rng.normal(0, 0.1),
                    "b": rng.normal(0, 5.0),
                }
            )
            qrels.append({"query_id": f"q{q}", "doc_id": f"d{q}_{d}", "relevance": int(relevant)})
    return pl.DataFrame(rows), pl.DataFrame(qrels, schema=QRELS_SCHEMA)


def test_fusion_learns_the_separating_weights():
    candidates, qrels = synthetic_candidates()
    objective = RankingObjective(candidates, ["a", "b"], qrels, "nDCG@10")
    assert objective(np.array([0.5, 0.5])) < 0.95
    model = learn_fusion(candidates, ["a", "b"], qrels)
    assert model.train_score == pytest.approx(1.0)  # the known optimum: a ranks every relevant doc first
    assert abs(model.weights[0]) > 20 * abs(model.weights[1])
    run = model.apply(candidates, "fused")
    assert run.columns == ["query_id", "doc_id", "score", "rank", "run_name"]
    best = run.filter(pl.col("rank") <= 2).join(qrels, on=["query_id", "doc_id"])
    assert best["relevance"].sum() == 60


@pytest.mark.parametrize("measure", ["RR@10", "RR", "nDCG@10", "nDCG@3", "nDCG", "P@5", "R@5", "AP"])
def test_direct_measures_match_ir_measures(measure):
    rng = np.random.default_rng(3)
    rows = [
        {"query_id": f"q{q}", "doc_id": f"d{d}", "x": float(rng.integers(0, 4))}  # ties on purpose
        for q in range(8)
        for d in range(12)
    ]
    candidates = pl.DataFrame(rows)
    qrels = pl.DataFrame(
        [
            {"query_id": f"q{q}", "doc_id": f"d{d}", "relevance": int(rng.integers(0, 3))}
            for q in range(8)
            for d in range(0, 16, 2)
        ],
        schema=QRELS_SCHEMA,
    )
    objective = RankingObjective(candidates, ["x"], qrels, measure)
    run = candidates.select("query_id", "doc_id", score=pl.col("x"), rank=pl.lit(0, pl.Int32), run_name=pl.lit("r"))
    judged = qrels.filter(pl.col("query_id").is_in(qrels.filter(pl.col("relevance") >= 1)["query_id"].implode()))
    expected = aggregate(evaluate_run(run, judged, [measure]))["mean"][0]
    assert objective(np.array([1.0])) == pytest.approx(expected, abs=1e-9)


def test_other_measures_go_through_ir_measures():
    candidates, qrels = synthetic_candidates(n_queries=3)
    objective = RankingObjective(candidates, ["a", "b"], qrels, "Success@3")
    assert objective(np.array([1.0, 0.0])) == pytest.approx(1.0)
    assert objective(np.array([-1.0, 0.0])) == pytest.approx(0.0)
