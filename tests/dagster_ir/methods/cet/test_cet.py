"""CET: weights and losses against direct computations, detached weights, the weight guard, training."""

from __future__ import annotations

import math
from dataclasses import replace

import polars as pl
import pytest
import torch

from dagster_ir.methods.cet.model import (
    CetConfig,
    CoupledRanker,
    LabConfig,
    QueryPairs,
    RankerConfig,
    bias_weights,
    cet_losses,
    make_loss_fn,
    pairwise_losses,
    profile,
    query_pairs,
    save_ranker,
    tau_run_name,
    tokenize_texts,
    train_ranker,
)
from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.cross_encoder import CrossEncoder
from dagster_ir.neural.training import TrainConfig
from dagster_ir.schemas import NEGATIVES


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


# Two queries: query 0 has two pairs, query 1 one. Scores of R and S for (positive, negative).
R_POS, R_NEG = [2.0, 0.5, 1.0], [1.0, 1.5, -1.0]
S_POS, S_NEG = [0.0, 1.0, 3.0], [1.0, -1.0, 3.5]
INDEX = [0, 0, 1]


def tensors(*rows: list[float], grad: bool = False) -> list[torch.Tensor]:
    return [torch.tensor(row, requires_grad=grad) for row in rows]


def test_weights_and_losses_match_a_direct_computation() -> None:
    r_pos, r_neg, s_pos, s_neg = tensors(R_POS, R_NEG, S_POS, S_NEG)
    index = torch.tensor(INDEX)
    for tau in (1.0, 0.5):
        w_r = [math.exp(sn / tau) / math.exp(sp / tau) for sp, sn in zip(S_POS, S_NEG)]
        w_s = [math.exp(rn / tau) / math.exp(rp / tau) for rp, rn in zip(R_POS, R_NEG)]
        loss_r = [-w * math.log(sigmoid(rp - rn)) for w, rp, rn in zip(w_r, R_POS, R_NEG)]
        loss_s = [-w * math.log(sigmoid(sp - sn)) for w, sp, sn in zip(w_s, S_POS, S_NEG)]
        losses = cet_losses(r_pos, r_neg, s_pos, s_neg, index, 2, tau=tau, max_weight=1e6)
        assert losses.w_r.tolist() == pytest.approx(w_r, rel=1e-6)
        assert losses.w_s.tolist() == pytest.approx(w_s, rel=1e-6)
        # summed over a query's pairs, averaged over the two queries
        assert losses.relevance.item() == pytest.approx((loss_r[0] + loss_r[1] + loss_r[2]) / 2, rel=1e-6)
        assert losses.selection.item() == pytest.approx((loss_s[0] + loss_s[1] + loss_s[2]) / 2, rel=1e-6)


def test_no_gradient_flows_through_the_weights() -> None:
    r_pos, r_neg, s_pos, s_neg = tensors(R_POS, R_NEG, S_POS, S_NEG, grad=True)
    index = torch.tensor(INDEX)
    losses = cet_losses(r_pos, r_neg, s_pos, s_neg, index, 2)
    assert not losses.w_r.requires_grad and not losses.w_s.requires_grad
    losses.relevance.backward()
    assert s_pos.grad is None and s_neg.grad is None  # L'(R) does not reach S
    # d/d r_pos of w * softplus(r_neg - r_pos) / 2 with w a constant: -w * sigmoid(r_neg - r_pos) / 2
    expected = [-w * sigmoid(rn - rp) / 2 for w, rp, rn in zip(losses.w_r.tolist(), R_POS, R_NEG)]
    assert r_pos.grad.tolist() == pytest.approx(expected, rel=1e-5)
    r_pos.grad = r_neg.grad = None
    cet_losses(r_pos, r_neg, s_pos, s_neg, index, 2).selection.backward()
    assert r_pos.grad is None and r_neg.grad is None  # L'(S) does not reach R


def test_with_s_constant_the_cet_loss_is_the_plain_pairwise_loss() -> None:
    r_pos, r_neg = tensors(R_POS, R_NEG)
    constant = torch.full((3,), 0.7)
    losses = cet_losses(r_pos, r_neg, constant, constant, torch.tensor(INDEX), 2)
    plain = (pairwise_losses(r_pos, r_neg)).sum() / 2
    assert losses.w_r.tolist() == [1.0, 1.0, 1.0]
    assert losses.relevance.item() == pytest.approx(plain.item(), rel=1e-6)


def test_the_weight_guard_keeps_weights_finite_and_bounded() -> None:
    pos = torch.tensor([0.0, 0.0, 0.0, 1e4])
    neg = torch.tensor([1e4, 3.0, -1e4, 0.0])
    weights = bias_weights(pos, neg, tau=1.0, max_weight=10.0)
    assert weights.tolist() == pytest.approx([10.0, 10.0, 0.0, 0.0])  # e^3 > 10: clamped too
    assert bias_weights(pos, neg, tau=10.0, max_weight=10.0)[1].item() == pytest.approx(math.exp(0.3))
    losses = cet_losses(pos, neg, neg, pos, torch.zeros(4, dtype=torch.long), 1, max_weight=10.0)
    assert math.isfinite(losses.relevance.item()) and math.isfinite(losses.selection.item())
    half = bias_weights(pos.half(), neg.half(), 1.0, 100.0)  # computed in float32 whatever comes in
    assert half.dtype == torch.float32 and half[0].item() == pytest.approx(100.0)


def test_without_a_clamp_the_weight_is_the_plain_exponential() -> None:
    pos, neg = torch.tensor([0.0, 0.0]), torch.tensor([10.0, -1.0])
    unclamped = bias_weights(pos, neg, 1.0, None)
    assert unclamped.tolist() == pytest.approx([math.exp(10.0), math.exp(-1.0)], rel=1e-6)
    assert bias_weights(pos, neg, 1.0, 100.0)[0].item() == pytest.approx(100.0)  # the demo's clamp binds
    assert profile("paper").cet.max_weight is None and profile("demo").cet.max_weight == 100.0
    assert CetConfig(max_weight=None).max_weight is None


def test_configs_refuse_bad_settings() -> None:
    with pytest.raises(ValueError, match="tau"):
        CetConfig(tau=0.0)
    with pytest.raises(ValueError, match="max_weight"):
        CetConfig(max_weight=float("inf"))
    with pytest.raises(ValueError, match="methods"):
        LabConfig(methods=("naive", "bm25"))
    with pytest.raises(ValueError, match="eta_quantiles"):
        LabConfig(eta_quantiles=(0.0,))
    with pytest.raises(ValueError, match="dev_judgments"):
        LabConfig(dev_judgments="test")
    with pytest.raises(ValueError, match="rocketqa needs naive"):
        LabConfig(methods=("rocketqa", "cet"))
    with pytest.raises(ValueError, match="profile 'fast'"):
        profile("fast")
    assert profile("paper").cet.train.lr == 3e-6 and profile("paper").n_per_positive == 1
    assert tau_run_name(0.5) == "cet-tau0.5" and tau_run_name(2.0) == "cet-tau2"


def test_query_pairs_groups_triples_by_query() -> None:
    negatives = pl.DataFrame(
        [("q2", "p", "n1", 3, 0), ("q1", "b", "n2", 1, 0), ("q1", "a", "n3", 2, 1), ("q1", "a", "n4", 5, 0)],
        schema=NEGATIVES, orient="row",
    )  # fmt: skip
    assert query_pairs(negatives) == [
        QueryPairs("q1", (("a", "n4"), ("a", "n3"), ("b", "n2"))),
        QueryPairs("q2", (("p", "n1"),)),
    ]


# --- with a tiny backbone ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))


QUERIES = pl.DataFrame({"query_id": ["q1", "q2"], "text": ["solar panel energy", "river fish"]})
CORPUS = pl.DataFrame({
    "doc_id": ["d1", "d2", "d3", "d4"],
    "title": ["Solar", "", "", "Fish"],
    "text": ["solar panels make energy", "a cat sat on a mat", "stock markets fell", "fish swim in rivers"],
})  # fmt: skip
EXAMPLES = [QueryPairs("q1", (("d1", "d2"), ("d1", "d3"))), QueryPairs("q2", (("d4", "d3"),))]


class Constant(torch.nn.Module):
    """A selection model that scores every pair 0.7."""

    def __init__(self) -> None:
        super().__init__()
        self.unused = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), 0.7)


def test_texts_are_tokenised_once_with_titles_and_missing_ones_named(tiny) -> None:
    model = CrossEncoder.from_pretrained(tiny, max_length=8, max_query_length=4)
    texts = tokenize_texts(model, QUERIES, CORPUS.lazy(), ["q1"], ["d1", "d4"])
    assert set(texts.queries) == {"q1"} and set(texts.docs) == {"d1", "d4"}
    assert model.tokenizer.decode(texts.docs["d4"]) == "fish fish swim in rivers"  # title first
    assert len(texts.docs["d1"]) <= 8
    with pytest.raises(ValueError, match="no text for 1 doc_ids, e.g. \\['d9'\\]"):
        tokenize_texts(model, QUERIES, CORPUS, ["q1"], ["d1", "d9"])


def test_the_coupled_loss_with_constant_s_equals_the_plain_loss_on_a_model(tiny) -> None:
    relevance = CrossEncoder.from_pretrained(tiny, max_length=32, max_query_length=8).eval()
    texts = tokenize_texts(relevance, QUERIES, CORPUS, ["q1", "q2"], ["d1", "d2", "d3", "d4"])
    loss_fn = make_loss_fn(texts, CetConfig())
    coupled_loss, logs = loss_fn(CoupledRanker(relevance, Constant()), EXAMPLES)
    plain_loss, _ = loss_fn(CoupledRanker(relevance), EXAMPLES)
    assert logs["w_r"] == pytest.approx(1.0) and logs["pairs"] == 3
    assert logs["loss_r"] == pytest.approx(plain_loss.item(), rel=1e-6)
    assert coupled_loss.item() == pytest.approx(plain_loss.item() + logs["loss_s"], rel=1e-6)


def test_training_updates_both_models_and_saves_loadable_folders(tiny, tmp_path) -> None:
    config = CetConfig(
        ranker=RankerConfig(backbone=tiny, max_length=32, max_query_length=8),
        train=TrainConfig(lr=1e-3, batch_size=2, epochs=2, seed=3),
    )
    model = CoupledRanker.build(config.ranker, coupled=True, seed=3)
    assert not torch.equal(model.relevance.model.classifier.weight, model.selection.model.classifier.weight)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    texts = tokenize_texts(model.relevance, QUERIES, CORPUS, ["q1", "q2"], ["d1", "d2", "d3", "d4"])
    result = train_ranker(model, EXAMPLES, texts, config, tmp_path / "state")
    assert result.steps == 2 and set(result.log_curves) >= {"loss_r", "loss_s", "w_r", "w_s", "clamped"}
    changed = {name.split(".")[0] for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed == {"relevance", "selection"}
    folders = save_ranker(model, tmp_path / "ranker")
    reloaded = CrossEncoder.from_pretrained(str(folders.relevance)).eval()
    batch = reloaded.collate([reloaded.encode_pair(texts.queries["q1"], texts.docs["d1"])])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch), model.relevance.eval()(**batch))
    assert (folders.selection / "model.safetensors").is_file()
    baseline = CoupledRanker.build(replace(config.ranker, layers=1), coupled=False, seed=3)
    assert baseline.relevance.model.config.num_hidden_layers == 1  # the layer cut (tiny has 2)
    assert baseline.selection is None and save_ranker(baseline, tmp_path / "plain").selection is None
    with pytest.raises(ValueError, match="no training examples"):
        train_ranker(baseline, [], texts, config, tmp_path / "none")
