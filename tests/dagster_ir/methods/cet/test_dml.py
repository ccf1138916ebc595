"""DML's loss (dynamic Gaussian weights, document and instance granularity) on a hand-computed batch."""

from __future__ import annotations

import math

import pytest
import torch

from dagster_ir.methods.cet.dml import DmlConfig, dml_losses, gaussian_weight


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_dml_loss_on_a_hand_computed_batch() -> None:
    # Two queries: q0 has pairs (2, 0) and (1, 1); q1 has (0, 3) - a negative the model believes relevant.
    pos, neg = torch.tensor([2.0, 1.0, 0.0]), torch.tensor([0.0, 1.0, 3.0])
    index = torch.tensor([0, 0, 1])
    config = DmlConfig(sigma=0.5, instance_weight=0.5)
    losses = dml_losses(pos, neg, index, 2, config)

    def pair(si: float, sj: float) -> float:
        p_doc, p_ins = sigmoid(sj - si), sigmoid(sj)
        g_doc, g_ins = math.exp(-(p_doc**2) / 0.5), math.exp(-(p_ins**2) / 0.5)  # 2 sigma^2 = 0.5
        document = -g_doc * math.log(sigmoid(si - sj))
        instance = -math.log(sigmoid(si)) - g_ins * math.log(1 - sigmoid(sj))
        return document + 0.5 * instance

    expected = ((pair(2, 0) + pair(1, 1)) + pair(0, 3)) / 2
    assert losses.loss.item() == pytest.approx(expected, rel=1e-5)
    # the believed-relevant negative (p_doc = sigma(3) = 0.95) weighs far less than a rejected one
    assert losses.w_document[2].item() == pytest.approx(math.exp(-(sigmoid(3.0) ** 2) / 0.5), rel=1e-5)
    assert losses.w_document[2] < 0.2 < losses.w_document[0]


def test_dml_weights_carry_no_gradient_and_the_loss_moves_scores_apart() -> None:
    pos = torch.tensor([0.5], requires_grad=True)
    neg = torch.tensor([0.2], requires_grad=True)
    losses = dml_losses(pos, neg, torch.tensor([0]), 1)
    assert not losses.w_document.requires_grad and not losses.w_instance.requires_grad
    losses.loss.backward()
    assert pos.grad.item() < 0 < neg.grad.item()  # descent raises the positive, lowers the negative
    assert gaussian_weight(torch.tensor([0.0]), 0.5).item() == 1.0


def test_dml_config_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match="sigma"):
        DmlConfig(sigma=0.0)
    with pytest.raises(ValueError, match="instance_weight"):
        DmlConfig(instance_weight=-1.0)
