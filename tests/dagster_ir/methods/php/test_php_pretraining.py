"""PHP model and stages: loss parts, MLM head sources, stage chaining, skipped stages."""

import json
import warnings
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
import torch
from safetensors.torch import load_file

from dagster_ir.methods.php import MLM_HEAD_FILE, PhpConfig, PhpInputs, PhpModel, php_loss, pretrain_stage
from dagster_ir.neural.backbone import load_tokenizer, make_tiny_backbone
from dagster_ir.neural.training import TrainConfig
from dagster_ir.schemas import LINKS, PHP_EXAMPLES, SEGMENTS

TEXTS = {
    "a": "Rivers run to the sea past castles.",
    "c": "A castle is a fortified home.",
    "s": "The sea is salty water.",
    "m": "Mountains are high.",
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))


def _segments():
    rows = [(k, k.upper(), 1, "", text, 5) for k, text in TEXTS.items()]
    return pl.DataFrame(rows, schema=list(SEGMENTS), orient="row").cast(SEGMENTS)


def _links():
    start = TEXTS["a"].index("castles")
    return pl.DataFrame([("a", 1, "castles", start, start + 7, "Castle", "c")], schema=list(LINKS), orient="row").cast(
        LINKS
    )


def _examples(stage="hp"):
    rows = [
        (stage, "a", 1, "c", ["s", "m"], False),
        (stage, "a", 1, "s", ["m", "c"], False),
        (stage, "c", 1, "s", ["a", "m"], False),
        (stage, "c", 1, "m", ["a", "s"], False),
    ]
    return pl.DataFrame(rows, schema=PHP_EXAMPLES, orient="row")


CONFIG = PhpConfig(
    n_negatives=2,
    max_length=32,
    max_query_length=12,
    train=TrainConfig(lr=1e-3, warmup_ratio=0.0, batch_size=2, max_steps=2, seed=5),
)


def test_loss_is_lce_plus_weighted_mlm_and_no_mlm_drops_the_head(tiny):
    model = PhpModel.from_pretrained(tiny, CONFIG)
    inputs = PhpInputs(_examples(), _segments(), _links(), model.scorer, CONFIG)
    loss_fn = php_loss(CONFIG, inputs, lambda epoch: 0)
    loss, logs = loss_fn(model, [(0, 0), (1, 0)])
    assert loss.item() == pytest.approx(logs["lce"] + logs["mlm"], rel=1e-5)
    assert logs["lce"] == pytest.approx(np.log(3), abs=0.05)  # an untrained scorer: ~uniform over 3 documents
    heavy = replace(CONFIG, mlm_weight=2.0)
    loss2, logs2 = php_loss(heavy, inputs, lambda epoch: 0)(model, [(0, 0), (1, 0)])
    assert loss2.item() == pytest.approx(logs2["lce"] + 2.0 * logs2["mlm"], rel=1e-5)
    plain = replace(CONFIG, mlm_weight=0.0)
    bare = PhpModel.from_pretrained(tiny, plain)
    assert bare.mlm_head is None
    loss3, logs3 = php_loss(plain, inputs, lambda epoch: 0)(bare, [(0, 0)])
    assert "mlm" not in logs3 and loss3.item() == pytest.approx(logs3["lce"])


def test_mlm_head_comes_from_a_bert_checkpoint_when_it_has_one(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=load_tokenizer().vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    torch.manual_seed(3)
    BertForMaskedLM(config).save_pretrained(tmp_path / "mlm")
    load_tokenizer().save_pretrained(tmp_path / "mlm")
    source = load_file(str(tmp_path / "mlm" / "model.safetensors"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a head was found: no warning
        model = PhpModel.from_pretrained(str(tmp_path / "mlm"), CONFIG)
    head = model.mlm_head
    assert "cls.predictions" in model.mlm_head_source
    assert torch.equal(head.dense.weight, source["cls.predictions.transform.dense.weight"])
    assert torch.equal(head.layer_norm.bias, source["cls.predictions.transform.LayerNorm.bias"])


def test_a_checkpoint_without_an_mlm_head_says_the_head_starts_at_random(tiny):
    with pytest.warns(UserWarning, match=r"no MLM head weights .*starts at random \(seed 5\)"):
        model = PhpModel.from_pretrained(tiny, CONFIG, seed=5)
    assert model.mlm_head_source == "new (seed 5)"


def test_stages_chain_and_save_folders_plain_transformers_loads(tiny, tmp_path):
    from transformers import AutoModel

    hp = pretrain_stage("hp", tiny, _examples("hp"), _segments(), _links(), CONFIG, tmp_path / "hp", tmp_path / "ck-hp")
    assert hp.train.steps == 2 and hp.examples == 4 and np.isfinite(hp.train.loss_curve).all()
    assert set(hp.train.log_curves) == {"lce", "mlm"}
    assert (hp.path / MLM_HEAD_FILE).is_file() and json.loads((hp.path / "php.json").read_text())["stage"] == "hp"
    AutoModel.from_pretrained(hp.path)  # the backbone part loads with plain transformers
    trained = PhpModel.from_pretrained(str(hp.path), CONFIG)
    start = PhpModel.from_pretrained(tiny, CONFIG)
    assert not torch.equal(trained.mlm_head.dense.weight, start.mlm_head.dense.weight)
    assert torch.equal(trained.mlm_head.dense.weight, load_file(str(hp.path / MLM_HEAD_FILE))["dense.weight"])

    # a stage without examples passes its init through unchanged
    mrds = pretrain_stage(
        "mrds",
        str(hp.path),
        _examples("hp").head(0),
        _segments(),
        _links(),
        CONFIG,
        tmp_path / "mrds",
        tmp_path / "ck-mrds",
    )
    assert mrds.train is None and json.loads((mrds.path / "php.json").read_text())["skipped"]
    passed = load_file(str(mrds.path / "model.safetensors"))
    for key, value in load_file(str(hp.path / "model.safetensors")).items():
        assert torch.equal(value, passed[key]), key
