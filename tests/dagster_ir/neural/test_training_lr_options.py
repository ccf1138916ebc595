"""The shared loop's learning-rate options: a decay after every epoch, and per-parameter-group rates."""

import numpy as np
import pytest
import torch

from dagster_ir.neural.training import (
    TrainConfig,
    epoch_decayed,
    latest_checkpoint,
    make_optimizer,
    shuffled_batches,
    train,
)


class Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x))).squeeze(-1)


def _batches(batch_size: int = 8, n: int = 16):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, 4))
    examples = [(row.tolist(), float(row.sum())) for row in x]
    return lambda epoch, r: shuffled_batches(examples, batch_size, r)


def _mse(model, batch):
    x = torch.tensor([e[0] for e in batch], dtype=torch.float32)
    y = torch.tensor([e[1] for e in batch], dtype=torch.float32)
    return ((model(x) - y) ** 2).mean(), {}


def _config(**overrides) -> TrainConfig:
    return TrainConfig(
        **{
            "lr": 0.1,
            "warmup_ratio": 0.0,
            "schedule": "constant",
            "weight_decay": 0.0,
            "epochs": 3,
            "batch_size": 8,
            **overrides,
        }
    )


def test_epoch_decay_multiplies_the_rate_after_each_epoch(tmp_path):
    lrs = []
    train(
        Head(),
        _batches(),
        _mse,
        _config(epoch_decay=0.9),
        tmp_path / "c",
        on_log=lambda s, logs: lrs.append(logs["lr"]),
    )
    # 2 steps an epoch; the log holds the rate after each step (the next step's): 0.1 for epoch 0's
    # steps, 0.09 for epoch 1's, 0.081 for epoch 2's
    assert lrs == pytest.approx([0.1, 0.09, 0.09, 0.081, 0.081, 0.0729])
    factor = epoch_decayed(lambda step: 1.0, 4, 0.5)
    assert [factor(s) for s in (0, 3, 4, 8)] == [1.0, 1.0, 0.5, 0.25]


def test_lr_groups_give_named_parameters_their_own_rate():
    optimizer = make_optimizer(Head(), _config(lr=1e-3, lr_groups=(("head.", 0.5),), weight_decay=0.01))
    rates = sorted((g["lr"], g["weight_decay"], sum(p.numel() for p in g["params"])) for g in optimizer.param_groups)
    assert rates == [(1e-3, 0.0, 4), (1e-3, 0.01, 16), (0.5, 0.0, 1), (0.5, 0.01, 4)]


def test_only_the_head_moves_when_the_body_rate_is_tiny(tmp_path):
    model = Head()
    body, head = model.body.weight.detach().clone(), model.head.weight.detach().clone()
    train(model, _batches(), _mse, _config(lr=1e-9, lr_groups=(("head.", 0.05),), epochs=1), tmp_path / "c")
    assert torch.allclose(model.body.weight, body, atol=1e-6)
    assert not torch.allclose(model.head.weight, head)


def test_lr_groups_survive_the_checkpoint_round_trip(tmp_path):
    config = _config(lr_groups=(("head.", 0.05),), epochs=1)
    train(Head(), _batches(), _mse, config, tmp_path / "c")
    assert latest_checkpoint(tmp_path / "c") is not None
    again = train(Head(), _batches(), _mse, config, tmp_path / "c")  # finished: read back, not refused
    assert again.steps == 2
    assert TrainConfig(lr_groups=[["head.", 0.05]]).lr_groups == (("head.", 0.05),)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="epoch_decay"):
        TrainConfig(epoch_decay=0.0)
    with pytest.raises(ValueError, match="lr_groups"):
        TrainConfig(lr_groups=(("", 0.1),))
