"""Negative sampling: pools without positives, hard = top-n, determinism, false negatives."""

from __future__ import annotations

from collections import Counter

import polars as pl
import pytest

from dagster_ir.negatives import (
    NegativeConfig,
    SamplingCounts,
    false_negative_share,
    sample_negatives,
)
from dagster_ir.schemas import NEGATIVES, QRELS, RUN


def run_of(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    """A RUN frame from (query, doc, rank); score = -rank."""
    runs = [(q, d, -float(r), r, "bm25") for q, d, r in rows]
    return pl.DataFrame(runs, schema=RUN, orient="row")


def qrels_of(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=QRELS, orient="row")


# q1 ranks d1..d10; q2 ranks e1, e2; q5 is answered and judged but not requested.
RUN_ROWS = run_of([("q1", f"d{r}", r) for r in range(1, 11)] + [("q2", "e1", 1), ("q2", "e2", 2), ("q5", "f1", 1)])
QRELS_TRAIN = qrels_of([
    ("q1", "d2", 1), ("q1", "d5", 2), ("q1", "d99", 1),  # positives of q1 (d99 is not in the run)
    ("q1", "d3", 0),                                     # judged non-relevant: stays a candidate
    ("q2", "e1", 1),                                     # q2's pool is only e2
    ("q3", "g1", 1),                                     # q3 is not in the run: no candidates
    ("q5", "f2", 1),
])  # fmt: skip
QUERY_IDS = ["q1", "q2", "q3", "q4"]  # q4 has no positive
# With depth 6 the pool of q1 is d1, d3, d4, d6 (ranks 1, 3, 4, 6): d2 and d5 are positives.
Q1_POOL = {"d1": 1, "d3": 3, "d4": 4, "d6": 6}
HARD_3 = NegativeConfig(strategy="hard", depth=6, n_per_positive=3)


def test_hard_negatives_are_the_top_non_positives() -> None:
    sample = sample_negatives(RUN_ROWS, QRELS_TRAIN, QUERY_IDS, HARD_3)
    assert sample.negatives.schema == pl.Schema(NEGATIVES)
    expected = [
        (q, p, d, r, i)
        for q, p in [("q1", "d2"), ("q1", "d5"), ("q1", "d99")]
        for i, (d, r) in enumerate([("d1", 1), ("d3", 3), ("d4", 4)])
    ] + [("q2", "e1", "e2", 2, i) for i in range(3)]  # too few candidates: the pool repeated
    assert sample.negatives.rows() == expected
    assert sample.counts == SamplingCounts(
        queries=2, positives=4, negatives=12, without_positives=1, without_candidates=1,
        with_replacement=1,
    )  # fmt: skip


def test_random_negatives_are_drawn_from_the_pool_without_replacement() -> None:
    config = NegativeConfig(strategy="random", depth=6, n_per_positive=3)
    negatives = sample_negatives(RUN_ROWS, QRELS_TRAIN, QUERY_IDS, config).negatives
    for (query, _), rows in negatives.group_by("query_id", "pos_doc_id"):
        if query == "q1":
            assert len(set(rows["neg_doc_id"])) == 3  # distinct
            pairs = zip(rows["neg_doc_id"], rows["neg_rank"], strict=True)
            assert all(Q1_POOL[doc] == rank for doc, rank in pairs)
        else:
            assert rows["neg_doc_id"].to_list() == ["e2"] * 3
        assert rows["sample_no"].sort().to_list() == [0, 1, 2]
    positives = QRELS_TRAIN.filter(pl.col("relevance") > 0).rename({"doc_id": "neg_doc_id"})
    assert negatives.join(positives, on=["query_id", "neg_doc_id"]).height == 0


def test_sampling_ignores_row_order_and_the_seed_and_depth_matter() -> None:
    shuffled_run = RUN_ROWS.sample(fraction=1.0, shuffle=True, seed=3)
    for config in (NegativeConfig(depth=6, n_per_positive=2), HARD_3):
        first = sample_negatives(RUN_ROWS, QRELS_TRAIN, QUERY_IDS, config)
        again = sample_negatives(shuffled_run, QRELS_TRAIN.reverse(), QUERY_IDS[::-1], config)
        assert again.negatives.equals(first.negatives) and again.counts == first.counts

    def q1_negatives(**settings: int) -> list[str]:
        config = NegativeConfig(n_per_positive=2, **settings)
        sample = sample_negatives(RUN_ROWS, QRELS_TRAIN, ["q1"], config)
        return sample.negatives["neg_doc_id"].to_list()

    assert len({tuple(q1_negatives(depth=6, seed=seed)) for seed in (1, 2, 3)}) > 1
    assert set(q1_negatives(depth=3)) == {"d1", "d3"}  # the pool at depth 3


def test_random_negatives_are_uniform_over_the_pool() -> None:
    run = run_of([("q", f"c{r}", r) for r in range(1, 11)])
    qrels = qrels_of([("q", f"p{i}", 1) for i in range(400)])  # 400 positives, none in the run
    sample = sample_negatives(run, qrels, ["q"], NegativeConfig(n_per_positive=2))
    counts = Counter(sample.negatives["neg_doc_id"])
    assert sample.counts.negatives == 800 and len(counts) == 10
    assert all(55 <= c <= 105 for c in counts.values()), counts  # 80 expected each


def test_false_negative_share_on_a_known_case() -> None:
    hard = sample_negatives(RUN_ROWS, QRELS_TRAIN, QUERY_IDS, HARD_3).negatives
    dense_qrels = qrels_of([("q1", "d4", 1), ("q1", "d1", 0), ("q2", "d4", 2), ("q1", "d2", 1)])
    # d4 is judged relevant for q1 and was sampled once per q1 positive: 3 of the 12 negatives.
    assert false_negative_share(hard, dense_qrels) == pytest.approx(3 / 12)
    assert false_negative_share(hard, qrels_of([])) == 0.0
    with pytest.raises(ValueError, match="no negatives"):
        false_negative_share(hard.head(0), dense_qrels)


def test_bad_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="strategy: 'random' or 'hard', not 'easy'"):
        NegativeConfig(strategy="easy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="depth must be >= 1"):
        NegativeConfig(depth=0)
    with pytest.raises(ValueError, match="n_per_positive must be >= 1"):
        NegativeConfig(n_per_positive=0)
