"""Tuning lambda and p_self on the validation queries: the chosen point is the grid's best, and a
re-mixed self translation equals pruning with it."""

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp

from dagster_ir.methods.model1 import (
    PruneConfig,
    ScoringConfig,
    TranslationTable,
    TuningGrid,
    index_collection,
    prune,
    tune_model1,
    with_self_prob,
    word_vocabulary,
)
from dagster_ir.schemas import QRELS, RUN

# q1 "car": d1 (relevant) says "automobile" once in 4 words, d2 says "car" once in 2. With the rows
# T(car|automobile) = 1 - p and T(car|car) = p, d1 wins iff (1 - p) / 4 > p / 2, i.e. p < 1/3.
CORPUS = pl.DataFrame({"doc_id": ["d1", "d2"], "title": ["", ""], "text": ["automobile red blue green", "car yellow"]})
QUERIES = pl.DataFrame({"query_id": ["q1"], "text": ["car"]})
RUN_FRAME = pl.DataFrame([("q1", "d2", 2.0, 1, "bm25"), ("q1", "d1", 1.0, 2, "bm25")], schema=RUN, orient="row")
QRELS_FRAME = pl.DataFrame([("q1", "d1", 1)], schema=QRELS, orient="row")


@pytest.fixture(scope="module")
def setup():
    vocab = word_vocabulary([CORPUS["text"].to_list(), QUERIES["text"].to_list()])
    ids = dict(zip(vocab.tokens, range(len(vocab))))
    raw = np.zeros((len(vocab), len(vocab)))
    raw[ids["automobile"], [ids["automobile"], ids["car"]]] = [0.5, 0.5]
    raw[ids["car"], [ids["car"], ids["automobile"]]] = [0.5, 0.5]
    for word in ("red", "blue", "green", "yellow"):
        raw[ids[word], ids[word]] = 1.0
    index, stats = index_collection(CORPUS, vocab)
    return vocab, ids, sp.csr_matrix(raw), index, stats


def test_the_chosen_point_is_the_best_on_the_validation_queries(setup):
    vocab, ids, raw, index, stats = setup
    table = TranslationTable(vocab, prune(raw, PruneConfig(self_prob=0.5)))  # tuned from a p_self the grid may drop
    grid = TuningGrid(lams=(0.1, 0.3), self_probs=(0.5, 0.2, 0.05))
    tuned = tune_model1(table, index, stats, RUN_FRAME, QUERIES, QRELS_FRAME, ScoringConfig(), grid)
    scores = {(r["lam"], r["self_prob"]): r["score"] for r in tuned.grid.iter_rows(named=True)}
    assert len(scores) == 6 and tuned.grid["chosen"].sum() == 1
    for lam in grid.lams:
        assert scores[(lam, 0.5)] == pytest.approx(1 / np.log2(3))  # d1 second
        assert scores[(lam, 0.2)] == pytest.approx(1.0) and scores[(lam, 0.05)] == pytest.approx(1.0)
    # the best score, the first in grid order among equals: lambda 0.1, p_self 0.2
    assert (tuned.scoring.lam, tuned.self_prob) == (0.1, 0.2)
    assert tuned.table.matrix[ids["automobile"], ids["car"]] == pytest.approx(0.8)
    assert tuned.grid.filter("chosen")["score"].item() == max(scores.values())


def test_re_mixing_self_translation_equals_pruning_with_it(setup):
    vocab, ids, raw, _, _ = setup
    pruned = prune(raw, PruneConfig(self_prob=0.2))
    for p in (0.05, 0.5, 1.0):
        again = with_self_prob(TranslationTable(vocab, pruned), p).matrix.toarray()
        assert np.allclose(again, prune(raw, PruneConfig(self_prob=p)).toarray(), atol=1e-6)


def test_a_bad_grid_is_refused():
    with pytest.raises(ValueError, match="lambdas and p_self"):
        TuningGrid(lams=(0.0,))
    with pytest.raises(ValueError, match="at least one"):
        TuningGrid(self_probs=())
