"""Every training or scoring asset's config resolves device and precision through one resolver:
GPU when there is one, bf16 where native, and an explicit setting wins (CUDA simulated)."""

import pytest
import torch

from assets.defs.baselines import NeuralBaselinesConfig
from assets.defs.cet import CetConfig, CetRunsConfig
from assets.defs.model1 import BertModel1AssetConfig, NeuralModel1AssetConfig
from assets.defs.php import CrossEncoderSettings, PhpSettings, RerankSettings
from assets.defs.retrieval import DenseEncodingConfig
from dagster_ir.neural import device as dev


def _train(config):
    """(device, bf16) of the config's training settings."""
    domain = config.to_domain()
    for path in (("train",), ("cet", "train")):
        value = domain
        try:
            for name in path:
                value = getattr(value, name)
        except AttributeError:
            continue
        return value.device, value.bf16
    return domain.device, domain.bf16  # BaselineConfig


TRAINING = [PhpSettings, CrossEncoderSettings, CetConfig, CetRunsConfig, BertModel1AssetConfig, NeuralBaselinesConfig]


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


@pytest.mark.parametrize("cls", TRAINING)
def test_gpu_and_bf16_by_default_on_a_gpu_machine(gpu, cls):
    assert _train(cls()) == ("cuda", True)


@pytest.mark.parametrize("cls", TRAINING)
def test_explicit_device_and_precision_win(gpu, cls):
    assert _train(cls(device="cpu", bf16=False)) == ("cpu", False)


@pytest.mark.parametrize("cls", TRAINING)
def test_cpu_without_native_bf16_stays_fp32(monkeypatch, cls):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(dev, "_cpu_native_bf16", lambda: False)
    assert _train(cls()) == ("cpu", False)  # the demo's BERT baselines no longer run emulated bf16


def test_neural_model1_stays_fp32_unless_asked(gpu):
    assert _train(NeuralModel1AssetConfig()) == ("cuda", False)
    assert _train(NeuralModel1AssetConfig(bf16=True)) == ("cuda", True)


def test_scoring_configs(gpu, monkeypatch):
    assert RerankSettings().placement() == dev.Placement("cuda", True)
    assert RerankSettings(device="cpu", bf16=False).placement() == dev.Placement("cpu", False)
    assert DenseEncodingConfig().to_domain().device == "cuda"
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert DenseEncodingConfig().to_domain().device == "cuda:1"
