"""Anchor-aware MLM masking: rates measured on many samples, anchors located through offsets."""

import numpy as np
import polars as pl
import pytest

from dagster_ir.methods.php import IGNORE, PhpConfig, PhpInputs, anchor_token_flags, mask_tokens
from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.cross_encoder import CrossEncoder
from dagster_ir.schemas import LINKS, PHP_EXAMPLES, SEGMENTS

MASK, VOCAB, TOKEN = 103, 30522, 7592


def test_selection_rates_and_80_10_10_split_on_many_samples():
    n = 400_000
    rng = np.random.default_rng(0)
    ids = np.full(n, TOKEN)
    anchor = rng.random(n) < 0.3
    special = (rng.random(n) < 0.05) & ~anchor
    masked, labels = mask_tokens(
        ids, special, anchor, np.random.default_rng(1), anchor_prob=0.5, other_prob=0.15, mask_id=MASK, vocab_size=VOCAB
    )
    selected = labels != IGNORE
    assert selected[anchor].mean() == pytest.approx(0.5, abs=0.005)
    assert selected[~anchor & ~special].mean() == pytest.approx(0.15, abs=0.003)
    assert not selected[special].any() and (masked[special] == TOKEN).all()
    assert (labels[selected] == TOKEN).all()
    outcome = masked[selected]
    assert (outcome == MASK).mean() == pytest.approx(0.8, abs=0.005)
    assert (outcome == TOKEN).mean() == pytest.approx(0.1, abs=0.005)  # kept (a random draw of TOKEN: ~3e-6)
    randomised = outcome[(outcome != MASK) & (outcome != TOKEN)]
    assert len(randomised) / len(outcome) == pytest.approx(0.1, abs=0.005)
    assert randomised.min() >= 0 and randomised.max() < VOCAB and len(np.unique(randomised)) > 1000
    assert (masked[~selected] == TOKEN).all()


def test_anchor_ratio_is_a_setting():
    ids, flags = np.full(100_000, TOKEN), np.ones(100_000, dtype=bool)
    _, labels = mask_tokens(
        ids, ~flags, flags, np.random.default_rng(2), anchor_prob=0.9, other_prob=0.15, mask_id=MASK, vocab_size=VOCAB
    )
    assert (labels != IGNORE).mean() == pytest.approx(0.9, abs=0.005)


def test_anchor_flags_mark_tokens_overlapping_the_char_spans():
    offsets = [(0, 3), (4, 9), (9, 12), (13, 18)]  # "the hyper link works" -> the | hyper | link | works
    assert anchor_token_flags(offsets, [(4, 12)]).tolist() == [False, True, True, False]
    assert anchor_token_flags(offsets, [(10, 11), (0, 1)]).tolist() == [True, False, True, False]
    assert anchor_token_flags(offsets, []).tolist() == [False] * 4


def test_inputs_put_the_anchor_of_each_linked_article_on_its_pair(tmp_path):
    model = CrossEncoder.from_pretrained(
        str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16)), max_length=48, max_query_length=16
    )
    text = "The river flows past the old castle into the sea."
    start = text.index("old castle")
    segments = pl.DataFrame(
        [
            ("a", "A", 2, "History", text, 10),
            ("c", "Castle", 1, "", "A castle is a fortified home.", 6),
            ("s", "Sea", 1, "", "The sea is salty water.", 5),
        ],
        schema=list(SEGMENTS),
        orient="row",
    ).cast(SEGMENTS)
    links = pl.DataFrame(
        [("a", 2, "old castle", start, start + 10, "Castle", "c")], schema=list(LINKS), orient="row"
    ).cast(LINKS)
    examples = pl.DataFrame([("hp", "a", 2, "c", ["s"], False)], schema=PHP_EXAMPLES, orient="row")
    inputs = PhpInputs(examples, segments, links, model, PhpConfig(anchor_mask_prob=1.0, mask_prob=0.0))
    pairs, labels = inputs.example(0, np.random.default_rng(0))
    tokenizer = model.tokenizer
    masked_positive = [tokenizer.convert_ids_to_tokens(int(t)) for t in labels[0][labels[0] != IGNORE]]
    assert masked_positive == ["old", "castle"]  # every anchor token of a_i, nothing else
    assert (labels[1] == IGNORE).all()  # the negative is not linked from s: no anchor on its pair
    assert tokenizer.decode(pairs[1].input_ids, skip_special_tokens=True).endswith("the sea is salty water.")
    assert pairs[0].input_ids[0] == tokenizer.cls_token_id and pairs[0].token_type_ids[-1] == 1


def test_the_no_mlm_ablation_sees_the_unmasked_inputs(tmp_path):
    from dagster_ir.methods.php import ablation_config

    model = CrossEncoder.from_pretrained(
        str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16)), max_length=48, max_query_length=16
    )
    text = "The river flows past the old castle into the sea."
    start = text.index("old castle")
    segments = pl.DataFrame(
        [
            ("a", "A", 1, "", text, 10),
            ("c", "Castle", 1, "", "A castle is a fortified home.", 6),
            ("s", "Sea", 1, "", "The sea is salty water.", 5),
        ],
        schema=list(SEGMENTS),
        orient="row",
    ).cast(SEGMENTS)
    links = pl.DataFrame(
        [("a", 1, "old castle", start, start + 10, "Castle", "c")], schema=list(LINKS), orient="row"
    ).cast(LINKS)
    examples = pl.DataFrame([("hp", "a", 1, "c", ["s"], False)], schema=PHP_EXAMPLES, orient="row")
    eager = PhpConfig(anchor_mask_prob=1.0, mask_prob=1.0)  # with MLM every token would be selected
    masked, _ = PhpInputs(examples, segments, links, model, eager).example(0, np.random.default_rng(0))
    plain_config = ablation_config(eager, "no-mlm")
    pairs, labels = PhpInputs(examples, segments, links, model, plain_config).example(0, np.random.default_rng(0))
    tok = model.tokenizer
    query = model.tokenize([text])[0]
    expected = [
        model.encode_pair(query, model.tokenize([doc])[0])
        for doc in ("A castle is a fortified home.", "The sea is salty water.")
    ]
    assert [p.input_ids for p in pairs] == [e.input_ids for e in expected]
    assert [p.token_type_ids for p in pairs] == [e.token_type_ids for e in expected]
    assert all((label == IGNORE).all() for label in labels)
    assert tok.mask_token_id in masked[0].input_ids  # the same config with MLM does corrupt them


def test_documents_are_the_article_lead_first_up_to_the_budget_as_reranking_reads_them(tmp_path):
    from dagster_ir.neural.rerank import CrossEncoderScorer

    backbone = str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16))
    query = "The river flows past the castle."
    castle = ["A castle is a fortified home.", "Its walls are thick and old.", "Many were built in stone."]
    segments = pl.DataFrame(
        [("a", "A", 1, "", query, 6), ("s", "Sea", 1, "", "The sea is salty water.", 5)]
        + [
            ("c", "Castle", n, "" if n == 1 else "History", text, len(text.split()))
            for n, text in reversed(list(enumerate(castle, start=1)))
        ],  # row order must not matter
        schema=list(SEGMENTS),
        orient="row",
    ).cast(SEGMENTS)
    links = pl.DataFrame([("a", 1, "castle", 25, 31, "Castle", "c")], schema=list(LINKS), orient="row").cast(LINKS)
    examples = pl.DataFrame([("hp", "a", 1, "c", ["s"], False)], schema=PHP_EXAMPLES, orient="row")
    plain = PhpConfig(mlm_weight=0.0)
    for max_length in (64, 20):  # room for the whole article; then only its lead and part of segment 2
        model = CrossEncoder.from_pretrained(backbone, max_length=max_length, max_query_length=8)
        pairs, _ = PhpInputs(examples, segments, links, model, plain).example(0, np.random.default_rng(0))
        reranked = CrossEncoderScorer(model).encode([query], [" ".join(castle)])[0]
        assert pairs[0].input_ids == reranked.input_ids and pairs[0].token_type_ids == reranked.token_type_ids
        doc = model.tokenizer.decode(pairs[0].input_ids[pairs[0].token_type_ids.index(1) :], skip_special_tokens=True)
        assert doc.startswith("a castle is a fortified home.")
        assert len(pairs[0].input_ids) == min(max_length, len(reranked.input_ids))
    assert "its walls" in doc and "stone" not in doc and len(pairs[0].input_ids) == 20
    full = CrossEncoder.from_pretrained(backbone, max_length=64, max_query_length=8)
    pairs, _ = PhpInputs(examples, segments, links, full, plain).example(0, np.random.default_rng(0))
    assert full.tokenizer.decode(pairs[0].input_ids, skip_special_tokens=True).endswith("many were built in stone.")
