"""CrossEncoder: LCE by hand, pair encoding (FirstP), padding, and the folder round trip."""

import math

import pytest
import torch

from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.cross_encoder import CrossEncoder, Pair, lce_loss, pad_pairs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))


def test_lce_matches_a_hand_computation():
    scores = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    row0 = -(2.0 - math.log(math.exp(2) + math.exp(1) + 1.0))  # 0.4076
    row1 = math.log(3.0)  # uniform over three documents
    assert lce_loss(scores).item() == pytest.approx((row0 + row1) / 2, abs=1e-6)
    assert lce_loss(torch.tensor([[50.0, 0.0]])).item() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="1 \\+ n_negatives"):
        lce_loss(torch.zeros(3, 1))


def test_pairs_are_cls_query_sep_doc_sep_with_firstp_truncation(tiny):
    model = CrossEncoder.from_pretrained(tiny, max_length=16, max_query_length=4)
    cls_id, sep_id = model.tokenizer.cls_token_id, model.tokenizer.sep_token_id
    pair = model.encode_pair([1, 2, 3, 4, 5, 6], list(range(100, 130)))
    assert len(pair) == 16
    assert pair.input_ids == [cls_id, 1, 2, 3, 4, sep_id, *range(100, 109), sep_id]  # the doc's first part
    assert pair.token_type_ids == [0] * 6 + [1] * 10
    short = model.encode_pair([7], [8])
    assert short == Pair([cls_id, 7, sep_id, 8, sep_id], [0, 0, 0, 1, 1])
    words = model.tokenize(["hyperlink prediction"])[0]
    assert cls_id not in words and model.tokenizer.decode(words) == "hyperlink prediction"


def test_padding_is_dynamic_to_the_longest_pair():
    batch = pad_pairs([Pair([5, 6, 7], [0, 0, 1]), Pair([5, 6], [0, 1])], pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [5, 6, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 1], [0, 1, 0]]


def test_invalid_lengths_are_refused(tiny):
    with pytest.raises(ValueError, match="no room"):
        CrossEncoder.from_pretrained(tiny, max_length=8, max_query_length=6)


def test_score_head_is_seeded(tiny):
    heads = [CrossEncoder.from_pretrained(tiny, seed=s).model.classifier.weight for s in (0, 0, 1)]
    assert torch.equal(heads[0], heads[1]) and not torch.equal(heads[0], heads[2])


def test_saved_folder_loads_with_plain_transformers(tiny, tmp_path):
    from transformers import AutoModel, AutoModelForSequenceClassification

    model = CrossEncoder.from_pretrained(tiny, max_length=24, max_query_length=6).eval()
    with torch.no_grad():
        model.model.classifier.bias.fill_(0.25)  # a change the round trip must carry
    query, *docs = model.tokenize(["anarchism", "a political philosophy", "a cat sat on a mat"])
    batch = model.collate([model.encode_pair(query, d) for d in docs])
    folder = model.save(tmp_path / "ce")
    assert (folder / "model.safetensors").is_file() and not list(folder.glob("*.bin"))

    plain = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    backbone = AutoModel.from_pretrained(folder)
    reloaded = CrossEncoder.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        expected = model(**batch)
        torch.testing.assert_close(plain(**batch).logits.squeeze(-1), expected)
        torch.testing.assert_close(reloaded(**batch), expected)
    assert (reloaded.max_length, reloaded.max_query_length) == (24, 6)
    embeddings = backbone.embeddings.word_embeddings.weight
    assert torch.equal(embeddings, model.model.bert.embeddings.word_embeddings.weight)


# --- the cosine head ------------------------------------------------------------------------------

QUERY = "what similarity laws must be obeyed when constructing aeroelastic models of heated high speed aircraft"
DOCS = [
    "similarity laws for aeroelastic models of heated aircraft at high speed",
    "an experimental study of the heat transfer to a flat plate in supersonic flow",
    "the structural design of wings for high speed aircraft under thermal stress",
    "boundary layer transition on a cone at mach number five",
    "a recipe for apple pie with cinnamon and butter",
    "the history of the football world cup",
]


def _ranks(values):
    order = sorted(range(len(values)), key=lambda i: -values[i])
    ranks = [0] * len(values)
    for rank, i in enumerate(order):
        ranks[i] = rank
    return ranks


def _spearman(a, b):
    ra, rb = _ranks(a), _ranks(b)
    n = len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def _bi_encoder(model, texts):
    """The backbone as the sentence-transformers bi-encoder: each text alone, mean pooling, cosine."""
    batch = model.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = model.model.base_model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)


def test_the_bundled_bi_encoder_starts_as_a_cosine_cross_encoder_that_ranks_like_it(tiny):
    from dagster_ir.neural.backbone import backbone_path
    from dagster_ir.neural.cross_encoder import default_head

    assert default_head(backbone_path("")) == "cosine" and default_head(tiny) == "cls"
    model = CrossEncoder.from_pretrained("", max_length=128).eval()
    assert model.head == "cosine"
    vectors = _bi_encoder(model, [QUERY, *DOCS])
    bi = (vectors[1:] @ vectors[0]).tolist()
    query, *docs = model.tokenize([QUERY, *DOCS])
    with torch.no_grad():
        cross = model(**model.collate([model.encode_pair(query, d) for d in docs])).tolist()
    assert _spearman(cross, bi) >= 0.8, (cross, bi)
    assert max(range(len(DOCS)), key=lambda i: cross[i]) == 0  # the on-topic document first, untrained


def test_cosine_head_round_trips_trains_only_the_encoder_and_scores_alike_on_the_fast_path(tiny, tmp_path):
    from dagster_ir.neural.rerank import score_encoded

    model = CrossEncoder.from_pretrained(tiny, max_length=24, max_query_length=6, head="cosine").eval()
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert "head_scale" in trainable and not any("classifier" in n or "pooler" in n for n in trainable)
    assert any(n.startswith("model.bert.encoder.") for n in trainable)
    with torch.no_grad():
        model.head_scale.fill_(7.5)  # a change the round trip must carry
    query, *docs = model.tokenize(["anarchism", "a political philosophy", "a cat sat on a mat"])
    pairs = [model.encode_pair(query, d) for d in docs]
    batch = model.collate(pairs)
    with torch.no_grad():
        expected = model(**batch)
    reloaded = CrossEncoder.from_pretrained(str(model.save(tmp_path / "ce"))).eval()
    assert reloaded.head == "cosine" and float(reloaded.head_scale.detach()) == 7.5
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch), expected)
    fast = score_encoded(reloaded, pairs, reloaded.tokenizer.pad_token_id, fast=True)
    torch.testing.assert_close(torch.tensor(fast, dtype=torch.float32), expected, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="cannot load as 'cls'"):
        CrossEncoder.from_pretrained(str(tmp_path / "ce"), head="cls")
    with pytest.raises(ValueError, match="needs token_type_ids"):
        model(batch["input_ids"], batch["attention_mask"])


def test_length_buckets_group_similar_lengths_and_cover_every_index_once():
    from dagster_ir.neural.cross_encoder import length_buckets

    lengths = [90, 12, 88, 10, 95, 11, 13, 91]
    groups = length_buckets(lengths, overhead=16)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert [sorted(lengths[i] for i in g) for g in groups] == [[10, 11, 12, 13], [88, 90, 91, 95]]
    padded = sum(len(g) * max(lengths[i] for i in g) for g in groups)
    assert padded == 4 * 13 + 4 * 95 < len(lengths) * max(lengths)
    assert length_buckets([50, 52, 51], overhead=16) == [[0, 2, 1]]  # nothing to save: one pass
    assert length_buckets(lengths, overhead=float("inf")) == [sorted(range(8), key=lambda i: lengths[i])]
    assert length_buckets([]) == []


@pytest.mark.parametrize("head", ["cls", "cosine"])
def test_bucketed_scores_and_gradients_equal_one_padded_pass(tiny, head):
    """Fine-tuning scores pairs in length groups: the loss and every gradient are the single pass's."""
    import torch

    from dagster_ir.neural.cross_encoder import bucketed_scores, length_buckets

    def loss_and_grads(bucketed: bool):
        model = CrossEncoder.from_pretrained(
            tiny,
            max_length=64,
            max_query_length=8,
            head=head,
            seed=3,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        generator = torch.Generator().manual_seed(0)
        pairs = [
            model.encode_pair(
                torch.randint(1000, 2000, (q,), generator=generator).tolist(),
                torch.randint(1000, 2000, (d,), generator=generator).tolist(),
            )
            for q, d in [(3, 50), (5, 4), (2, 45), (6, 6), (4, 52), (3, 2)]
        ]  # 3 examples of 1 + 1
        assert len(length_buckets([len(p) for p in pairs])) == 2  # the lengths do vary: two passes
        scores = bucketed_scores(model, model, pairs) if bucketed else model(**model.collate(pairs))
        loss = lce_loss(scores.view(3, 2))
        loss.backward()
        return scores.detach(), loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    scores, loss, grads = loss_and_grads(True)
    scores_one, loss_one, grads_one = loss_and_grads(False)
    assert torch.allclose(scores, scores_one, atol=1e-5)  # in the pairs' order, not the groups'
    assert abs(float(loss) - float(loss_one)) < 1e-6
    assert grads.keys() == grads_one.keys() and grads
    for name, grad in grads.items():
        assert torch.allclose(grad, grads_one[name], atol=1e-6, rtol=1e-4), name


def test_the_cls_head_computes_the_last_layer_for_cls_only_with_the_models_scores_and_gradients(tiny):
    """The "cls" score skips the last layer's work for every token but [CLS]: the model's own forward
    must give the same scores and the same gradients (training runs this path)."""
    from dagster_ir.neural.cross_encoder import cls_only_supported

    model = CrossEncoder.from_pretrained(
        tiny,
        max_length=32,
        max_query_length=6,
        head="cls",
        seed=1,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    ).train()
    assert cls_only_supported(model.model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # weights far from the tiny model's near-zero start, so that scores differ by pair
        for parameter in model.model.parameters():
            if parameter.ndim == 2:
                parameter.normal_(0.0, 0.3, generator=generator)
    pairs = [
        model.encode_pair(
            torch.randint(1000, 2000, (q,), generator=generator).tolist(),
            torch.randint(1000, 2000, (d,), generator=generator).tolist(),
        )
        for q, d in [(3, 20), (5, 4), (2, 11)]
    ]
    batch = model.collate(pairs)
    ours = model(**batch)
    (ours * torch.tensor([1.0, -2.0, 0.5])).sum().backward()
    ours_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    theirs = model.model(**batch).logits.squeeze(-1)
    (theirs * torch.tensor([1.0, -2.0, 0.5])).sum().backward()
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert theirs.std() > 0.1  # the scores differ by pair: a mix-up of rows would show
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            assert torch.allclose(ours_grads[name], parameter.grad, atol=1e-6, rtol=1e-4), name
    assert model.model.bert.encoder.layer[-1].output.dense.weight.grad.abs().sum() > 0  # the last layer trains
