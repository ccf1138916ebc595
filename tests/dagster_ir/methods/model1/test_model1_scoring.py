"""The Model 1 scorer against a direct loop over the formula; the explanation; the forward index."""

import math

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp

from dagster_ir.methods.model1 import (
    Model1Scorer,
    ScoringConfig,
    TranslationTable,
    index_collection,
    word_vocabulary,
)

CORPUS = pl.DataFrame(
    {
        "doc_id": ["d1", "d2", "d3", "d4"],
        "title": ["", "", "", "Cars"],
        "text": ["the automobile engine roars", "cheap automobile prices", "engine oil and oil prices", "a car"],
    }
)
QUERIES = pl.DataFrame({"query_id": ["q1", "q2"], "text": ["car engine car", "zebra prices"]})


@pytest.fixture(scope="module")
def setup():
    vocab = word_vocabulary([CORPUS["text"].to_list(), CORPUS["title"].to_list(), QUERIES["text"].to_list()])
    ids = dict(zip(vocab.tokens, range(len(vocab))))
    dense = np.zeros((len(vocab), len(vocab)))
    dense[ids["automobile"], [ids["car"], ids["automobile"]]] = [0.6, 0.4]
    dense[ids["engine"], [ids["engine"], ids["car"], ids["oil"]]] = [0.5, 0.3, 0.2]
    dense[ids["oil"], [ids["oil"], ids["engine"]]] = [0.7, 0.3]
    dense[ids["prices"], ids["prices"]] = 1.0
    table = TranslationTable(vocab, sp.csr_matrix(dense.astype(np.float32)))
    index, stats = index_collection(CORPUS, vocab)
    return vocab, table, index, stats


def direct_score(query: list[str], doc: list[str], table, stats, lam, unseen) -> float:
    """The formula with Python loops: 1/|Q| sum_q log[(1-lam) sum_d T(q|d) P(d|D) + lam P(q|C)]."""
    vocab = table.vocabulary
    total = 0.0
    for q in query:
        qi = vocab.ids_of([q])[0]
        translated = sum(table.matrix[vocab.ids_of([d])[0], qi] * doc.count(d) / len(doc) for d in set(doc))
        cf = stats.term_counts[qi]
        p_c = cf / stats.n_tokens if cf > 0 else unseen
        total += math.log((1 - lam) * translated + lam * p_c)
    return total / len(query)


def test_scores_match_the_direct_computation(setup):
    vocab, table, index, stats = setup
    config = ScoringConfig(lam=0.3, unseen_prob=1e-6)
    scorer = Model1Scorer(table, index, stats, config)
    docs = [
        ["automobile", "engine", "roars"],
        ["cheap", "automobile", "prices"],
        ["engine", "oil", "oil", "prices"],
        ["cars", "car"],
    ]
    for query in [["car", "engine", "car"], ["zebra", "prices"]]:
        got = scorer.score_rows(vocab.ids_of(query), np.arange(4))
        expected = [direct_score(query, doc, table, stats, 0.3, 1e-6) for doc in docs]
        np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_lambda_and_unseen_probability_matter(setup):
    vocab, table, index, stats = setup
    query = vocab.ids_of(["zebra", "car"])
    base = Model1Scorer(table, index, stats, ScoringConfig(lam=0.3, unseen_prob=1e-6)).score_rows(query, np.arange(4))
    for other in [ScoringConfig(lam=0.5, unseen_prob=1e-6), ScoringConfig(lam=0.3, unseen_prob=1e-3)]:
        assert not np.allclose(Model1Scorer(table, index, stats, other).score_rows(query, np.arange(4)), base)


def test_rerank_orders_by_score_and_names_the_run(setup):
    _, table, index, stats = setup
    run = pl.DataFrame(
        {
            "query_id": ["q1"] * 4,
            "doc_id": ["d1", "d2", "d3", "d4"],
            "score": [4.0, 3, 2, 1],
            "rank": [1, 2, 3, 4],
            "run_name": ["bm25"] * 4,
        },
        schema={
            "query_id": pl.String,
            "doc_id": pl.String,
            "score": pl.Float64,
            "rank": pl.Int32,
            "run_name": pl.String,
        },
    )
    reranked = Model1Scorer(table, index, stats, ScoringConfig()).rerank(run, QUERIES, "model1")
    assert reranked["run_name"].unique().to_list() == ["model1"]
    assert reranked["rank"].to_list() == [1, 2, 3, 4]
    assert reranked["score"].is_sorted(descending=True)
    assert reranked["doc_id"][0] == "d1"  # "automobile engine": both translate into car, engine is exact


def test_explanation_sums_to_the_score(setup):
    _, table, index, stats = setup
    scorer = Model1Scorer(table, index, stats, ScoringConfig(lam=0.2))
    explained = scorer.explain("car engine", "automobile engine engine oil")
    expected = scorer.score_texts("car engine", ["automobile engine engine oil"])[0]
    assert explained["contribution"].sum() == pytest.approx(expected, rel=1e-5)
    car = explained.row(0, named=True)
    assert car["query_token"] == "car" and car["doc_tokens"] == ["engine", "automobile"]
    assert car["doc_weights"][0] == pytest.approx(0.8 * 0.3 * 2 / 4)  # (1-lam) T(car|engine) P(engine|D)


def test_index_statistics(setup):
    vocab, _, index, stats = setup
    oil, unk = vocab.ids_of(["oil"])[0], vocab.unk_id
    assert stats.n_docs == 4 and stats.term_counts[oil] == 2 and stats.doc_freq[oil] == 1
    assert stats.n_tokens == 3 + 3 + 4 + 2  # title + text, stop words removed
    assert stats.term_counts[unk] == 0
    assert stats.collection_probs(1e-9)[unk] == 1e-9
    assert index.lengths.tolist() == [3, 3, 4, 2]
    partial, _ = index_collection(CORPUS, vocab, keep=pl.Series(["d3"]))
    assert partial.doc_ids.to_list() == ["d3"] and partial.rows_of(["d3"]).tolist() == [0]
    with pytest.raises(KeyError, match="d1"):
        partial.rows_of(["d1"])


def test_explanation_markdown_has_a_row_per_query_token(setup):
    from dagster_ir.methods.model1 import explanation_markdown

    _, table, index, stats = setup
    scorer = Model1Scorer(table, index, stats, ScoringConfig())
    text = explanation_markdown("car engine", "\nautomobile engine", scorer.explain("car engine", "automobile engine"))
    assert text.startswith("**car engine** - automobile engine\n")
    assert "| car |" in text and "| engine |" in text and "log P(Q" in text


def test_dense_columns_product_equals_the_sparse_product_on_a_random_table():
    rng = np.random.default_rng(0)
    texts = [" ".join(f"w{i}" for i in rng.integers(0, 60, rng.integers(1, 40))) for _ in range(50)]
    corpus = pl.DataFrame({"doc_id": [f"d{i}" for i in range(50)], "title": [""] * 50, "text": texts})
    vocab = word_vocabulary([texts])
    matrix = sp.random(len(vocab), len(vocab), density=0.2, random_state=1, format="csr", dtype=np.float32)
    table = TranslationTable(vocab, matrix)
    index, stats = index_collection(corpus, vocab)
    scorer = Model1Scorer(table, index, stats, ScoringConfig())
    rows = rng.permutation(50)[:30]
    for query in (vocab.ids_of(["w1", "w2", "w2", "w59"]), vocab.ids_of(["w7"])):
        sparse_product = (index.probabilities(rows) @ table.by_target[:, np.unique(query)]).toarray()
        tokens, multiplicity = np.unique(query, return_counts=True)
        inner = 0.9 * sparse_product + 0.1 * scorer.collection_probs[tokens]
        expected = (np.log(inner) @ multiplicity) / query.size
        np.testing.assert_allclose(scorer.score_rows(query, rows), expected, rtol=1e-6)
        np.testing.assert_allclose(scorer.score_probabilities(query, index.probabilities(rows)), expected, rtol=1e-6)
