"""Neural Model 1: the network, the score formula, the export against the model, training, files."""

import numpy as np
import polars as pl
import pytest
import torch

from dagster_ir.methods.model1 import Model1Scorer, ScoringConfig, index_collection, wordpiece_vocabulary
from dagster_ir.methods.model1.neural import (
    PROFILES,
    Model1LayerConfig,
    NeuralModel1,
    NeuralModel1Config,
    NeuralTexts,
    TokenizedTexts,
    TranslationMLP,
    build_model,
    epoch_triples,
    export_table,
    export_vocabulary,
    margin_loss,
    pairwise_loss,
    rerank,
    train_ranker,
)
from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.training import TrainConfig

CORPUS = pl.DataFrame(
    {
        "doc_id": [f"d{i}" for i in range(6)],
        "title": ["", "", "", "", "", "Engines"],
        "text": [
            "the automobile engine roars",
            "cheap automobile prices in town",
            "engine oil and oil prices",
            "a car for sale",
            "bananas are yellow fruit",
            "diesel engines burn fuel",
        ],
    }
)
QUERIES = pl.DataFrame({"query_id": ["q0", "q1", "q2"], "text": ["car engine", "cheap fruit", "oil prices"]})
NEGATIVES = pl.DataFrame(
    {
        "query_id": ["q0", "q0", "q1", "q1", "q2", "q2"],
        "pos_doc_id": ["d0", "d5", "d4", "d4", "d2", "d2"],
        "neg_doc_id": ["d4", "d4", "d2", "d0", "d4", "d3"],
        "neg_rank": [3, 4, 1, 2, 2, 3],
        "sample_no": [0, 0, 0, 1, 0, 1],
    }
).cast({"neg_rank": pl.Int32, "sample_no": pl.Int32})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))


@pytest.fixture(scope="module")
def setup(tiny):
    vocab = wordpiece_vocabulary(tiny)
    index, stats = index_collection(CORPUS, vocab)
    config = NeuralModel1Config(
        backbone=tiny,
        layer=Model1LayerConfig(proj_dim=8, hidden_dim=8, self_prob=0.3, lam=0.2),
        train=TrainConfig(lr=1e-2, epochs=2, batch_size=2, seed=0, weight_decay=0.0),
    )
    model, _ = build_model(stats, config)
    texts = NeuralTexts(
        TokenizedTexts.of_queries(QUERIES, vocab), TokenizedTexts.of_documents(CORPUS, CORPUS["doc_id"], vocab)
    )
    return vocab, index, stats, model, texts


def test_split_first_layer_equals_the_concatenation():
    torch.manual_seed(0)
    mlp = TranslationMLP(4, 5)
    x_q, x_d = torch.randn(2, 3, 4), torch.randn(2, 6, 4)
    got = mlp(x_q, x_d)
    for b in range(2):
        for i in range(3):
            for j in range(6):
                features = torch.cat([x_q[b, i], x_d[b, j], x_q[b, i] * x_d[b, j]])
                hidden = torch.relu(mlp.f2(torch.relu(mlp.f1(features))))
                assert got[b, i, j].item() == pytest.approx(torch.sigmoid(mlp.f3(hidden)).item(), abs=1e-6)


def test_score_follows_the_formula_and_ignores_padding(setup):
    _, _, stats, model, texts = setup
    q, q_mask = texts.queries.padded(["q0"], 16)
    d, d_mask = texts.docs.padded(["d1"], 64)
    with torch.no_grad():
        score = model(q, q_mask, d, d_mask).item()
        x_q = model.layer.project_query(model.embed_q(q))
        x_d = model.layer.project_doc(model.embed_d(d))
        t = model.layer.mlp(x_q, x_d)[0]
    same = (q[0].unsqueeze(1) == d[0].unsqueeze(0)).numpy()
    t = np.where(same, 0.3, 0.7 * t.numpy())
    probs = stats.collection_probs(1e-9)[q[0].numpy()]
    expected = np.mean(np.log(0.8 * t.mean(axis=1) + 0.2 * probs))
    assert score == pytest.approx(expected, rel=1e-5)
    padded_q = torch.cat([q, torch.zeros(1, 3, dtype=q.dtype)], 1)
    padded_d = torch.cat([d, torch.zeros(1, 5, dtype=d.dtype)], 1)
    with torch.no_grad():
        again = model(
            padded_q,
            torch.cat([q_mask, torch.zeros(1, 3, dtype=q_mask.dtype)], 1),
            padded_d,
            torch.cat([d_mask, torch.zeros(1, 5, dtype=d_mask.dtype)], 1),
        ).item()
    assert again == pytest.approx(score, rel=1e-6)


def test_exported_table_reproduces_the_neural_scores(setup):
    vocab, index, stats, model, texts = setup
    sources, targets = export_vocabulary(model.config, stats, QUERIES, vocab)
    table = export_table(model, vocab, sources, targets, threshold=0.0, block_pairs=50)
    scorer = Model1Scorer(table, index, stats, ScoringConfig(lam=0.2, unseen_prob=1e-9))
    pairs = pl.DataFrame({"query_id": ["q0"] * 6 + ["q2"] * 6, "doc_id": CORPUS["doc_id"].to_list() * 2})
    from dagster_ir.methods.model1.neural import score_pairs

    neural = score_pairs(model, texts, pairs, batch_size=4)
    exported = np.concatenate(
        [scorer.score_rows(vocab.encode([text]).row(0), np.arange(6)) for text in ["car engine", "oil prices"]]
    )
    np.testing.assert_allclose(exported, neural, rtol=1e-5)
    assert table.matrix[vocab.ids_of(["oil"])[0], vocab.ids_of(["oil"])[0]] == pytest.approx(0.3)


def test_thresholded_export_matches_the_model_with_dropped_pairs_zeroed(setup):
    vocab, index, stats, model, texts = setup
    sources, targets = export_vocabulary(model.config, stats, QUERIES, vocab)
    everything = export_table(model, vocab, sources, targets, threshold=0.0)
    threshold = float(np.median(everything.matrix.data))  # drops half of the pairs
    table = export_table(model, vocab, sources, targets, threshold=threshold)
    assert 0 < table.nnz < everything.nnz == sources.size * targets.size
    q, q_mask = texts.queries.padded(["q2"], 16)
    d, d_mask = texts.docs.padded(CORPUS["doc_id"].to_list(), 64)
    with torch.no_grad():
        x_q = model.layer.project_query(model.embed_q(q)).expand(6, -1, -1)
        x_d = model.layer.project_doc(model.embed_d(d))
        t = model.layer.translation(x_q, x_d, q.expand(6, -1), d)
        expected = model.layer.score(torch.where(t >= threshold, t, 0.0), q.expand(6, -1), q_mask.expand(6, -1), d_mask)
    scorer = Model1Scorer(table, index, stats, ScoringConfig(lam=0.2))
    np.testing.assert_allclose(
        scorer.score_rows(vocab.encode(["oil prices"]).row(0), np.arange(6)), expected.numpy(), rtol=1e-5
    )


def test_epoch_triples_draw_one_pair_per_query():
    rng = np.random.default_rng(0)
    draws = [epoch_triples(NEGATIVES, rng) for _ in range(30)]
    assert all([q for q, _, _ in d] == ["q0", "q1", "q2"] for d in draws)
    known = set(zip(NEGATIVES["query_id"], NEGATIVES["pos_doc_id"], NEGATIVES["neg_doc_id"]))
    assert all(t in known for d in draws for t in d)
    assert len({d[0] for d in draws}) == 2 and len({d[1] for d in draws}) == 2  # both rows get drawn
    assert epoch_triples(NEGATIVES, np.random.default_rng(5)) == epoch_triples(NEGATIVES, np.random.default_rng(5))


def test_margin_loss_by_hand():
    loss = margin_loss(torch.tensor([2.0, 0.0]), torch.tensor([0.5, 0.2]), margin=1.0)
    assert loss.item() == pytest.approx((0.0 + 1.2) / 2)


def test_training_lowers_the_loss_and_the_model_round_trips(setup, tmp_path):
    vocab, _, stats, _, texts = setup
    config = NeuralModel1Config(
        backbone=setup[3].config.backbone,
        layer=Model1LayerConfig(proj_dim=8, hidden_dim=8),
        train=TrainConfig(lr=3e-2, epochs=8, batch_size=3, seed=0, weight_decay=0.0, warmup_ratio=0.0),
    )
    model, _ = build_model(stats, config)
    qrels = NEGATIVES.select("query_id", doc_id="pos_doc_id", relevance=pl.lit(1, pl.Int32)).unique()
    dev_run = (
        NEGATIVES.select("query_id", doc_id="neg_doc_id")
        .vstack(NEGATIVES.select("query_id", doc_id="pos_doc_id"))
        .unique()
        .with_columns(score=pl.lit(0.0), rank=pl.lit(1, pl.Int32), run_name=pl.lit("bm25"))
    )
    result, start_score, kept_start = train_ranker(
        model, texts, NEGATIVES, tmp_path / "ckpt", dev_run=dev_run, qrels=qrels
    )
    assert result.steps == 8 and len(result.dev_scores) == 8
    assert np.mean(result.loss_curve[-3:]) < np.mean(result.loss_curve[:3])
    before = rerank(model, texts, dev_run, "nn", batch_size=4)
    reloaded = NeuralModel1.load(model.save(tmp_path / "model"))
    after = rerank(reloaded, texts, dev_run, "nn", batch_size=4)
    assert before.equals(after)
    assert (tmp_path / "model" / "model.safetensors").is_file()


@pytest.mark.parametrize("scripted", [(0.9, 0.5, 0.6), (0.1, 0.5, 0.6)])
def test_the_untrained_start_is_kept_when_no_epoch_beats_it_on_dev(scripted, setup, tmp_path, monkeypatch):
    """The start is scored on the dev candidates before training; kept only when above every epoch."""
    from dagster_ir.methods.model1 import neural

    _, _, stats, _, texts = setup
    config = NeuralModel1Config(
        backbone=setup[3].config.backbone,
        layer=Model1LayerConfig(proj_dim=8, hidden_dim=8),
        train=TrainConfig(lr=3e-2, epochs=2, batch_size=3, seed=0, weight_decay=0.0, warmup_ratio=0.0),
    )
    torch.manual_seed(0)
    model, _ = build_model(stats, config)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    calls = iter(scripted)
    monkeypatch.setattr(neural, "dev_ndcg", lambda *args: lambda module: next(calls))
    qrels = NEGATIVES.select("query_id", doc_id="pos_doc_id", relevance=pl.lit(1, pl.Int32)).unique()
    dev_run = NEGATIVES.select("query_id", doc_id="pos_doc_id").with_columns(
        score=pl.lit(0.0), rank=pl.lit(1, pl.Int32), run_name=pl.lit("bm25")
    )
    result, start_score, kept_start = train_ranker(
        model, texts, NEGATIVES, tmp_path / "ckpt", dev_run=dev_run, qrels=qrels
    )
    assert start_score == scripted[0] and result.dev_scores == list(scripted[1:])
    untouched = all(torch.equal(v, start[k]) for k, v in model.state_dict().items())
    assert kept_start == (scripted[0] > max(scripted[1:])) == untouched
    assert train_ranker(model, texts, NEGATIVES, tmp_path / "none")[1:] == (None, False)  # no dev: nothing competes


def test_an_untrained_model_ranks_exact_matches_first(setup):
    _, _, _, model, texts = setup
    pairs = pl.DataFrame({"query_id": ["q2"] * 6, "doc_id": CORPUS["doc_id"].to_list()})
    from dagster_ir.methods.model1.neural import score_pairs

    scores = score_pairs(model, texts, pairs, batch_size=6)
    assert int(np.argmax(scores)) == 2  # "engine oil and oil prices" for "oil prices"
    with torch.no_grad():
        t = model.layer.mlp(torch.randn(1, 4, 8), torch.randn(1, 5, 8))
    assert float(t.mean()) < 0.1  # initial_translation = 0.02 sets F3's bias


def test_a_cut_index_holds_the_words_the_neural_model_reads(setup):
    vocab, _, stats, _, texts = setup
    cut, cut_stats = index_collection(CORPUS, vocab, max_length=3)
    assert cut_stats.n_tokens == stats.n_tokens  # statistics of whole documents
    ids, mask = texts.docs.padded(CORPUS["doc_id"].to_list(), 3)
    for row, doc in enumerate(CORPUS["doc_id"]):
        read = ids[row][mask[row] > 0].numpy()
        counts = np.bincount(read, minlength=len(vocab))
        np.testing.assert_array_equal(cut.counts[cut.rows_of([doc])[0]].toarray().ravel(), counts)
        assert cut.lengths[cut.rows_of([doc])[0]] == read.size
    with pytest.raises(ValueError, match="max_length"):
        index_collection(CORPUS, vocab, max_length=0)


def test_eq_4_without_the_collection_term(setup):
    _, _, stats, model, texts = setup
    config = NeuralModel1Config(
        backbone=model.config.backbone, layer=Model1LayerConfig(proj_dim=8, hidden_dim=8, self_prob=0.3, lam=0.0)
    )
    eq4, _ = build_model(stats, config)
    inputs = eq4.encode_pairs(texts, ["q2", "q2"], ["d2", "d4"])
    with torch.no_grad():
        x_q = eq4.layer.project_query(eq4.embed_q(inputs["q_ids"]))
        x_d = eq4.layer.project_doc(eq4.embed_d(inputs["d_ids"]))
        t = eq4.layer.translation(x_q, x_d, inputs["q_ids"], inputs["d_ids"])
        d_mask = inputs["d_mask"].float()
        p = (t * d_mask[:, None, :]).sum(-1) / d_mask.sum(-1)[:, None]  # sum_i T(q|d_i) / |D|
        expected = (torch.log(p) * inputs["q_mask"]).sum(-1) / inputs["q_mask"].sum(-1)
        np.testing.assert_allclose(eq4(**inputs).numpy(), expected.numpy(), rtol=1e-5)
    assert PROFILES["paper"].layer.lam == 0.0 and PROFILES["paper"].train.epoch_decay == 0.9
    assert (PROFILES["paper"].negatives.depth, PROFILES["paper"].negatives.n_per_positive) == (500, 20)


def test_the_summed_loss_is_the_mean_times_the_batch(setup):
    _, _, _, model, texts = setup
    batch = [("q0", "d0", "d4"), ("q1", "d4", "d2"), ("q2", "d2", "d3")]
    mean, _ = pairwise_loss(texts, 1.0)(model, batch)
    summed, _ = pairwise_loss(texts, 1.0, scale=3.0)(model, batch)
    assert summed.item() == pytest.approx(3 * mean.item())
    with pytest.raises(ValueError, match="loss_reduction"):
        NeuralModel1Config(loss_reduction="max")
