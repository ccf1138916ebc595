"""Cross-encoder fine-tuning: examples from the negatives table, training with dev selection."""

import polars as pl
import pytest

from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.finetune import FineTuneConfig, dev_evaluator, fine_tune, finetune_examples, load_model
from dagster_ir.neural.training import TrainConfig
from dagster_ir.schemas import NEGATIVES, QRELS, RUN


def _negatives(rows):
    return pl.DataFrame(rows, schema=list(NEGATIVES), orient="row").cast(NEGATIVES)


NEGATIVES_ROWS = [("q1", "d1", "d3", 3, 1), ("q1", "d1", "d2", 2, 0), ("q1", "d1", "d4", 4, 2),
                  ("q2", "d5", "d6", 1, 0)]


def test_examples_keep_the_first_negatives_by_sample_no_and_cycle_short_lists():
    examples, repeated = finetune_examples(_negatives(NEGATIVES_ROWS), n_negatives=2)
    assert [(e.query_id, e.pos_doc_id, e.neg_doc_ids) for e in examples] == [
        ("q1", "d1", ("d2", "d3")), ("q2", "d5", ("d6", "d6"))]
    assert repeated == 1
    every, repeated = finetune_examples(_negatives(NEGATIVES_ROWS), n_negatives=None)
    assert every[0].neg_doc_ids == ("d2", "d3", "d4") and every[1].neg_doc_ids == ("d6",) * 3 and repeated == 1


def test_fine_tuning_selects_the_epoch_on_dev(tmp_path):
    queries = pl.DataFrame({"query_id": ["q1", "q2", "q3"], "text": ["red apple", "blue sky", "green tree"]})
    corpus = pl.DataFrame({"doc_id": [f"d{i}" for i in range(1, 8)], "title": [""] * 7,
                           "text": ["red apple pie", "cars", "boats", "planes", "blue sky", "trains", "green tree"]})
    config = FineTuneConfig(n_negatives=2, max_length=32, max_query_length=8, dev_depth=3,
                            train=TrainConfig(lr=1e-3, warmup_ratio=0.0, epochs=2, batch_size=2, seed=1))
    run = pl.DataFrame([("q3", d, 1.0 / r, r, "bm25") for r, d in enumerate(["d2", "d7", "d3"], start=1)],
                       schema=list(RUN), orient="row").cast(RUN)
    qrels = pl.DataFrame([("q3", "d7", 1)], schema=list(QRELS), orient="row").cast(QRELS)
    evaluate = dev_evaluator(run, queries, corpus, qrels, ["q3"], config)
    model = load_model(str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16)), config)
    initial = evaluate(model)
    assert 0.0 < initial <= 1.0  # the relevant document is among the 3 candidates
    result, n_examples = fine_tune(model, queries, corpus, _negatives(NEGATIVES_ROWS), config, tmp_path / "ck",
                                   evaluate=evaluate)
    assert n_examples == 2 and result.steps == 2 and len(result.dev_scores) == 2
    assert result.dev_scores[result.best_epoch] == max(result.dev_scores)
    assert evaluate(model) == pytest.approx(max(result.dev_scores))  # the best epoch's weights are the model's


def test_missing_texts_are_errors(tmp_path):
    config = FineTuneConfig(n_negatives=1, max_length=32, max_query_length=None, train=TrainConfig(batch_size=2))
    model = load_model(str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16)), config)
    corpus = pl.DataFrame({"doc_id": ["d1"], "title": [""], "text": ["x"]})
    queries = pl.DataFrame({"query_id": ["q1"], "text": ["x"]})
    with pytest.raises(ValueError, match="not in the corpus"):
        fine_tune(model, queries, corpus, _negatives(NEGATIVES_ROWS), config, tmp_path / "ck")
