"""Fixtures shared by the asset-layer tests."""

from pathlib import Path

import pytest

import assets.settings as settings
from dagster_ir.collections.config import load_collections_config


@pytest.fixture
def project(tmp_path, monkeypatch):
    """Point assets.settings at a YAML file the test writes (`project(text)`), with no run-wide profile."""
    path = tmp_path / "dagster-ir.yaml"

    def use(text: str) -> Path:
        path.write_text(text)
        specs = load_collections_config(path)
        monkeypatch.setattr(settings, "collection_specs", lambda: specs)
        monkeypatch.setattr(settings, "config_path", lambda: path)
        return path

    monkeypatch.delenv(settings.PROFILE_ENV, raising=False)
    return use
