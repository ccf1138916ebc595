"""Run utilities: top-k by rank, recall@k by hand, import of a TREC run file."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from dagster_ir.retrieval.runs import import_run, recall_at_k, top_k
from dagster_ir.schemas import QRELS, RUN


def run_of(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    """A RUN frame from (query, doc, rank); score = -rank."""
    return pl.DataFrame([(q, d, -float(r), r, "r") for q, d, r in rows], schema=RUN, orient="row")


def qrels_of(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=QRELS, orient="row")


RUN_ROWS = run_of([("q1", "c", 3), ("q1", "a", 1), ("q1", "b", 2), ("q2", "x", 2), ("q2", "y", 1)])


def test_top_k_keeps_the_best_ranks_of_every_query() -> None:
    cut = top_k(RUN_ROWS, 2)
    assert list(zip(cut["query_id"], cut["doc_id"], strict=True)) == [
        ("q1", "a"), ("q1", "b"), ("q2", "y"), ("q2", "x")
    ]  # fmt: skip
    assert top_k(RUN_ROWS, 100).height == 5
    with pytest.raises(ValueError, match="k must be >= 1"):
        top_k(RUN_ROWS, 0)


def test_recall_at_k_by_hand() -> None:
    qrels = qrels_of([
        ("q1", "a", 1), ("q1", "c", 2), ("q1", "z", 0),  # q1: relevant a, c
        ("q2", "x", 1),                                    # q2: relevant x
        ("q3", "m", 1),                                    # q3: not in the run: recall 0
        ("q4", "n", 0),                                    # q4: nothing relevant: ignored
    ])  # fmt: skip
    # k=2: q1 finds a (1/2), q2 finds x (1/1), q3 0 -> (0.5 + 1 + 0) / 3
    assert recall_at_k(RUN_ROWS, qrels, 2) == pytest.approx(0.5)
    # k=1: q1 finds a (1/2), q2's top is y (0), q3 0 -> 0.5 / 3
    assert recall_at_k(RUN_ROWS, qrels, 1) == pytest.approx(0.5 / 3)
    assert recall_at_k(RUN_ROWS, qrels, 3) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="no query in the qrels has a relevant document"):
        recall_at_k(RUN_ROWS, qrels_of([("q1", "a", 0)]), 10)


def test_import_run_renames_and_ranks_like_trec_eval(tmp_path: Path) -> None:
    path = tmp_path / "ance.trec"
    path.write_text("q1 Q0 d1 1 2.5 ance\nq1 Q0 d2 2 3.0 ance\nq2 Q0 d3 1 1.0 ance\n")
    run = import_run(path, "ance-top100")
    assert run.schema == pl.Schema(RUN)
    assert run.rows() == [
        ("q1", "d2", 3.0, 1, "ance-top100"),  # the file's ranks disagree with its scores
        ("q1", "d1", 2.5, 2, "ance-top100"),
        ("q2", "d3", 1.0, 1, "ance-top100"),
    ]


def test_strictly_decreasing_keeps_the_rank_order_of_ties_for_the_evaluator() -> None:
    from dagster_ir.evaluation import evaluate_run
    from dagster_ir.retrieval.runs import strictly_decreasing

    tied = pl.DataFrame(
        [
            ("q1", "a", 1.0, 1, "r"),
            ("q1", "b", 1.0, 2, "r"),
            ("q1", "c", 1.0, 3, "r"),
            ("q1", "d", 0.5, 4, "r"),
            ("q2", "x", 2.0, 1, "r"),
        ],
        schema=RUN,
        orient="row",
    )
    qrels = qrels_of([("q1", "a", 1)])
    assert evaluate_run(tied, qrels, ["RR"])["value"].item() == pytest.approx(1 / 3)  # trec_eval: c, b, a by doc id
    fixed = strictly_decreasing(tied)
    assert evaluate_run(fixed, qrels, ["RR"])["value"].item() == 1.0  # the run's own order
    q1 = fixed.filter(pl.col("query_id") == "q1")
    assert q1["doc_id"].to_list() == ["a", "b", "c", "d"] and q1["score"].is_sorted(descending=True)
    assert q1["score"].n_unique() == 4 and abs(q1["score"][2] - 1.0) < 1e-12 and q1["score"][3] == 0.5
    untouched = strictly_decreasing(RUN_ROWS)
    assert untouched.sort("query_id", "doc_id").equals(RUN_ROWS.sort("query_id", "doc_id"))


def test_append_candidates_continues_below_the_reranked_top_in_first_stage_order() -> None:
    from dagster_ir.retrieval.runs import append_candidates

    candidates = run_of([("q1", d, r) for r, d in enumerate("abcde", start=1)] + [("q2", "x", 1)])
    reranked = pl.DataFrame([("q1", "b", 0.9, 1, "m"), ("q1", "a", 0.2, 2, "m")], schema=RUN, orient="row")
    full = append_candidates(reranked.with_columns(seed=pl.lit(3)), candidates, keys=("seed",))
    assert full["doc_id"].to_list() == ["b", "a", "c", "d", "e"]  # q2 is not the reranker's: nothing added
    assert full["rank"].to_list() == [1, 2, 3, 4, 5] and full["score"].is_sorted(descending=True)
    assert full["seed"].to_list() == [3] * 5 and set(full["run_name"]) == {"m"}
    untrained = append_candidates(reranked.with_columns(seed=pl.lit(None, dtype=pl.Int64)), candidates, keys=("seed",))
    assert untrained["doc_id"].to_list() == ["b", "a", "c", "d", "e"]  # a null seed is a key like any other
