"""Fixtures shared by the asset-layer tests."""

import json
from pathlib import Path

import pytest

import assets.lib.settings as settings
from dagster_ir.collections.config import load_collections_config
from dagster_ir.neural.backbone import make_tiny_backbone


@pytest.fixture
def project(tmp_path, monkeypatch):
    """Point assets.lib.settings at a YAML file the test writes (`project(text)`), with no run-wide profile."""
    path = tmp_path / "dagster-ir.yaml"

    def use(text: str) -> Path:
        path.write_text(text)
        specs = load_collections_config(path)
        monkeypatch.setattr(settings, "collection_specs", lambda: specs)
        monkeypatch.setattr(settings, "config_path", lambda: path)
        return path

    monkeypatch.delenv(settings.PROFILE_ENV, raising=False)
    return use


@pytest.fixture(scope="module")
def backbone(tmp_path_factory) -> str:
    """A tiny BERT without dropout, so that one and two torchrun processes draw nothing different."""
    folder = make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)
