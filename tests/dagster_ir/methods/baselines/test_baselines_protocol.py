"""One training unit's baselines: examples from the negatives, roles kept apart, errors on bad input."""

from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from dagster_ir.methods.baselines import profile
from dagster_ir.methods.baselines.protocol import run_baselines
from dagster_ir.methods.baselines.reranker import examples_from_negatives, pairwise_loss
from dagster_ir.schemas import NEGATIVES, QRELS, QUERIES, RUN

WORDS = [f"w{i}" for i in range(30)]


def _unit():
    rng = np.random.default_rng(0)
    docs, run, qrels, negatives, queries = [], [], [], [], []
    for q in range(10):
        terms = [WORDS[2 * q], WORDS[2 * q + 1]]
        queries.append((f"q{q}", " ".join(terms)))
        for d in range(5):
            body = list(rng.choice(WORDS[20:], 6)) + (terms if d == 0 else [])
            docs.append((f"q{q}d{d}", "title", " ".join(body)))
            run.append((f"q{q}", f"q{q}d{d}", float(-d), d + 1, "bm25"))
        qrels.append((f"q{q}", f"q{q}d0", 1))
        negatives += [(f"q{q}", f"q{q}d0", f"q{q}d{n}", n + 1, n - 1) for n in (1, 2)]

    def frame(rows, schema):
        return pl.DataFrame(rows, schema=schema, orient="row")

    corpus = frame(docs, {"doc_id": pl.String, "title": pl.String, "text": pl.String})
    return corpus, frame(queries, QUERIES), frame(qrels, QRELS), frame(run, RUN), frame(negatives, NEGATIVES)


def test_examples_take_the_first_negatives_by_sample_no_cycled():
    _, _, _, _, negatives = _unit()
    examples = examples_from_negatives(negatives, ["q1", "q0"], 3)
    assert examples == [("q0", "q0d0", ("q0d1", "q0d2", "q0d1")), ("q1", "q1d0", ("q1d1", "q1d2", "q1d1"))]
    with pytest.raises(ValueError, match="negatives"):
        examples_from_negatives(negatives.drop("sample_no"), ["q0"], 1)


def test_pairwise_losses_by_hand():
    import torch

    scores = torch.tensor([[2.0, 1.5, 3.0]])
    assert pairwise_loss(scores, "hinge").item() == pytest.approx((0.5 + 2.0) / 2)
    expected = -np.log(np.exp(2.0) / np.exp([2.0, 1.5, 3.0]).sum())
    assert pairwise_loss(scores, "softmax").item() == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="unknown loss"):
        pairwise_loss(scores, "listwise")


def test_run_baselines_scores_the_test_queries_only(tmp_path):
    corpus, queries, qrels, run, negatives = _unit()
    vectors = {w: np.random.default_rng(i).normal(size=4) for i, w in enumerate(WORDS)}
    config = replace(profile("demo"), query_words=2, doc_words=10, epochs=2, rerank_depth=4, threads=1)
    kwargs = dict(
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        candidates=run,
        negatives=negatives,
        train_queries=[f"q{i}" for i in range(6)],
        validation_queries=["q6", "q7"],
        test_queries=["q8", "q9"],
        checkpoint_root=tmp_path,
        tokenize=str.split,
        vectors=vectors,
    )
    (knrm,) = run_baselines(["knrm"], config, **kwargs)
    assert sorted(knrm.run["query_id"].unique()) == ["q8", "q9"]
    assert knrm.run.height == 8 and knrm.examples == 6  # the top 4 of two queries; one example per (query, positive)
    assert len(knrm.result.dev_scores) == 2 and knrm.validation_best == max(knrm.result.dev_scores)
    assert (knrm.checkpoint_dir / "best").is_dir()

    with pytest.raises(ValueError, match="unknown models"):
        run_baselines(["bm42"], config, **kwargs)
    with pytest.raises(ValueError, match="not in the corpus"):
        run_baselines(["knrm"], config, **{**kwargs, "corpus": corpus.filter(pl.col("doc_id") != "q9d3")})
    with pytest.raises(ValueError, match="need `tokenize`"):
        run_baselines(["drmm"], config, **{**kwargs, "vectors": None})


def test_training_pairs_come_from_the_candidates_depth_and_the_training_queries():
    from dagster_ir.methods.baselines.protocol import training_pairs

    _, _, qrels, run, _ = _unit()
    deep = pl.DataFrame([("q0", "q0d4", 1), ("q7", "q7d0", 1)], schema=QRELS, orient="row")
    config = replace(profile("demo"), rerank_depth=3, n_negatives=2)
    pairs = training_pairs(run, pl.concat([qrels, deep]), ["q0", "q1"], config)
    assert set(pairs["query_id"]) == {"q0", "q1"}  # q7 is no training query
    assert set(pairs["pos_doc_id"]) == {"q0d0", "q1d0"}  # q0d4 (rank 5) lies below the depth
    assert pairs["neg_rank"].max() <= 3 and pairs.height == 4
    wider = training_pairs(run, pl.concat([qrels, deep]), ["q0"], replace(config, train_depth=5))
    assert set(wider["pos_doc_id"]) == {"q0d0", "q0d4"}
    with pytest.raises(ValueError, match="train_pairs"):
        replace(config, train_pairs="all")


@pytest.mark.parametrize("name", ["bert-maxp", "knrm"])
@pytest.mark.parametrize("scripted", [(0.9, 0.5, 0.6), (0.1, 0.5, 0.6)])
def test_a_baseline_keeps_its_start_when_no_epoch_beats_it(name, scripted, tmp_path, monkeypatch):
    """The start (pretrained for BERT, freshly initialised for the interaction models) is scored on validation
    before training; kept (weights and all) only when above every epoch."""
    from dagster_ir.methods.baselines import protocol, reranker
    from dagster_ir.neural.backbone import make_tiny_backbone

    corpus, queries, qrels, run, negatives = _unit()
    backbone = str(make_tiny_backbone(tmp_path / "tiny", hidden_size=32, layers=2))
    config = replace(
        profile("demo"),
        backbone=backbone,
        bert_max_length=48,
        epochs=2,
        rerank_depth=4,
        bert_lr=1e-2,
        lr=1e-1,
        bf16=False,
        bert_threads=1,
        threads=1,
        query_words=2,
        doc_words=10,
    )
    vectors = {w: np.random.default_rng(i).normal(size=4) for i, w in enumerate(WORDS)}
    calls = iter(scripted)
    monkeypatch.setattr(protocol, "validation_evaluator", lambda *args: lambda model: next(calls))
    kwargs = dict(
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        candidates=run,
        negatives=negatives,
        train_queries=[f"q{i}" for i in range(6)],
        validation_queries=["q6", "q7"],
        test_queries=["q8", "q9"],
        checkpoint_root=tmp_path / "runs",
        tokenize=str.split,
        vectors=vectors,
    )
    (maxp,) = run_baselines([name], config, **kwargs)
    assert maxp.start_score == scripted[0] and maxp.result.dev_scores == list(scripted[1:])
    if name == "knrm":
        vocabulary = protocol.build_word_vocabulary(protocol.corpus_texts(corpus), str.split, vectors)
        encoder = protocol.WordEncoder(vocabulary, str.split, config.query_words, config.doc_words)
        untrained = protocol.build_word_model(name, vocabulary.vectors, config)
    else:
        untrained, encoder = reranker.build_bert_model(name, config)
    encoder.add_texts(dict(queries.iter_rows()), {d: f"{t} {x}" for d, t, x in corpus.iter_rows()})
    fresh = reranker.rerank_with(untrained, encoder, run, ["q8", "q9"], 4, name, threads=1)
    same = np.allclose(
        maxp.run.sort("query_id", "doc_id")["score"], fresh.sort("query_id", "doc_id")["score"], atol=1e-5
    )
    if scripted[0] > max(scripted[1:]):
        assert maxp.kept_start and maxp.chosen_epoch == 0 and maxp.validation_best == 0.9
        assert same  # the test queries are scored by the starting weights
    else:
        assert not maxp.kept_start and maxp.chosen_epoch == 2 and maxp.validation_best == 0.6
        assert not same  # lr 1e-2 moved the weights
