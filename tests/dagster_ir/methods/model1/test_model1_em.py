"""EM for IBM Model 1 against values computed by hand, and the parallel corpus it learns from."""

import math
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from dagster_ir.methods.model1 import (
    Bitext,
    BitextConfig,
    EMConfig,
    Model1Config,
    PruneConfig,
    Ragged,
    chunk_pairs,
    symmetrise,
    train_em,
    train_model1,
    word_vocabulary,
)

A, B, X, Y = 0, 1, 2, 3
V = 4


def tiny_bitext() -> Bitext:
    """(a b -> x y), (a -> x)."""
    return Bitext(Ragged.from_lists([[A, B], [A]]), Ragged.from_lists([[X, Y], [X]]))


def test_first_iteration_is_normalised_cooccurrence():
    # E-step with uniform t: every alignment gets 1/l. counts x|a = 1/2 + 1, y|a = 1/2, x|b = y|b = 1/2
    result = train_em(lambda: [tiny_bitext()], V, EMConfig(iterations=1))
    t = result.matrix.toarray()
    assert t[A, X] == pytest.approx(0.75)
    assert t[A, Y] == pytest.approx(0.25)
    assert t[B, X] == pytest.approx(0.5)
    assert t[B, Y] == pytest.approx(0.5)
    assert result.matrix.nnz == 4


def test_second_iteration_by_hand():
    # pair 1, target x: posteriors a: .75/1.25 = .6, b: .4; target y: a: .25/.75 = 1/3, b: 2/3
    # counts x|a = .6 + 1 = 1.6, y|a = 1/3 -> t(x|a) = 24/29; x|b = .4, y|b = 2/3 -> t(x|b) = 3/8
    result = train_em(lambda: [tiny_bitext()], V, EMConfig(iterations=2))
    t = result.matrix.toarray()
    assert t[A, X] == pytest.approx(24 / 29)
    assert t[A, Y] == pytest.approx(5 / 29)
    assert t[B, X] == pytest.approx(3 / 8)
    assert t[B, Y] == pytest.approx(5 / 8)
    first, second = result.history
    assert first.log_likelihood == pytest.approx(0.0)  # constant t: every target's sum / l is 1
    expected = (math.log(0.625) + math.log(0.375) + math.log(0.75)) / 3
    assert second.log_likelihood == pytest.approx(expected)
    assert second.pairs == 2 and second.alignments == 4 + 1 and second.pairs_per_second > 0


def test_blocks_do_not_change_the_result():
    rng = np.random.default_rng(0)
    rows = [rng.integers(0, 6, size=rng.integers(1, 5)).tolist() for _ in range(30)]
    targets = [rng.integers(0, 6, size=rng.integers(1, 4)).tolist() for _ in range(30)]
    bitext = Bitext(Ragged.from_lists(rows), Ragged.from_lists(targets))
    whole = train_em(lambda: [bitext], 6, EMConfig(iterations=3))
    pieces = train_em(lambda: [bitext], 6, EMConfig(iterations=3, block_entries=5))
    np.testing.assert_allclose(whole.matrix.toarray(), pieces.matrix.toarray(), rtol=1e-12)
    np.testing.assert_allclose(whole.matrix.sum(axis=1)[np.unique(bitext.source.ids)], 1.0)


def test_empty_corpus_is_an_error():
    empty = Bitext(Ragged.from_lists([[]]), Ragged.from_lists([[X]]))
    with pytest.raises(ValueError, match="no non-empty pairs"):
        train_em(lambda: [empty], V)


def test_chunks_have_the_length_of_the_query():
    queries = Ragged.from_lists([[7, 8]])  # length 2, ratio 1.5 -> chunks of 3
    docs = Ragged.from_lists([[1, 2, 3, 4, 5, 6, 9]])
    bitext = chunk_pairs(queries, docs, BitextConfig(chunk_ratio=1.5, min_chunk=2))
    assert [bitext.source.row(i).tolist() for i in range(len(bitext))] == [[1, 2, 3], [4, 5, 6], [9]]
    assert all(bitext.target.row(i).tolist() == [7, 8] for i in range(3))
    both = symmetrise(bitext)
    assert len(both) == 6 and both.source.row(3).tolist() == [7, 8] and both.target.row(5).tolist() == [9]


def test_min_chunk_applies_to_short_queries():
    bitext = chunk_pairs(
        Ragged.from_lists([[7], [8]]),
        Ragged.from_lists([[1, 2, 3, 4, 5], [6]]),
        BitextConfig(chunk_ratio=1.0, min_chunk=4),
    )
    assert bitext.source.lengths.tolist() == [4, 1, 1]
    assert bitext.target.ids.tolist() == [7, 7, 8]


def test_train_model1_learns_a_translation():
    queries = pl.DataFrame({"query_id": ["q1", "q2", "q3"], "text": ["car", "car prices", "cheap car"]})
    corpus = pl.DataFrame(
        {
            "doc_id": ["d1", "d2", "d3"],
            "title": ["", "", ""],
            "text": ["automobile engine", "automobile prices", "cheap automobile"],
        }
    )
    qrels = pl.DataFrame(
        {"query_id": ["q1", "q2", "q3"], "doc_id": ["d1", "d2", "d3"], "relevance": [1, 1, 1]},
        schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32},
    )
    vocab = word_vocabulary([corpus["text"].to_list(), queries["text"].to_list()])
    config = Model1Config(
        vocabulary="words",
        em=EMConfig(iterations=5),
        prune=PruneConfig(min_prob=0.0, self_prob=None),
        bitext=BitextConfig(chunk_ratio=10, symmetric=False),
    )
    trained = train_model1(queries, qrels, corpus, queries["query_id"], vocab, config)
    t = trained.table.matrix.toarray()
    car, automobile, engine = vocab.ids_of(["car", "automobile", "engine"])
    assert t[automobile, car] == t[automobile].max() > 0.5
    assert t[engine, car] == pytest.approx(1.0)  # engine only ever sits beside "car" queries
    assert trained.n_query_doc_pairs == 3 and trained.n_bitext_pairs == 3 and len(trained.history) == 5
    spooled = train_model1(
        queries,
        qrels,
        corpus,
        queries["query_id"],
        vocab,
        replace(config, spool_to_disk=True, bitext=replace(config.bitext, block_pairs=1)),
    )
    np.testing.assert_allclose(spooled.table.matrix.toarray(), t, rtol=1e-6)


def test_null_word_em_matches_two_pairs_computed_by_hand():
    # (a -> x y), (b -> x), every source with the empty word N prepended. Iteration 1 (uniform t):
    # x, y of pair 1 split 1/2 : 1/2 between N and a; x of pair 2 between N and b, so
    # t(x|a) = t(y|a) = 1/2, t(x|b) = 1, t(x|N) = 2/3, t(y|N) = 1/3. Iteration 2, pair 1:
    # x -> a (1/2) / (2/3 + 1/2) = 3/7, y -> a (1/2) / (1/3 + 1/2) = 3/5, so t(x|a) = (3/7) / (3/7 + 3/5) = 5/12.
    bitext = Bitext(Ragged.from_lists([[A], [B]]), Ragged.from_lists([[X, Y], [X]]))
    with_null = train_em(lambda: [bitext], V, EMConfig(iterations=2, null_word=True)).matrix.toarray()
    assert with_null.shape == (V, V)  # the NULL row is discarded
    assert with_null[A, X] == pytest.approx(5 / 12)
    assert with_null[A, Y] == pytest.approx(7 / 12)
    assert with_null[B, X] == pytest.approx(1.0)
    without = train_em(lambda: [bitext], V, EMConfig(iterations=2)).matrix.toarray()
    assert without[A, X] == pytest.approx(0.5) and without[A, Y] == pytest.approx(0.5)  # a is x's and y's only source


def test_null_word_adds_one_alignment_per_target_token():
    bitext = Bitext(Ragged.from_lists([[A, B], [A]]), Ragged.from_lists([[X, Y], [X]]))
    plain = train_em(lambda: [bitext], V, EMConfig(iterations=1)).history[0]
    null = train_em(lambda: [bitext], V, EMConfig(iterations=1, null_word=True)).history[0]
    assert (plain.alignments, null.alignments) == (2 * 2 + 1, 3 * 2 + 2 * 1)
