"""The device/precision resolver: CUDA and CPU bf16 flags are simulated with monkeypatch."""

import pytest
import torch

from dagster_ir.neural import device as dev
from dagster_ir.neural.training import TrainConfig, _device


@pytest.fixture
def cuda(monkeypatch):
    """A machine with one bf16-capable GPU (simulated)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: f"Fake H100 #{index}")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


@pytest.fixture
def cpu_only(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


def test_auto_is_cuda_with_bf16_on_a_gpu_machine(cuda):
    placement = dev.resolve_placement()
    assert (placement.device, placement.bf16) == ("cuda", True)
    assert placement.metadata() == {"device": "cuda", "precision": "bf16", "gpu": "Fake H100 #0"}


def test_auto_under_torchrun_is_this_process_gpu(cuda, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    placement = dev.resolve_placement("auto")
    assert placement.device == "cuda:3"
    assert placement.metadata()["gpu"] == "Fake H100 #3"


def test_gpu_without_bf16_trains_in_fp32(cuda, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # e.g. a V100 or T4
    assert dev.resolve_placement().bf16 is False


@pytest.mark.parametrize("native", [True, False])
def test_cpu_bf16_follows_native_support(cpu_only, monkeypatch, native):
    monkeypatch.setattr(dev, "_cpu_native_bf16", lambda: native)
    placement = dev.resolve_placement()
    assert placement.device == "cpu"
    assert placement.bf16 is native
    assert placement.metadata() == {"device": "cpu", "precision": "bf16" if native else "fp32", "gpu": "none"}


def test_explicit_settings_win(cuda, monkeypatch):
    monkeypatch.setattr(dev, "_cpu_native_bf16", lambda: True)
    assert dev.resolve_placement("cpu", False) == dev.Placement("cpu", False)
    assert dev.resolve_placement("cpu") == dev.Placement("cpu", True)
    assert dev.resolve_placement("auto", False) == dev.Placement("cuda", False)
    monkeypatch.setattr(dev, "_cpu_native_bf16", lambda: False)
    assert dev.resolve_placement("cpu", True).bf16 is True  # asked for: the caller warns or refuses


def test_bad_values_are_errors():
    with pytest.raises(RuntimeError):
        dev.resolve_device("gpu0")
    with pytest.raises(ValueError, match="bf16 must be true, false or auto"):
        dev.resolve_bf16("yes", "cpu")


def test_the_training_loop_resolves_auto(cpu_only):
    assert _device(TrainConfig(device="auto")) == torch.device("cpu")
