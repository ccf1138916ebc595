"""Gated cross-attention: closed gates = the segments encoded apart, open gates = the plain cross-encoder,
gradients reach the gates, the folder keeps them, and the fast CPU scorer reads them."""

import json

import pytest
import torch

from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.cross_encoder import CrossEncoder, segment_cosine
from dagster_ir.neural.gated_attention import GATE_RATE, GatedSelfAttention, segment_position_ids
from dagster_ir.neural.rerank import score_encoded


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))


def _model(tiny, cross_attention, head="cosine", weights_seed=0):
    """A tiny cross-encoder without dropout whose weights are far from the tiny model's near-zero start
    (so that attending to the other segment visibly changes the states); the same weights per seed."""
    model = CrossEncoder.from_pretrained(
        tiny,
        max_length=40,
        max_query_length=6,
        head=head,
        seed=1,
        cross_attention=cross_attention,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    generator = torch.Generator().manual_seed(weights_seed)
    with torch.no_grad():
        for parameter in model.model.parameters():
            if parameter.ndim == 2:
                parameter.normal_(0.0, 0.3, generator=generator)
    return model


def _pairs(model, sizes=((3, 20), (5, 4), (2, 11)), seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [
        model.encode_pair(
            torch.randint(1000, 2000, (q,), generator=generator).tolist(),
            torch.randint(1000, 2000, (d,), generator=generator).tolist(),
        )
        for q, d in sizes
    ]


def _set_gates(model, values):
    with torch.no_grad():
        model.gates.copy_(torch.tensor(values) / GATE_RATE)


def test_closed_gates_score_the_segments_encoded_apart(tiny):
    """g = 0: each segment's states are the plain encoder's over that segment alone (its own positions
    and token type), so the cosine head scores cos(mean(query alone), mean(document alone))."""
    gated = _model(tiny, "gated").eval()
    assert gated.gate_values() == (0.0, 0.0)
    assert all(isinstance(layer.attention.self, GatedSelfAttention) for layer in gated.model.bert.encoder.layer)
    plain = _model(tiny, "full").model.bert.eval()  # the same weights, plain attention
    pairs = _pairs(gated)
    with torch.no_grad():
        scores = gated(**gated.collate(pairs))
        expected = []
        for pair in pairs:
            split = pair.token_type_ids.index(1)
            ids = torch.tensor([pair.input_ids])
            query = plain(input_ids=ids[:, :split], token_type_ids=torch.zeros(1, split, dtype=torch.long))
            rest = ids.shape[1] - split
            doc = plain(
                input_ids=ids[:, split:],
                token_type_ids=torch.ones(1, rest, dtype=torch.long),
                position_ids=torch.arange(split, split + rest)[None],
            )
            q, d = query.last_hidden_state.mean(1), doc.last_hidden_state.mean(1)
            expected.append(gated.head_scale * torch.nn.functional.cosine_similarity(q, d)[0])
    torch.testing.assert_close(scores, torch.stack(expected), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        joint = _model(tiny, "full").eval()(**gated.collate(pairs))
    assert (joint - scores).abs().max() > 1e-2  # the plain joint pass differs: the test can tell them apart


def test_closed_gates_keep_the_query_states_whatever_the_document(tiny):
    gated = _model(tiny, "gated").eval()
    a, b = _pairs(gated, sizes=((4, 9),), seed=0)[0], _pairs(gated, sizes=((4, 15),), seed=0)[0]
    b = type(b)(a.input_ids[:6] + b.input_ids[6:], b.token_type_ids)  # the same query, another document
    with torch.no_grad():
        _, states = gated.score(**gated.collate([a, b]), with_states=True)
    torch.testing.assert_close(states[0, :6], states[1, :6], atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # the encoder called directly, every layer's states (CEDR's call): gated too
        layers = gated.model.base_model(**gated.collate([a, b]), output_hidden_states=True).hidden_states
    assert torch.equal(layers[-1], states)
    _set_gates(gated, [0.5, 0.5])
    with torch.no_grad():
        _, states = gated.score(**gated.collate([a, b]), with_states=True)
    assert (states[0, :6] - states[1, :6]).abs().max() > 1e-3  # open gates: the query sees the document


@pytest.mark.parametrize("head", ["cosine", "cls"])
def test_open_gates_equal_full_attention_and_the_fast_scorer_equals_forward(tiny, head):
    gated, full = _model(tiny, "gated", head).eval(), _model(tiny, "full", head).eval()
    pairs = _pairs(gated)
    batch = gated.collate(pairs)
    _set_gates(gated, [1.0, 1.0])
    with torch.no_grad():
        torch.testing.assert_close(gated(**batch), full(**batch), atol=1e-5, rtol=1e-5)
    for values in ([1.0, 1.0], [0.0, 0.0], [0.3, 0.8]):
        _set_gates(gated, values)
        with torch.no_grad():
            expected = gated(**batch)
        fast = score_encoded(gated, pairs, gated.tokenizer.pad_token_id, fast=True)
        torch.testing.assert_close(torch.tensor(fast, dtype=torch.float32), expected, atol=1e-5, rtol=1e-5)
        slow = score_encoded(gated, pairs, gated.tokenizer.pad_token_id, fast=False)
        torch.testing.assert_close(torch.tensor(slow, dtype=torch.float32), expected, atol=1e-5, rtol=1e-5)


def test_gradients_reach_closed_gates_and_a_gate_stays_in_zero_one(tiny):
    gated = _model(tiny, "gated").train()
    pairs = _pairs(gated)
    scores = gated(**gated.collate(pairs))
    (scores * torch.tensor([1.0, -2.0, 0.5])).sum().backward()
    assert gated.gates.grad is not None and bool((gated.gates.grad.abs() > 0).all())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # training under bf16 autocast too
        gated.zero_grad()
        gated(**gated.collate(pairs)).float().sum().backward()
    assert torch.isfinite(gated.gates.grad).all() and bool((gated.gates.grad.abs() > 0).all())
    with torch.no_grad():
        gated.gates.copy_(torch.tensor([-1.0, 1.0]))  # far outside: the values are clamped
    assert gated.gate_values() == (0.0, 1.0)


def test_full_attention_is_the_plain_model_untouched(tiny):
    model = _model(tiny, "full").eval()
    assert model.cross_attention == "full" and model.gate_values() is None
    assert "gates" not in model.state_dict()
    assert not any(isinstance(m, GatedSelfAttention) for m in model.modules())
    batch = model.collate(_pairs(model))
    with torch.no_grad():
        states = model.model.bert(**batch).last_hidden_state
        expected = model.head_scale * segment_cosine(states, batch["attention_mask"], batch["token_type_ids"])
        assert torch.equal(model(**batch), expected)  # bit for bit the plain encoder's states
    assert CrossEncoder.from_pretrained(tiny).cross_attention == "full"  # the default for a [CLS] backbone


@pytest.mark.parametrize(("mode", "other"), [("gated", "full"), ("gated-segments", "gated")])
def test_save_and_load_keep_the_gates_and_the_scores(tiny, tmp_path, mode, other):
    from transformers import AutoModelForSequenceClassification

    gated = _model(tiny, mode).eval()
    _set_gates(gated, [0.25, 0.75])
    batch = gated.collate(_pairs(gated))
    with torch.no_grad():
        expected = gated(**batch)
    folder = gated.save(tmp_path / "ce")
    settings = json.loads((folder / "cross_encoder.json").read_text())
    assert settings["cross_attention"] == mode and settings["gate_values"] == pytest.approx([0.25, 0.75])
    reloaded = CrossEncoder.from_pretrained(str(folder)).eval()
    assert reloaded.cross_attention == mode and torch.equal(reloaded.gates, gated.gates)
    with torch.no_grad():
        assert torch.equal(reloaded(**batch), expected)
    fast = score_encoded(reloaded, _pairs(gated), reloaded.tokenizer.pad_token_id, fast=True)
    torch.testing.assert_close(torch.tensor(fast, dtype=torch.float32), expected, atol=1e-5, rtol=1e-5)
    plain = AutoModelForSequenceClassification.from_pretrained(folder)  # ignores the gates: plain attention
    assert not any(isinstance(m, GatedSelfAttention) for m in plain.modules())
    with pytest.raises(ValueError, match=f"cannot load as '{other}'"):
        CrossEncoder.from_pretrained(str(folder), cross_attention=other)
    with pytest.raises(ValueError, match="cross_attention must be one of"):
        CrossEncoder.from_pretrained(tiny, cross_attention="half")


def test_a_gated_layer_outside_its_encoder_forward_is_an_error(tiny):
    gated = _model(tiny, "gated")
    with pytest.raises(RuntimeError, match="outside a forward"):
        gated.model.bert.encoder.layer[0](torch.zeros(1, 5, 16))
    batch = gated.collate(_pairs(gated))
    with pytest.raises(ValueError, match="needs token_type_ids"):
        gated.model.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])


def test_segment_positions_restart_at_the_documents_first_token_on_a_padded_batch(tiny):
    model = _model(tiny, "gated-segments")
    pairs = _pairs(model, sizes=((3, 4), (1, 2), (2, 0)))  # 3 + 2 + 5 = 10, 1 + 2 + 3 = 6, 2 + 2 + 1 = 5 tokens
    batch = model.collate(pairs)
    expected = torch.tensor(
        [
            [0, 1, 2, 3, 4, 0, 1, 2, 3, 4],
            [0, 1, 2, 0, 1, 2, 3, 4, 5, 6],  # padding after the document counts on (masked)
            [0, 1, 2, 3, 0, 1, 2, 3, 4, 5],
        ]
    )
    assert torch.equal(model.position_ids(batch["token_type_ids"]), expected)
    assert torch.equal(segment_position_ids(torch.zeros(1, 4, dtype=torch.long)), torch.arange(4)[None])  # no document
    assert _model(tiny, "gated").position_ids(batch["token_type_ids"]) is None  # "gated": the joint input's positions
    seen = []
    embeddings = model.model.bert.embeddings
    hook = embeddings.register_forward_pre_hook(lambda m, a, k: seen.append(k.get("position_ids")), with_kwargs=True)
    try:
        with torch.no_grad():
            model(**batch)  # the cosine head (the base model)
            model.model(**batch)  # the classification model's own call of its encoder ("cls" head, PHP)
            model.model.base_model(**batch, output_hidden_states=True)  # CEDR's call
            model.model.base_model(**batch, position_ids=torch.zeros_like(expected))  # a caller's own: kept
    finally:
        hook.remove()
    assert [p.tolist() for p in seen] == [expected.tolist()] * 3 + [[[0] * 10] * 3]


@pytest.mark.parametrize("head", ["cosine", "cls"])
def test_gated_segments_closed_gates_score_the_segments_encoded_from_position_zero(tiny, head):
    """g = 0 with restarting positions: each segment is the plain encoder's over that segment alone from
    position 0 (the document under token type 1), and the fast CPU scorer equals the forward."""
    model = _model(tiny, "gated-segments", head).eval()
    assert model.gate_values() == (0.0, 0.0)
    pairs = _pairs(model)
    batch = model.collate(pairs)
    with torch.no_grad():
        scores = model(**batch)
    if head == "cosine":
        plain = _model(tiny, "full").model.bert.eval()  # the same weights, plain attention
        expected = []
        with torch.no_grad():
            for pair in pairs:
                split = pair.token_type_ids.index(1)
                ids = torch.tensor([pair.input_ids])
                query = plain(input_ids=ids[:, :split], token_type_ids=torch.zeros(1, split, dtype=torch.long))
                doc = plain(input_ids=ids[:, split:], token_type_ids=torch.ones_like(ids[:, split:]))  # from 0
                q, d = query.last_hidden_state.mean(1), doc.last_hidden_state.mean(1)
                expected.append(model.head_scale * torch.nn.functional.cosine_similarity(q, d)[0])
        torch.testing.assert_close(scores, torch.stack(expected), atol=1e-5, rtol=1e-5)
        with torch.no_grad():  # "gated" (the document after the query) scores otherwise: the test can tell
            joint = _model(tiny, "gated", head).eval()(**batch)
        assert (joint - scores).abs().max() > 1e-2
    # (closed gates, "cls" head: [CLS] sees the query segment alone, whose positions are 0.. either way)
    for values in ([0.0, 0.0], [0.3, 0.8], [1.0, 1.0]):
        _set_gates(model, values)
        with torch.no_grad():
            expected = model(**batch)
        fast = score_encoded(model, pairs, model.tokenizer.pad_token_id, fast=True)
        torch.testing.assert_close(torch.tensor(fast, dtype=torch.float32), expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # open gates: full attention, but at the restarted positions - not "full"
        full = _model(tiny, "full", head).eval()(**batch)
    assert (full - expected).abs().max() > 1e-2
