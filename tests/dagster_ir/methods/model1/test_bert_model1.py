"""BERT-Model1: chunked inputs by hand, batch-independent scores, training and the saved folder."""

import numpy as np
import polars as pl
import pytest
import torch

from dagster_ir.methods.model1 import index_collection, wordpiece_vocabulary
from dagster_ir.methods.model1.bert import BertModel1, BertModel1Config, BertVanilla, chunk_inputs
from dagster_ir.methods.model1.neural import Model1LayerConfig, NeuralTexts, TokenizedTexts, rerank, train_ranker
from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.training import TrainConfig

CORPUS = pl.DataFrame(
    {
        "doc_id": ["d0", "d1", "d2", "d3"],
        "title": ["", "", "", ""],
        "text": [
            "the automobile engine roars loudly on the long road " * 3,
            "cheap bananas",
            "engine oil prices rise again",
            "yellow fruit and ripe bananas are cheap today",
        ],
    }
)
QUERIES = pl.DataFrame({"query_id": ["q0", "q1"], "text": ["car engine", "cheap fruit"]})
NEGATIVES = pl.DataFrame(
    {
        "query_id": ["q0", "q1"],
        "pos_doc_id": ["d0", "d3"],
        "neg_doc_id": ["d1", "d2"],
        "neg_rank": [2, 2],
        "sample_no": [0, 0],
    }
).cast({"neg_rank": pl.Int32, "sample_no": pl.Int32})


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tiny = str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))
    vocab = wordpiece_vocabulary(tiny)
    _, stats = index_collection(CORPUS, vocab)
    texts = NeuralTexts(
        TokenizedTexts.of_queries(QUERIES, vocab), TokenizedTexts.of_documents(CORPUS, CORPUS["doc_id"], vocab)
    )
    config = BertModel1Config(
        backbone=tiny,
        layer=Model1LayerConfig(proj_dim=8, hidden_dim=8, self_prob=None),
        max_query_length=8,
        chunk_length=16,
        max_chunks=3,
        train=TrainConfig(lr=1e-3, epochs=3, batch_size=2, seed=0, warmup_ratio=0.0),
    )
    return stats, texts, config


def test_chunk_inputs_by_hand():
    q, d = np.array([7, 8]), np.arange(1, 8)
    inputs = chunk_inputs([q], [d], chunk_length=8, max_chunks=3, cls_id=101, sep_id=102, pad_id=0)
    # room = 8 - 2 - 3 = 3: chunks [1 2 3] [4 5 6] [7]
    assert inputs["input_ids"].tolist() == [
        [101, 7, 8, 102, 1, 2, 3, 102],
        [101, 7, 8, 102, 4, 5, 6, 102],
        [101, 7, 8, 102, 7, 102, 0, 0],
    ]
    assert inputs["token_type_ids"][2].tolist() == [0, 0, 0, 0, 1, 1, 0, 0]
    assert inputs["attention_mask"][2].tolist() == [1, 1, 1, 1, 1, 1, 0, 0]
    assert inputs["sequence_pair"].tolist() == [0, 0, 0]
    gathered = inputs["input_ids"][inputs["d_sequence"], inputs["d_position"]]
    assert gathered.tolist() == inputs["d_ids"].tolist() == [[1, 2, 3, 4, 5, 6, 7]]
    two = chunk_inputs([q], [d], chunk_length=8, max_chunks=2, cls_id=101, sep_id=102, pad_id=0)
    assert two["d_ids"].tolist() == [[1, 2, 3, 4, 5, 6]] and two["input_ids"].shape[0] == 2


def test_gather_indices_hold_for_a_mixed_batch():
    queries = [np.array([5]), np.array([6, 7, 8])]
    docs = [np.arange(20, 31), np.array([40, 41])]
    inputs = chunk_inputs(queries, docs, chunk_length=10, max_chunks=3, cls_id=1, sep_id=2, pad_id=0)
    assert inputs["sequence_pair"].tolist() == [0, 0, 1]  # room 6 -> 2 chunks; room 4 -> 1 chunk
    mask = inputs["d_mask"] > 0
    gathered = inputs["input_ids"][inputs["d_sequence"], inputs["d_position"]]
    assert (gathered[mask] == inputs["d_ids"][mask]).all()
    assert inputs["q_ids"].tolist() == [[5, 0, 0], [6, 7, 8]]
    q_at = inputs["input_ids"][:, inputs["q_positions"]]
    assert q_at[2].tolist() == [6, 7, 8] and q_at[0, 0] == 5


def test_scores_do_not_depend_on_the_batch(setup):
    stats, texts, config = setup
    model = BertModel1.from_backbone(stats, config).eval()
    with torch.no_grad():
        together = model(**model.encode_pairs(texts, ["q0", "q1", "q0"], ["d0", "d1", "d2"]))
        pairs = [("q0", "d0"), ("q1", "d1"), ("q0", "d2")]
        alone = [model(**model.encode_pairs(texts, [q], [d])).item() for q, d in pairs]
    np.testing.assert_allclose(together.numpy(), alone, rtol=1e-4, atol=1e-5)


def test_training_and_the_saved_folder(setup, tmp_path):
    stats, texts, config = setup
    model = BertModel1.from_backbone(stats, config)
    result, _, _ = train_ranker(model, texts, NEGATIVES, tmp_path / "ckpt")
    assert result.steps == 3 and all(np.isfinite(result.loss_curve))
    run = pl.DataFrame(
        {
            "query_id": ["q0", "q0", "q1"],
            "doc_id": ["d0", "d1", "d3"],
            "score": [0.0] * 3,
            "rank": [1, 2, 1],
            "run_name": ["bm25"] * 3,
        }
    ).cast({"rank": pl.Int32})
    before = rerank(model, texts, run, "bert-model1", batch_size=2)
    folder = model.save(tmp_path / "bm1")
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    after = rerank(BertModel1.load(folder), texts, run, "bert-model1", batch_size=2)
    np.testing.assert_allclose(after["score"].to_numpy(), before["score"].to_numpy(), rtol=1e-5)


def test_documents_are_cut_to_what_the_chunks_hold_after_the_longest_query(setup):
    stats, texts, config = setup
    assert BertModel1Config(chunk_length=512, max_chunks=3, max_query_length=32).doc_tokens == 1431  # the paper's
    model = BertModel1.from_backbone(stats, config)
    inputs = model.encode_pairs(texts, ["q0"], ["d0"])  # a 2-token query would leave room for 3 x 11
    assert config.doc_tokens == 3 * (16 - 8 - 3) and int(inputs["d_mask"].sum()) == config.doc_tokens
    assert texts.docs.tokens.lengths[texts.docs.rows(["d0"])][0] > config.doc_tokens


def test_the_head_gets_its_own_learning_rate(setup):
    from dagster_ir.neural.training import make_optimizer

    stats, _, config = setup
    model = BertModel1.from_backbone(stats, config)
    train = TrainConfig(lr=2e-5, lr_groups=(("layer.", 2e-3),))
    rates = {}
    for group in make_optimizer(model, train).param_groups:
        rates[group["lr"]] = rates.get(group["lr"], 0) + sum(p.numel() for p in group["params"])
    assert rates[2e-3] == sum(p.numel() for p in model.layer.parameters())
    assert rates[2e-5] == sum(p.numel() for p in model.encoder.parameters())
    assert BertModel1Config().train.lr_groups == (("layer.", 2e-3),)  # the paper profile's default


def test_bert_vanilla_scores_the_mean_cls_of_its_chunks(setup, tmp_path):
    stats, texts, config = setup
    model = BertVanilla.from_backbone(stats, config).eval()
    inputs = model.encode_pairs(texts, ["q0", "q1"], ["d0", "d1"])
    with torch.no_grad():
        scores = model(**inputs)
        cls = model.encoder(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            token_type_ids=inputs["token_type_ids"] if model.uses_token_types else None,
        ).last_hidden_state[:, 0]
        pair = inputs["sequence_pair"]
        expected = [model.layer(cls[pair == b].mean(0)).item() for b in range(2)]
    assert int((pair == 0).sum()) == 2 and int((pair == 1).sum()) == 1  # d0: 15 tokens in chunks of 11; d1 one
    np.testing.assert_allclose(scores.numpy(), expected, rtol=1e-5, atol=1e-6)
    result, _, _ = train_ranker(model, texts, NEGATIVES, tmp_path / "ckpt")
    assert result.steps == 3 and all(np.isfinite(result.loss_curve))
    folder = model.save(tmp_path / "vanilla")
    again = BertVanilla.load(folder).eval()
    with torch.no_grad():
        np.testing.assert_allclose(again(**inputs).numpy(), model.eval()(**inputs).numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match="BERT-vanilla model, not BERT-model1"):
        BertModel1.load(folder)
