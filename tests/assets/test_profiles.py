"""One profile switch: a collection's `profile:` in the YAML, `--profile` of the command line (a run
tag), their precedence under an asset's own settings, and the staleness a profile change causes."""

from types import SimpleNamespace

import dagster as dg
import polars as pl
import pytest

import assets.cli.commands as commands
import assets.cli.main as cli
import assets.lib.settings as settings
from assets.cli.updates import update_all
from assets.defs.cet import CetConfig
from assets.defs.ghrm import GHRMSweepsAssetConfig
from assets.defs.php import CrossEncoderSettings, PhpSettings
from assets.lib.io_managers import PolarsParquetIOManager
from dagster_ir.collections.config import (
    CollectionConfigError,
    collection_versions,
    settings_versions,
)

YAML = """
collections:
  cran:
    kind: cranfield
    path: p
    profile: paper
    assets:
      cet: {profile: demo}
  other:
    kind: cranfield
    path: p
"""


def _run(profile: str | None):
    """A stand-in for an asset's context: a run with (or without) the run-wide profile tag."""
    return SimpleNamespace(run=SimpleNamespace(tags={settings.PROFILE_TAG: profile} if profile else {}))


def test_the_collection_profile_fills_every_profile_field(project):
    project(YAML)
    assert settings.with_settings(CrossEncoderSettings(), "cross_encoder", "cran").profile == "paper"
    sweeps = settings.with_settings(GHRMSweepsAssetConfig(), "ghrm_sweeps", "cran")
    assert (sweeps.profile, sweeps.sweep_profile) == ("paper", "paper")
    assert settings.with_settings(CrossEncoderSettings(), "cross_encoder", "other").profile == "demo"


def test_precedence_run_config_then_asset_settings_then_run_profile_then_collection(project):
    project(YAML)
    # the run-wide profile (--profile) replaces the collection's
    assert settings.with_settings(CrossEncoderSettings(), "cross_encoder", "cran", _run("demo")).profile == "demo"
    assert settings.with_settings(CrossEncoderSettings(), "cross_encoder", "other", _run("paper")).profile == "paper"
    # the collection's `assets:` settings of one asset win over both
    assert settings.with_settings(CetConfig(), "cet", "cran").profile == "demo"
    assert settings.with_settings(CetConfig(), "cet", "cran", _run("paper")).profile == "demo"
    # and the run's own config over everything
    own = settings.with_settings(CrossEncoderSettings(profile="demo"), "cross_encoder", "cran", _run("paper"))
    assert own.profile == "demo"
    assert own.to_domain().train.lr == CrossEncoderSettings().to_domain().train.lr


def test_the_run_profile_reaches_the_unpartitioned_php_assets():
    assert settings.with_profile(PhpSettings(), _run("paper")).to_domain().backbone == "bert-base-uncased"
    assert settings.with_profile(PhpSettings(), _run(None)) == PhpSettings()
    assert settings.with_profile(PhpSettings(profile="demo"), _run("paper")).profile == "demo"
    with pytest.raises(ValueError, match="run tag dagster_ir/profile: unknown profile 'fast'"):
        settings.with_profile(PhpSettings(), _run("fast"))


def test_a_bad_profile_names_the_file_and_field(project):
    with pytest.raises(CollectionConfigError, match=r"collections\.cran\.profile: expected one of \['demo', 'paper'\]"):
        project("collections:\n  cran:\n    kind: cranfield\n    path: p\n    profile: full\n")


def test_the_profile_versions_the_settings_not_the_data(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("collections:\n  cran:\n    kind: cranfield\n    path: p\n")
    data, plain = collection_versions(path), settings_versions(path)
    assert plain == {"cran": "none"}
    path.write_text("collections:\n  cran:\n    kind: cranfield\n    path: p\n    profile: paper\n")
    assert collection_versions(path) == data  # corpus, qrels... are not stale
    paper = settings_versions(path)
    assert paper["cran"] != "none"
    assert settings_versions(path, "demo")["cran"] not in ("none", paper["cran"])  # --profile demo overrides
    assert settings_versions(path, "paper") == paper


@dg.asset(deps=["run_profile_setting"], code_version="1")
def profiled(context: dg.AssetExecutionContext) -> pl.DataFrame:
    """The run-wide profile this run saw."""
    return pl.DataFrame({"profile": [settings.run_profile(context) or "none"]})


def test_a_new_run_profile_makes_its_readers_stale_and_tags_the_runs(tmp_path, monkeypatch):
    monkeypatch.delenv(settings.PROFILE_ENV, raising=False)
    defs = dg.Definitions(assets=[settings.run_profile_setting, profiled])
    resources = {"io_manager": PolarsParquetIOManager(data_dir=str(tmp_path))}

    def update(profile):
        return update_all(defs, instance, resources=resources, tags=commands.use_profile(profile), log=lambda _: None)

    with dg.instance_for_test() as instance:
        assert update(None).materialized == 1
        assert update(None).materialized == 0  # fresh
        assert update("paper").materialized == 1  # the profile changed: materialized again
        seen = pl.read_parquet(next(tmp_path.rglob("*.parquet")))["profile"].to_list()
        assert seen == ["paper"]
        runs = instance.get_runs(filters=dg.RunsFilter(tags={settings.PROFILE_TAG: "paper"}))
        assert len(runs) == 1
        assert update("paper").materialized == 0
        assert update(None).materialized == 1  # back to the default: again
    commands.use_profile(None)


def test_the_cli_passes_profile_to_update_and_reproduce(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(cli, "cmd_update", lambda root, **kw: seen.setdefault("update", kw) and 0)
    monkeypatch.setattr(cli, "cmd_reproduce", lambda root, collection, **kw: seen.setdefault("reproduce", kw) and 0)
    assert cli.main(["--data", str(tmp_path), "update", "--profile", "paper"]) == 0
    assert cli.main(["--data", str(tmp_path), "reproduce", "--collection", "c", "--profile", "paper"]) == 0
    assert seen["update"]["profile"] == seen["reproduce"]["profile"] == "paper"
    with pytest.raises(SystemExit):
        cli.main(["--data", str(tmp_path), "update", "--profile", "full"])
