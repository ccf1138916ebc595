"""Score normalisation, BM25 over word pieces/words, and lining runs up as features."""

import math

import numpy as np
import polars as pl
import pytest

from dagster_ir.fusion import divide_by_query, feature_frame
from dagster_ir.methods.model1 import (
    Ragged,
    bm25_rerank,
    bm25_scores,
    index_collection,
    query_idf_sums,
    word_vocabulary,
)

CORPUS = pl.DataFrame(
    {
        "doc_id": ["d1", "d2", "d3"],
        "title": ["", "", ""],
        "text": ["apple banana apple", "banana cherry", "cherry cherry cherry durian"],
    }
)


@pytest.fixture(scope="module")
def indexed():
    vocab = word_vocabulary([CORPUS["text"].to_list()])
    index, stats = index_collection(CORPUS, vocab)
    return vocab, index, stats


def idf(df, n=3):
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def test_query_idf_sums(indexed):
    vocab, _, stats = indexed
    queries = Ragged.from_lists(
        [vocab.ids_of(["apple", "banana"]).tolist(), vocab.ids_of(["cherry", "cherry", "zebra"]).tolist(), []]
    )
    np.testing.assert_allclose(query_idf_sums(queries, stats), [idf(1) + idf(2), 2 * idf(2), 0.0])


def test_bm25_scores_by_hand(indexed):
    vocab, index, stats = indexed
    k1, b, avgdl = 0.9, 0.4, 9 / 3
    query = vocab.ids_of(["banana", "cherry"])
    got = bm25_scores(query, np.arange(3), index, stats)

    def term(tf, dl, df):
        return idf(df) * tf / (tf + k1 * (1 - b + b * dl / avgdl)) if tf else 0.0

    expected = [term(1, 3, 2), term(1, 2, 2) + term(1, 2, 2), term(3, 4, 2)]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_bm25_rerank_is_a_run(indexed):
    vocab, index, stats = indexed
    run = pl.DataFrame(
        {
            "query_id": ["q", "q", "q"],
            "doc_id": ["d1", "d2", "d3"],
            "score": [3.0, 2, 1],
            "rank": [1, 2, 3],
            "run_name": ["bm25"] * 3,
        }
    ).cast({"rank": pl.Int32})
    queries = pl.DataFrame({"query_id": ["q"], "text": ["Durian!"]})
    reranked = bm25_rerank(run, queries, vocab, index, stats, "bm25(words)")
    assert reranked["doc_id"][0] == "d3" and reranked["run_name"][0] == "bm25(words)"


def test_divide_by_query():
    run = pl.DataFrame({"query_id": ["a", "a", "b", "c"], "score": [2.0, 4.0, 3.0, 5.0]})
    norms = pl.DataFrame({"query_id": ["a", "b"], "norm": [2.0, 0.0]})
    assert divide_by_query(run, norms)["score"].to_list() == [1.0, 2.0, 3.0, 5.0]


def test_feature_frame_fills_missing_candidates_with_the_query_minimum():
    base = pl.DataFrame({"query_id": ["q", "q", "r"], "doc_id": ["a", "b", "c"], "score": [1.0, 2.0, 3.0]})
    other = pl.DataFrame({"query_id": ["q", "q"], "doc_id": ["a", "x"], "score": [-1.0, -5.0]})
    frame = feature_frame({"bm25": base, "m1": other})
    assert frame.columns == ["query_id", "doc_id", "bm25", "m1"]
    assert frame["m1"].to_list() == [-1.0, -5.0, 0.0]
