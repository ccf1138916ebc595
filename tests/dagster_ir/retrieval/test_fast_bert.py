"""FastBert: the same numbers as transformers' own forward (padding, token types, [CLS]-only last layer), bf16 close."""

import pytest
import torch
from transformers import AutoModel, AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification

from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.retrieval.fast_bert import FastBert, bf16_supported, supports


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_backbone(tmp_path_factory.mktemp("fast_bert") / "tiny", hidden_size=32, layers=2, heads=4))


def _inputs(seed: int = 0, batch: int = 5, length: int = 17):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 5000, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    for row, n in enumerate([17, 3, 9, 17, 12][:batch]):
        mask[row, n:] = 0
        ids[row, n:] = 0
    types = torch.zeros(batch, length, dtype=torch.long)
    types[:, 2:] = 1
    return ids, mask, types


def _classifier(path: str) -> BertForSequenceClassification:
    torch.manual_seed(1)
    return AutoModelForSequenceClassification.from_pretrained(path, num_labels=1).eval()


def test_scores_equal_the_models_forward_with_padding_and_token_types(tiny):
    model = _classifier(tiny)
    ids, mask, types = _inputs()
    with torch.inference_mode():
        expected = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits.squeeze(-1)
    fast = FastBert(model)
    torch.testing.assert_close(fast.scores(ids, mask, types), expected, rtol=1e-5, atol=1e-5)
    # a second, smaller batch reuses the buffers and still matches; no padding: no mask at all
    with torch.inference_mode():
        expected = model(input_ids=ids[:1], attention_mask=mask[:1], token_type_ids=types[:1]).logits.squeeze(-1)
    torch.testing.assert_close(fast.scores(ids[:1], mask[:1], types[:1]), expected, rtol=1e-5, atol=1e-5)


def test_padding_does_not_change_a_rows_score(tiny):
    fast = FastBert(_classifier(tiny))
    ids, mask, types = _inputs()
    batched = fast.scores(ids, mask, types)
    for row in range(ids.shape[0]):
        n = int(mask[row].sum())
        alone = fast.scores(ids[row : row + 1, :n], mask[row : row + 1, :n], types[row : row + 1, :n])
        torch.testing.assert_close(alone, batched[row : row + 1], rtol=1e-5, atol=1e-5)


def test_hidden_states_equal_the_encoders_last_layer(tiny):
    encoder = AutoModel.from_pretrained(tiny).eval()
    ids, mask, types = _inputs(seed=3)
    with torch.inference_mode():
        expected = encoder(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    got = FastBert.for_model(encoder).hidden_states(ids, mask, types)
    keep = mask.bool()  # padded positions are not read by any pooling
    torch.testing.assert_close(got[keep], expected[keep], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="one-output"):
        FastBert(encoder).scores(ids, mask, types)


@pytest.mark.skipif(not bf16_supported(), reason="this CPU has no native bf16")
def test_bf16_is_close_to_fp32(tiny):
    model = _classifier(tiny)
    ids, mask, types = _inputs(seed=5)
    fp32 = FastBert(model).scores(ids, mask, types)
    bf16 = FastBert(model, bf16=True).scores(ids, mask, types)
    assert bf16.dtype == torch.float32
    assert not torch.equal(bf16, fp32)  # it did run in bfloat16
    torch.testing.assert_close(bf16, fp32, rtol=0, atol=2e-2)


def test_unsupported_models_fall_back(tiny):
    config = BertConfig(
        vocab_size=100,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        hidden_act="silu",
        num_labels=1,
    )
    assert not supports(BertForSequenceClassification(config))
    assert FastBert.for_model(BertForSequenceClassification(config)) is None
    assert not supports(torch.nn.Linear(2, 2))
    assert not supports(_classifier(tiny).double())
    with pytest.raises(ValueError, match="not a supported BERT"):
        FastBert(torch.nn.Linear(2, 2))
    assert supports(_classifier(tiny))
