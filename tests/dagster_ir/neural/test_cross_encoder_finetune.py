"""Cross-encoder fine-tuning: examples from the negatives table, training with dev selection."""

import polars as pl
import pytest

from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.finetune import (
    FineTuneConfig,
    dev_evaluator,
    fine_tune,
    finetune_examples,
    load_model,
    training_pairs,
)
from dagster_ir.neural.training import TrainConfig
from dagster_ir.schemas import NEGATIVES, QRELS, RUN


def _negatives(rows):
    return pl.DataFrame(rows, schema=list(NEGATIVES), orient="row").cast(NEGATIVES)


NEGATIVES_ROWS = [
    ("q1", "d1", "d3", 3, 1),
    ("q1", "d1", "d2", 2, 0),
    ("q1", "d1", "d4", 4, 2),
    ("q2", "d5", "d6", 1, 0),
]


def test_examples_keep_the_first_negatives_by_sample_no_and_cycle_short_lists():
    examples, repeated = finetune_examples(_negatives(NEGATIVES_ROWS), n_negatives=2)
    assert [(e.query_id, e.pos_doc_id, e.neg_doc_ids) for e in examples] == [
        ("q1", "d1", ("d2", "d3")),
        ("q2", "d5", ("d6", "d6")),
    ]
    assert repeated == 1
    every, repeated = finetune_examples(_negatives(NEGATIVES_ROWS), n_negatives=None)
    assert every[0].neg_doc_ids == ("d2", "d3", "d4") and every[1].neg_doc_ids == ("d6",) * 3 and repeated == 1


def test_each_epoch_takes_the_next_negatives():
    second, _ = finetune_examples(_negatives(NEGATIVES_ROWS), n_negatives=2, epoch=1)
    assert [e.neg_doc_ids for e in second] == [("d4", "d2"), ("d6", "d6")]
    every, _ = finetune_examples(_negatives(NEGATIVES_ROWS), n_negatives=None, epoch=1)
    assert every[0].neg_doc_ids == ("d2", "d3", "d4")  # all of them, every epoch


def _run(rows):
    return pl.DataFrame([(q, d, 1.0 / r, r, "bm25") for q, d, r in rows], schema=list(RUN), orient="row").cast(RUN)


def test_training_pairs_come_from_the_configured_depth_and_the_training_queries_only():
    run = _run([("q1", f"a{r}", r) for r in range(1, 11)] + [("q2", f"b{r}", r) for r in range(1, 11)])
    qrels = pl.DataFrame(
        [("q1", "a2", 1), ("q1", "a8", 1), ("q1", "zz", 2), ("q2", "b1", 1)], schema=list(QRELS), orient="row"
    ).cast(QRELS)
    config = FineTuneConfig(n_negatives=2, dev_depth=5, train=TrainConfig(epochs=2, seed=3))
    pairs = training_pairs(run, qrels, ["q1"], config)
    # a8 (rank 8) and zz (not retrieved) are below the depth; q2 is not a training query
    assert set(pairs["query_id"]) == {"q1"} and set(pairs["pos_doc_id"]) == {"a2"}
    assert set(pairs["neg_doc_id"]) <= {"a1", "a3", "a4", "a5"} and pairs.height == 4  # 2 negatives x 2 epochs
    assert pairs["neg_rank"].max() <= 5
    deeper = training_pairs(
        run,
        qrels,
        ["q1"],
        FineTuneConfig(n_negatives=2, dev_depth=5, train_depth=10, train=TrainConfig(epochs=2, seed=3)),
    )
    assert set(deeper["pos_doc_id"]) == {"a2", "a8"} and deeper["neg_rank"].max() <= 10


def test_fine_tuning_selects_the_epoch_on_dev(tmp_path):
    queries = pl.DataFrame({"query_id": ["q1", "q2", "q3"], "text": ["red apple", "blue sky", "green tree"]})
    corpus = pl.DataFrame(
        {
            "doc_id": [f"d{i}" for i in range(1, 8)],
            "title": [""] * 7,
            "text": ["red apple pie", "cars", "boats", "planes", "blue sky", "trains", "green tree"],
        }
    )
    config = FineTuneConfig(
        n_negatives=2,
        max_length=32,
        max_query_length=8,
        dev_depth=3,
        train=TrainConfig(lr=1e-3, warmup_ratio=0.0, epochs=2, batch_size=2, seed=1),
    )
    run = pl.DataFrame(
        [("q3", d, 1.0 / r, r, "bm25") for r, d in enumerate(["d2", "d7", "d3"], start=1)],
        schema=list(RUN),
        orient="row",
    ).cast(RUN)
    qrels = pl.DataFrame([("q3", "d7", 1)], schema=list(QRELS), orient="row").cast(QRELS)
    evaluate = dev_evaluator(run, queries, corpus, qrels, ["q3"], config)
    model = load_model(str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16)), config)
    initial = evaluate(model)
    assert 0.0 < initial <= 1.0  # the relevant document is among the 3 candidates
    tuned = fine_tune(model, queries, corpus, _negatives(NEGATIVES_ROWS), config, tmp_path / "ck", evaluate=evaluate)
    result = tuned.train
    assert tuned.examples == 2 and result.steps == 2 and len(result.dev_scores) == 2
    assert tuned.start_score == pytest.approx(initial)
    assert tuned.dev_score == max(initial, *result.dev_scores)
    assert evaluate(model) == pytest.approx(tuned.dev_score)  # the chosen weights are the model's
    curve = tuned.curve()
    assert curve.validation == [tuned.start_score, *result.dev_scores] and len(curve.loss) == 3
    assert curve.loss[1] == pytest.approx(result.loss_curve[0]) and curve.loss[2] == pytest.approx(result.loss_curve[1])
    assert curve.validation[curve.chosen] == tuned.dev_score


def test_one_epoch_is_still_chosen_on_dev_and_the_start_can_win(tmp_path):
    queries = pl.DataFrame({"query_id": ["q1", "q2", "q3"], "text": ["red apple", "blue sky", "green tree"]})
    corpus = pl.DataFrame(
        {
            "doc_id": [f"d{i}" for i in range(1, 8)],
            "title": [""] * 7,
            "text": ["red apple pie", "cars", "boats", "planes", "blue sky", "trains", "green tree"],
        }
    )
    config = FineTuneConfig(
        n_negatives=2,
        max_length=32,
        max_query_length=8,
        dev_depth=3,
        train=TrainConfig(lr=1e-3, warmup_ratio=0.0, epochs=1, batch_size=2, seed=1),
    )
    run = _run([("q3", d, r) for r, d in enumerate(["d2", "d7", "d3"], start=1)])
    qrels = pl.DataFrame([("q3", "d7", 1)], schema=list(QRELS), orient="row").cast(QRELS)
    real = dev_evaluator(run, queries, corpus, qrels, ["q3"], config)
    calls = []

    def evaluate(model):  # the start scores best: the fine-tuned epoch must not be kept
        calls.append(real(model))
        return 1.0 if len(calls) == 1 else 0.5

    model = load_model(str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16)), config)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tuned = fine_tune(model, queries, corpus, _negatives(NEGATIVES_ROWS), config, tmp_path / "ck", evaluate=evaluate)
    assert len(calls) == 2 and tuned.train.dev_scores == [0.5]  # evaluated before training and after the one epoch
    assert tuned.kept_start and tuned.chosen == "start" and tuned.dev_score == 1.0
    assert all((model.state_dict()[k] == v).all() for k, v in before.items())


def test_missing_texts_are_errors(tmp_path):
    config = FineTuneConfig(n_negatives=1, max_length=32, max_query_length=None, train=TrainConfig(batch_size=2))
    model = load_model(str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16)), config)
    corpus = pl.DataFrame({"doc_id": ["d1"], "title": [""], "text": ["x"]})
    queries = pl.DataFrame({"query_id": ["q1"], "text": ["x"]})
    with pytest.raises(ValueError, match="not in the corpus"):
        fine_tune(model, queries, corpus, _negatives(NEGATIVES_ROWS), config, tmp_path / "ck")


def test_gated_cross_attention_is_a_setting_that_trains_the_gates(tmp_path):
    """cross_attention "gated" starts a backbone with closed gates that fine-tuning moves (the gate
    gradient is not zero at 0); a pre-trained folder keeps its own cross-attention."""
    queries = pl.DataFrame({"query_id": ["q1", "q2"], "text": ["red apple", "blue sky"]})
    corpus = pl.DataFrame(
        {
            "doc_id": [f"d{i}" for i in range(1, 7)],
            "title": [""] * 6,
            "text": ["red apple pie", "cars", "boats", "planes", "blue sky", "trains"],
        }
    )
    config = FineTuneConfig(
        n_negatives=2,
        max_length=32,
        max_query_length=8,
        dev_depth=3,
        cross_attention="gated",
        train=TrainConfig(lr=1e-3, warmup_ratio=0.0, epochs=1, batch_size=2, seed=1),
    )
    backbone = str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16))
    model = load_model(backbone, config)
    assert model.cross_attention == "gated" and model.gate_values() == (0.0, 0.0)
    assert load_model(backbone, FineTuneConfig()).cross_attention == "full"
    fine_tune(model, queries, corpus, _negatives(NEGATIVES_ROWS), config, tmp_path / "ck")
    assert any(g > 0 for g in model.gate_values())
    folder = str(model.save(tmp_path / "tuned"))
    again = load_model(folder, FineTuneConfig(cross_attention="full"))  # a folder keeps its own
    assert again.cross_attention == "gated" and again.gate_values() == model.gate_values()
    with pytest.raises(ValueError, match="cross_attention must be one of"):
        FineTuneConfig(cross_attention="open")
