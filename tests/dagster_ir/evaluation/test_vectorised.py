"""The vectorised measures give ir_measures' values (trec_eval's) query by query, to the last bit."""

from __future__ import annotations

import ir_measures
import numpy as np
import polars as pl
import pytest

from dagster_ir.evaluation import DEFAULT_MEASURES, EvaluationConfig, evaluate_run
from dagster_ir.evaluation.vectorised import vectorised_measures
from dagster_ir.schemas import PER_QUERY_EVAL

MEASURES = DEFAULT_MEASURES + [
    "RR", "nDCG@3", "AP@5", "P@1", "P(rel=2)@5", "R(rel=2)@10", "RR(rel=2)@3", "AP(rel=2)", "R@2",
]  # fmt: skip


def random_runs(seed: int, n_queries: int = 40, shuffle: bool = False) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Two runs and qrels with everything trec_eval has a rule for.

    Scores drawn from few values (many ties, broken by doc id), run depths from 0 to 60 with
    some above the cutoffs, graded and negative relevance, queries with no relevant document,
    queries of the qrels a run does not answer and queries of a run the qrels do not judge.
    """
    rng = np.random.default_rng(seed)
    run_rows, qrels_rows = [], []
    for q in range(n_queries):
        pool = [f"d{i}" for i in rng.choice(200, 80, replace=False)]
        judged = rng.choice(80, int(rng.integers(1, 30)), replace=False)
        levels = rng.choice([-1, 0, 0, 1, 1, 2, 3], len(judged)) if q % 7 else np.zeros(len(judged), int)
        if q % 11 != 5:  # query q5, q16, ...: not judged at all
            qrels_rows += [(f"q{q}", pool[j], int(r)) for j, r in zip(judged, levels)]
        for run_name in ("a", "b"):
            if (q + (run_name == "b")) % 9 == 0:
                continue  # this run does not answer the query
            depth = int(rng.integers(0, 61))
            scores = rng.choice([0.5, 1.0, 1.5, 2.0, 2.25, 3.0], depth) * (1 + (q % 3))
            run_rows += [(run_name, f"q{q}", pool[i], float(s)) for i, s in zip(rng.permutation(80)[:depth], scores)]
    run = pl.DataFrame(
        run_rows,
        schema={"run_name": pl.String, "query_id": pl.String, "doc_id": pl.String, "score": pl.Float64},
        orient="row",
    )
    if shuffle:
        run = run.sample(fraction=1.0, shuffle=True, seed=seed)
    run = run.with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("run_name", "query_id"))
    qrels = pl.DataFrame(
        qrels_rows, schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32}, orient="row"
    )
    return run.select("query_id", "doc_id", "score", "rank", "run_name"), qrels


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("count_missing_as_zero", [True, False])
def test_every_value_equals_ir_measures(seed: int, shuffle: bool, count_missing_as_zero: bool) -> None:
    run, qrels = random_runs(seed, shuffle=shuffle)
    assert vectorised_measures([ir_measures.parse_measure(m) for m in MEASURES]) is not None
    ours = evaluate_run(run, qrels, MEASURES, EvaluationConfig(count_missing_as_zero))
    reference = evaluate_run(run, qrels, MEASURES, EvaluationConfig(count_missing_as_zero, vectorised=False))
    assert ours.schema == pl.Schema(PER_QUERY_EVAL)
    assert ours.height == reference.height > 0
    assert ours.select("run_name", "query_id", "measure").equals(reference.select("run_name", "query_id", "measure"))
    differing = ours.with_columns(expected=reference["value"]).filter(pl.col("value") != pl.col("expected"))
    assert differing.height == 0, differing.head(10)
    assert ours["value"].max() > 0.5  # not all zeros


def test_ir_measures_directly_on_distinct_scores_agrees() -> None:
    # With no tied scores every provider orders as trec_eval does: ir_measures on the raw run.
    # (Distinct in float32 too: trec_eval keeps scores as floats.)
    run, qrels = random_runs(3)
    run = run.with_columns(score=pl.Series(np.random.default_rng(0).permutation(run.height), dtype=pl.Float64))
    run = run.filter(pl.col("run_name") == "a")
    ours = evaluate_run(run, qrels, DEFAULT_MEASURES)
    direct = ir_measures.iter_calc(
        [ir_measures.parse_measure(m) for m in DEFAULT_MEASURES],
        qrels.to_pandas(),
        run.select("query_id", "doc_id", "score").to_pandas(),
    )
    expected = {(m.query_id, str(m.measure)): m.value for m in direct}
    got = {(q, m): v for _, q, m, v in ours.iter_rows()}
    assert got == expected


def test_other_measures_and_parameters_go_to_ir_measures() -> None:
    for name in [
        "nDCG(judged_only=True)@10",
        "P(judged_only=True)@5",
        "Judged@10",
        "ERR@10",
        "SetP",
        "Rprec",
        "nDCG(dcg='exp-log2')@10",
        "NumRet",
        "nDCG",
    ]:
        assert vectorised_measures([ir_measures.parse_measure(name)]) is None, name
    run, qrels = random_runs(4)
    mixed = evaluate_run(run, qrels, ["nDCG@10", "Rprec"])  # Rprec sends both to ir_measures
    alone = evaluate_run(run, qrels, ["nDCG@10"])
    assert mixed.filter(pl.col("measure") == "nDCG@10")["value"].to_list() == alone["value"].to_list()


def test_hand_computed_values_with_ties_and_negative_relevance() -> None:
    # trec_eval order of q: c (3.0), b and a tied at 2.0 -> b first (doc id descending), then z.
    run = pl.DataFrame(
        {
            "query_id": ["q"] * 4,
            "doc_id": ["a", "b", "c", "z"],
            "score": [2.0, 2.0, 3.0, 1.0],
            "rank": [1, 2, 3, 4],
            "run_name": ["r"] * 4,
        },
        schema={
            "query_id": pl.String,
            "doc_id": pl.String,
            "score": pl.Float64,
            "rank": pl.Int32,
            "run_name": pl.String,
        },
    )
    qrels = pl.DataFrame(
        {"query_id": ["q"] * 3, "doc_id": ["a", "b", "z"], "relevance": [2, -1, 1]},
        schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32},
    )
    values = dict(evaluate_run(run, qrels, ["RR", "AP", "P@3", "nDCG@2"]).select("measure", "value").iter_rows())
    assert values["RR"] == 1 / 3  # a at position 3
    assert values["AP"] == (1 / 3 + 2 / 4) / 2
    assert values["P@3"] == 1 / 3
    assert values["nDCG@2"] == 0.0  # c unjudged, b negative: no gain in the top 2
