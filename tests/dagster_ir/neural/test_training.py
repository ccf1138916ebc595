"""The shared training loop on a toy regression model: schedule, sharding, resume, errors, selection."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from dagster_ir.neural.training import (
    CheckpointError,
    TrainConfig,
    checkpoint_folders,
    constant_schedule,
    latest_checkpoint,
    linear_schedule,
    micro_batches,
    shuffled_batches,
    train,
)
from dagster_ir.storage.locks import is_locked


class Toy(torch.nn.Module):
    """A two-layer net with dropout, so that resuming must restore the torch RNG to match."""

    def __init__(self, seed: int = 0, dropout: float = 0.3) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(dropout), torch.nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


def _data(n: int = 40) -> list[tuple[list[float], float]]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(n, 4))
    y = x @ np.array([1.0, -2.0, 0.5, 3.0])
    return [(row.tolist(), float(target)) for row, target in zip(x, y, strict=True)]


def _make_batches(batch_size: int, n: int = 40):
    examples = _data(n)
    return lambda epoch, rng: shuffled_batches(examples, batch_size, rng)


def _mse(model, batch):
    x = torch.tensor([e[0] for e in batch], dtype=torch.float32)
    y = torch.tensor([e[1] for e in batch], dtype=torch.float32)
    error = model(x) - y
    return (error**2).mean(), {"abs_error": float(error.detach().abs().mean())}


def _config(**overrides) -> TrainConfig:
    return TrainConfig(
        **{
            "lr": 0.05,
            "warmup_ratio": 0.1,
            "weight_decay": 0.0,
            "epochs": 3,
            "batch_size": 8,
            "checkpoint_every": 2,
            **overrides,
        }
    )


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_linear_schedule_warms_up_then_decays_to_zero():
    factor = linear_schedule(total_steps=10, warmup_ratio=0.2)  # 2 warm-up steps
    assert [factor(s) for s in range(4)] == [0.5, 1.0, 1.0, 7 / 8]
    assert factor(9) == pytest.approx(1 / 8)
    assert factor(10) == 0.0
    assert linear_schedule(10, 0.0)(0) == 1.0


def test_constant_schedule_warms_up_then_stays():
    factor = constant_schedule(total_steps=10, warmup_ratio=0.2)
    assert [factor(s) for s in (0, 1, 2, 9, 10)] == [0.5, 1.0, 1.0, 1.0, 1.0]
    assert constant_schedule(10, 0.0)(0) == 1.0


def test_constant_schedule_keeps_the_learning_rate(tmp_path):
    lrs = []
    train(
        Toy(),
        _make_batches(8),
        _mse,
        _config(warmup_ratio=0.0, schedule="constant", epochs=2),
        tmp_path / "c",
        on_log=lambda s, logs: lrs.append(logs["lr"]),
    )
    assert lrs == [0.05] * 10
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="cosine")


def test_a_checkpoint_written_before_a_new_field_resumes_with_its_default(tmp_path):
    """state.json of an older run lacks `schedule`: it counts as the default ("linear"), not as a change."""
    train(Toy(), _make_batches(8), _mse, _config(epochs=1), tmp_path)
    state_file = latest_checkpoint(tmp_path) / "state.json"
    state = json.loads(state_file.read_text())
    del state["config"]["schedule"]
    state_file.write_text(json.dumps(state))
    result = train(Toy(), _make_batches(8), _mse, _config(epochs=1), tmp_path)
    assert result.resumed_from == 5 and result.steps == 5
    with pytest.raises(CheckpointError, match="schedule"):
        train(Toy(), _make_batches(8), _mse, _config(epochs=1, schedule="constant"), tmp_path)


def test_micro_batches_shard_like_distributed_sampler_then_split():
    batch = list("abcde")
    assert micro_batches(batch, 0, 2, 1) == [["a", "c", "e"]]
    assert micro_batches(batch, 1, 2, 1) == [["b", "d"]]
    assert micro_batches(batch, 0, 2, 2) == [["a", "c"], ["e"]]
    assert micro_batches(batch, 0, 1, 10) == [[c] for c in batch]  # never an empty micro-batch
    tensors = {"x": torch.arange(5)}
    assert micro_batches(tensors, 1, 2, 1)[0]["x"].tolist() == [1, 3]
    with pytest.raises(ValueError, match="nothing"):
        micro_batches(["a"], 1, 2, 1)


def test_training_reduces_the_loss_and_reports_progress(tmp_path):
    model = Toy()
    logged = []
    result = train(
        model, _make_batches(8), _mse, _config(epochs=4), tmp_path, on_log=lambda step, _: logged.append(step)
    )
    assert result.steps == 20 and logged == list(range(1, 21))
    assert len(result.loss_curve) == 20 and len(result.log_curves["abs_error"]) == 20
    assert np.mean(result.loss_curve[-5:]) < 0.5 * np.mean(result.loss_curve[:5])
    assert result.examples_per_s > 0 and result.best_epoch == 3
    assert [p.name for p in checkpoint_folders(tmp_path)] == ["step-00000018", "step-00000020"]  # keep 2


def test_grad_accumulation_changes_memory_not_maths(tmp_path):
    config = _config(epochs=1, max_grad_norm=None)
    whole, split = Toy(dropout=0.0), Toy(dropout=0.0)  # no dropout: same function on any split
    for model, accumulation in [(whole, 1), (split, 3)]:
        train(
            model,
            _make_batches(8),
            _mse,
            TrainConfig(**{**config.__dict__, "grad_accumulation": accumulation}),
            tmp_path / str(accumulation),
        )
    for key, value in _weights(whole).items():
        torch.testing.assert_close(value, _weights(split)[key], rtol=1e-5, atol=1e-6)


def test_crash_mid_epoch_resumes_to_the_same_weights(tmp_path):
    reference = Toy()
    expected = train(reference, _make_batches(8), _mse, _config(), tmp_path / "reference")

    def crash(step, logs):
        if step == 7:  # epoch 1, after the checkpoint of step 6
            raise KeyboardInterrupt

    model = Toy()
    with pytest.raises(KeyboardInterrupt):
        train(model, _make_batches(8), _mse, _config(), tmp_path / "run", on_log=crash)
    assert latest_checkpoint(tmp_path / "run").name == "step-00000006"
    resumed_model = Toy(seed=99)  # different initial weights: everything must come from the checkpoint
    resumed = train(resumed_model, _make_batches(8), _mse, _config(), tmp_path / "run")
    assert resumed.resumed_from == 6 and resumed.steps == expected.steps
    assert resumed.loss_curve == expected.loss_curve
    for key, value in _weights(reference).items():
        assert torch.equal(value, _weights(resumed_model)[key]), key


def test_a_finished_run_is_not_trained_again(tmp_path):
    first = Toy()
    done = train(first, _make_batches(8), _mse, _config(), tmp_path)
    again = Toy(seed=5)
    repeat = train(again, _make_batches(8), _mse, _config(), tmp_path)
    assert repeat.loss_curve == done.loss_curve and repeat.resumed_from == done.steps
    assert all(torch.equal(v, _weights(again)[k]) for k, v in _weights(first).items())
    # the finished run's last checkpoint has no optimizer moments (nothing trains on from it); the one before has
    newest, before = checkpoint_folders(tmp_path)[-1], checkpoint_folders(tmp_path)[-2]
    assert not (newest / "optimizer.safetensors").exists() and (before / "optimizer.safetensors").is_file()
    assert json.loads((newest / "state.json").read_text())["progress"]["done"]


def test_corrupt_newest_checkpoint_is_an_error_naming_the_file(tmp_path):
    train(Toy(), _make_batches(8), _mse, _config(epochs=1), tmp_path)
    newest = latest_checkpoint(tmp_path)
    weights = newest / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=str(weights)):
        train(Toy(), _make_batches(8), _mse, _config(epochs=1), tmp_path)
    (newest / "state.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(CheckpointError, match="state.json"):
        train(Toy(), _make_batches(8), _mse, _config(epochs=1), tmp_path)


def test_resuming_with_other_settings_is_refused(tmp_path):
    train(Toy(), _make_batches(8), _mse, _config(epochs=1), tmp_path)
    with pytest.raises(CheckpointError, match="lr=0.05"):
        train(Toy(), _make_batches(8), _mse, _config(epochs=1, lr=0.01), tmp_path)
    # where checkpoints go and how often may change
    train(Toy(), _make_batches(8), _mse, _config(epochs=1, checkpoint_every=0), tmp_path)


def test_dev_score_selects_the_best_epoch_and_restores_its_weights(tmp_path):
    scores = iter([1.0, 3.0, 2.0])
    snapshots = []

    def evaluate(model):
        assert not model.training  # evaluated in eval mode
        snapshots.append(_weights(model))
        return next(scores)

    model = Toy()
    result = train(model, _make_batches(8), _mse, _config(), tmp_path, evaluate=evaluate)
    assert result.dev_scores == [1.0, 3.0, 2.0] and result.best_epoch == 1
    assert all(torch.equal(v, _weights(model)[k]) for k, v in snapshots[1].items())
    state = json.loads((latest_checkpoint(tmp_path) / "state.json").read_text())
    assert state["progress"]["best_epoch"] == 1 and state["progress"]["done"]


def test_max_steps_caps_training_and_the_schedule(tmp_path):
    lrs = []
    result = train(
        Toy(),
        _make_batches(8),
        _mse,
        _config(max_steps=7, warmup_ratio=0.0),
        tmp_path,
        on_log=lambda s, logs: lrs.append(logs["lr"]),
    )
    assert result.steps == 7 and len(result.loss_curve) == 7
    assert lrs[-1] == 0.0 and math.isclose(lrs[0], 0.05 * 6 / 7)


def test_bad_inputs_get_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="batch_size"):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="no batches"):
        train(Toy(), lambda epoch, rng: [], _mse, _config(), tmp_path)
    with pytest.raises(TypeError, match="sized"):
        train(Toy(), lambda epoch, rng: iter([[]]), _mse, _config(), tmp_path)


def test_checkpoint_folders_get_temporary_names_of_their_own(tmp_path, monkeypatch):
    """No fixed `.step-N.tmp`: a concurrent run's folder is never removed or written into."""
    import re

    from dagster_ir.neural import training

    foreign = tmp_path / ".step-00000005.tmp"  # what another run's temp folder used to be called
    (foreign / "busy").mkdir(parents=True)
    seen, locked = [], []
    real_save = training.save_file

    def save_file(tensors, filename, metadata=None):
        seen.append(Path(filename).parent.name)
        return real_save(tensors, filename, metadata=metadata)

    monkeypatch.setattr(training, "save_file", save_file)
    train(
        Toy(),
        _make_batches(8),
        _mse,
        _config(epochs=1),
        tmp_path,
        on_log=lambda step, logs: locked.append(is_locked(tmp_path / ".lock")),
    )
    assert seen and all(re.fullmatch(r"\.step-\d{8}\.[0-9a-f]{8}-\d+-\w+\.tmp", name) for name in seen)
    assert (foreign / "busy").is_dir()  # left alone
    assert locked and all(locked)  # the folder is locked while the run trains in it
    assert not is_locked(tmp_path / ".lock")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "step-00000004",
        "step-00000005",
    ]


@pytest.mark.parametrize(("mask", "file_mode"), [(0o022, 0o644), (0o027, 0o640)])
def test_checkpoints_are_readable_as_the_umask_says(tmp_path, mask, file_mode):
    import os
    import stat

    old = os.umask(mask)
    try:
        train(Toy(), _make_batches(8), _mse, _config(epochs=1), tmp_path)
    finally:
        os.umask(old)
    files = [p for p in tmp_path.rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert any(p.suffix == ".safetensors" for p in files)
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in files} == {p.name: file_mode for p in files}
