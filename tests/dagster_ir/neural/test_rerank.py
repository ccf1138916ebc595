"""Reranking: every candidate kept, only reordered; batched scoring equals one-at-a-time scoring."""

import numpy as np
import polars as pl
import pytest
import torch

from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.cross_encoder import CrossEncoder
from dagster_ir.neural.rerank import CrossEncoderScorer, RerankConfig, rerank, score_encoded
from dagster_ir.schemas import RUN


class WordOverlap:
    """Scores a pair by the number of query words in the document (a scorer we can compute by hand)."""

    def score_pairs(self, queries, docs):
        return np.array([len(set(q.split()) & set(d.split())) for q, d in zip(queries, docs)], dtype=float)


def _run(rows):
    return pl.DataFrame(rows, schema=["query_id", "doc_id", "score", "rank", "run_name"], orient="row").cast(RUN)


QUERIES = pl.DataFrame({"query_id": ["q1", "q2"], "text": ["red apple", "blue sky"]})
CORPUS = pl.DataFrame(
    {
        "doc_id": ["a", "b", "c", "d"],
        "title": ["", "apple", "", ""],
        "text": ["nothing here", "red fruit", "blue sky today", "sky"],
    }
)
RUN_ROWS = [
    ("q1", "a", 9.0, 1, "bm25"),
    ("q1", "b", 8.0, 2, "bm25"),
    ("q1", "c", 7.0, 3, "bm25"),
    ("q2", "a", 5.0, 1, "bm25"),
    ("q2", "d", 4.0, 2, "bm25"),
    ("q2", "c", 3.0, 3, "bm25"),
]


def test_rerank_keeps_every_candidate_and_only_reorders():
    out = rerank(_run(RUN_ROWS), QUERIES, CORPUS, WordOverlap(), RerankConfig(depth=3, run_name="overlap"))
    assert out.schema == pl.Schema(RUN)
    assert out.sort("query_id", "rank").select("query_id", "doc_id").rows() == [
        ("q1", "b"),
        ("q1", "a"),
        ("q1", "c"),  # b scores 2 ("apple" comes from its title); a, c tie at 0
        ("q2", "c"),
        ("q2", "d"),
        ("q2", "a"),  # c: 2 words, d: 1, a: 0
    ]
    assert out["run_name"].unique().to_list() == ["overlap"]
    assert out.group_by("query_id").agg(pl.col("rank").sort()).sort("query_id")["rank"].to_list() == [[1, 2, 3]] * 2
    untitled = rerank(_run(RUN_ROWS), QUERIES, CORPUS, WordOverlap(), RerankConfig(depth=3, use_title=False))
    assert untitled.filter(pl.col("doc_id") == "b", pl.col("query_id") == "q1")["score"].item() == 1.0


def test_tied_scores_keep_the_candidate_order_for_the_evaluator():
    from dagster_ir.evaluation import evaluate_run

    out = rerank(_run(RUN_ROWS), QUERIES, CORPUS, WordOverlap(), RerankConfig(depth=3, run_name="overlap"))
    q1 = out.filter(pl.col("query_id") == "q1").sort("rank")
    assert q1["score"].n_unique() == 3 and q1["score"].is_sorted(descending=True)  # a, c tied at 0: a stays above
    qrels = pl.DataFrame({"query_id": ["q1"], "doc_id": ["a"], "relevance": [1]}).cast({"relevance": pl.Int32})
    # trec_eval's order of a tie is doc id descending (c before a): with ties left, RR would be 1/3
    assert evaluate_run(out, qrels, ["RR"])["value"].item() == pytest.approx(1 / 2)


def test_rerank_cuts_at_depth_and_chunks_queries_without_changing_the_result():
    full = rerank(_run(RUN_ROWS), QUERIES, CORPUS, WordOverlap(), RerankConfig(depth=2))
    assert full.height == 4 and set(full.filter(pl.col("query_id") == "q2")["doc_id"]) == {"a", "d"}
    chunked = rerank(_run(RUN_ROWS), QUERIES, CORPUS.lazy(), WordOverlap(), RerankConfig(depth=2, queries_per_chunk=1))
    assert chunked.sort("query_id", "rank").equals(full.sort("query_id", "rank"))


def test_missing_texts_and_mixed_runs_are_errors():
    with pytest.raises(ValueError, match="doc_ids of the run, e.g. \\['zz'\\]"):
        rerank(_run([("q1", "zz", 1.0, 1, "bm25")]), QUERIES, CORPUS, WordOverlap())
    with pytest.raises(ValueError, match="query_ids"):
        rerank(_run([("q9", "a", 1.0, 1, "bm25")]), QUERIES, CORPUS, WordOverlap())
    with pytest.raises(ValueError, match="one candidate run"):
        rerank(_run([("q1", "a", 1.0, 1, "bm25"), ("q1", "a", 1.0, 1, "ql")]), QUERIES, CORPUS, WordOverlap())


def test_cross_encoder_scores_do_not_depend_on_batching_or_padding(tmp_path):
    model = CrossEncoder.from_pretrained(str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16)), max_length=32)
    model.train()
    scorer = CrossEncoderScorer(model, batch_size=3)
    queries = ["red apple", "blue sky", "red apple", "a much longer query about the sky and the sea"]
    docs = ["red fruit", "sky", "an apple a day keeps the doctor away " * 3, "sea"]
    batched = scorer.score_pairs(queries, docs)
    pairs = scorer.encode(queries, docs)
    one_by_one = [score_encoded(model, [p], model.tokenizer.pad_token_id, batch_size=1)[0] for p in pairs]
    np.testing.assert_allclose(batched, one_by_one, rtol=1e-5, atol=1e-6)
    assert model.training  # the scorer restores the mode it found
    with torch.no_grad():
        model.eval()
        direct = model(**model.collate(pairs)).numpy()
    np.testing.assert_allclose(batched, direct, rtol=1e-5, atol=1e-6)


def _tiny_scorer_model(tmp_path):
    model = CrossEncoder.from_pretrained(str(make_tiny_backbone(tmp_path / "tiny", hidden_size=32)), max_length=48)
    return model.eval()


PAIRS = (
    ["red apple", "blue sky", "a much longer query about the sky and the sea", "red apple", "wind"],
    ["red fruit", "an apple a day keeps the doctor away " * 4, "sea", "sky over the sea", "wind tunnel " * 9],
)


def test_fast_path_equals_the_plain_path_in_input_order(tmp_path):
    model = _tiny_scorer_model(tmp_path)
    fast = CrossEncoderScorer(model, batch_size=2).score_pairs(*PAIRS)
    plain = CrossEncoderScorer(model, batch_size=2, fast=False).score_pairs(*PAIRS)
    np.testing.assert_allclose(fast, plain, rtol=0, atol=1e-5)
    assert len(set(np.round(fast, 6))) == len(fast)  # distinct scores: a wrong order would show
    # the input order is restored: reversed input, reversed scores
    reversed_scores = CrossEncoderScorer(model, batch_size=2).score_pairs(PAIRS[0][::-1], PAIRS[1][::-1])
    np.testing.assert_allclose(reversed_scores[::-1], fast, rtol=0, atol=1e-5)


def test_bf16_is_opt_in_close_to_fp32_and_validated(tmp_path, monkeypatch):
    import dagster_ir.neural.rerank as rerank_module

    model = _tiny_scorer_model(tmp_path)
    assert CrossEncoderScorer(model).bf16 is False
    if rerank_module.bf16_supported():
        fp32 = CrossEncoderScorer(model).score_pairs(*PAIRS)
        bf16 = CrossEncoderScorer(model, bf16=True).score_pairs(*PAIRS)
        assert not np.array_equal(bf16, fp32)
        np.testing.assert_allclose(bf16, fp32, rtol=0, atol=2e-2)
    with pytest.raises(TypeError, match="bf16 must be True or False"):
        CrossEncoderScorer(model, bf16="yes")
    with pytest.raises(ValueError, match="batch_size"):
        CrossEncoderScorer(model, batch_size=0)
    monkeypatch.setattr(rerank_module, "bf16_supported", lambda: False)
    with pytest.raises(ValueError, match="AVX-512 BF16 or AMX"):
        CrossEncoderScorer(model, bf16=True)
