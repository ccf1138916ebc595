import numpy as np
import polars as pl
import pytest
import torch

from dagster_ir.neural import distill as ds
from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.cross_encoder import CrossEncoder
from dagster_ir.neural.training import TrainConfig

WORDS = ["wing", "flow", "heat", "shock", "boundary", "layer", "plate", "cone", "jet", "noise", "panel", "buckling"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))


def _corpus(n=12):
    rng = np.random.default_rng(0)
    rows = [
        {
            "doc_id": f"d{i}",
            "title": " ".join(rng.choice(WORDS, 2)) if i % 4 else "",
            "text": " ".join(rng.choice(WORDS, 8)),
        }
        for i in range(n)
    ]
    return pl.DataFrame(rows)


class Overlap:
    """A stand-in teacher: the share of the document's words that are "wing" or "flow"."""

    def score_pairs(self, queries, docs):
        return np.array([sum(w in ("wing", "flow") for w in d.split()) / len(d.split()) for d in docs])


def _run(queries, corpus, depth=6):
    rows = [
        {"query_id": q, "doc_id": d, "score": float(depth - r), "rank": r + 1, "run_name": "bm25"}
        for q in queries["query_id"]
        for r, d in enumerate(corpus["doc_id"][:depth])
    ]
    return pl.DataFrame(rows, schema_overrides={"rank": pl.Int32})


def test_pseudo_queries_are_titles_or_first_words_never_a_judged_query():
    corpus = _corpus()
    pq = ds.pseudo_queries(corpus, words=3)
    assert pq["query_id"].to_list() == [f"pq:d{i}" for i in range(12)]
    first = dict(zip(pq["query_id"], pq["text"], strict=True))
    assert first["pq:d1"] == corpus["title"][1]  # has a title
    assert first["pq:d0"] == " ".join(corpus["text"][0].split()[:3])  # no title: first words
    drawn = ds.pseudo_queries(corpus, max_queries=5, seed=1)
    assert drawn.height == 5 and drawn.equals(ds.pseudo_queries(corpus, max_queries=5, seed=1))


def test_margin_pairs_carry_the_teacher_margin_and_skip_ties():
    scores = pl.DataFrame(
        {"query_id": ["q"] * 3 + ["r"] * 2, "doc_id": ["a", "b", "c", "a", "b"], "teacher": [0.9, 0.5, 0.5, 0.3, 0.3]}
    )
    pairs = ds.margin_pairs(scores, 20, np.random.default_rng(0))
    teacher = {("q", "a"): 0.9, ("q", "b"): 0.5, ("q", "c"): 0.5}
    assert pairs and all(p.query_id == "q" for p in pairs)  # r's candidates tie: no pair
    assert all(
        p.margin == pytest.approx(teacher["q", p.first] - teacher["q", p.second]) and p.margin != 0 for p in pairs
    )


def test_margin_mse_is_zero_on_matching_margins_and_squared_otherwise():
    s1, s2 = torch.tensor([3.0, 1.0]), torch.tensor([1.0, 1.0])
    assert float(ds.margin_mse_loss(s1, s2, torch.tensor([2.0, 0.0]))) == 0.0
    assert float(ds.margin_mse_loss(s1, s2, torch.tensor([0.0, 0.0]))) == pytest.approx(2.0)  # (4 + 0) / 2


def test_distillation_lowers_the_margin_mse_on_a_tiny_model(tiny, tmp_path):
    corpus = _corpus()
    pq = ds.pseudo_queries(corpus)
    scores = ds.teacher_scores(_run(pq, corpus), pq, corpus, depth=6, scorer=Overlap())
    assert scores.height == 12 * 6 and set(scores.columns) == {"query_id", "doc_id", "teacher"}
    model = CrossEncoder.from_pretrained(
        tiny, max_length=32, max_query_length=8, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    config = ds.DistillConfig(
        depth=6,
        pairs_per_query=4,
        teacher_scale=8.0,
        train=TrainConfig(lr=3e-3, warmup_ratio=0.0, epochs=12, batch_size=8),
    )
    result = ds.distill(model, pq, corpus, scores, config, tmp_path / "ckpt")
    assert result.queries == 12 and result.pairs > 20
    assert result.loss_after < 0.6 * result.loss_before


def test_bad_settings_and_empty_input_are_refused(tiny, tmp_path):
    with pytest.raises(ValueError, match="depth"):
        ds.DistillConfig(depth=1)
    corpus = _corpus(3)
    pq = ds.pseudo_queries(corpus)
    ties = pl.DataFrame({"query_id": ["pq:d0"] * 2, "doc_id": ["d0", "d1"], "teacher": [0.5, 0.5]})
    model = CrossEncoder.from_pretrained(tiny, max_length=32, max_query_length=8)
    with pytest.raises(ValueError, match="no pair"):
        ds.distill(model, pq, corpus, ties, ds.DistillConfig(), tmp_path / "ckpt")


def test_warm_start_is_cached_loads_offline_and_records_itself(tiny, tmp_path, monkeypatch):
    corpus = _corpus()
    pq = ds.pseudo_queries(corpus)
    scores = ds.teacher_scores(_run(pq, corpus), pq, corpus, depth=6, scorer=Overlap())
    config = ds.DistillConfig(depth=6, pairs_per_query=2, train=TrainConfig(lr=1e-3, epochs=1, batch_size=8))
    folder = ds.warm_start(
        tmp_path / "start",
        backbone=tiny,
        queries=pq,
        corpus=corpus,
        scores=scores,
        config=config,
        max_length=32,
        max_query_length=8,
    )
    record = ds.start_record(folder)
    assert record["start"] == "margin-mse" and record["pairs"] == 24 and record["loss_after"] >= 0
    assert ds.start_record(tiny) is None
    loaded = CrossEncoder.from_pretrained(str(folder))  # a plain cross-encoder folder, read from disk only
    assert loaded.max_length == 32 and loaded.max_query_length == 8

    def no_training(*args, **kwargs):
        raise AssertionError("the cached warm start was trained again")

    monkeypatch.setattr(ds, "distill", no_training)
    assert (
        ds.warm_start(
            tmp_path / "start",
            backbone=tiny,
            queries=pq,
            corpus=corpus,
            scores=scores,
            config=config,
            max_length=32,
            max_query_length=8,
        )
        == folder
    )
    with pytest.raises(AssertionError, match="trained again"):  # other teacher scores: another start
        ds.warm_start(
            tmp_path / "start",
            backbone=tiny,
            queries=pq,
            corpus=corpus,
            scores=scores.with_columns(teacher=pl.col("teacher") * 2),
            config=config,
            max_length=32,
            max_query_length=8,
        )
