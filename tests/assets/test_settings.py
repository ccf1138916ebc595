"""Per-collection asset settings (`assets:` in the YAML): precedence, checks, and the dependency that makes them stale."""

from pathlib import Path

import dagster as dg
import pytest

import assets.lib.settings as settings
from assets.defs.baselines import NeuralBaselinesConfig
from dagster_ir.collections.config import CollectionConfigError

YAML = """
collections:
  cran:
    kind: cranfield
    path: p
    assets:
      neural_baselines: {models: [knrm, bert-maxp], epochs: 3}
  other:
    kind: cranfield
    path: p
"""


def test_the_yaml_fills_what_the_run_config_leaves_unset(project):
    project(YAML)
    default = settings.with_settings(NeuralBaselinesConfig(), "neural_baselines", "cran")
    assert default.models == ["knrm", "bert-maxp"] and default.epochs == 3
    assert default.profile == "demo"  # not in the YAML: the class's default
    explicit = settings.with_settings(NeuralBaselinesConfig(epochs=1), "neural_baselines", "cran")
    assert explicit.epochs == 1 and explicit.models == ["knrm", "bert-maxp"]  # the run's own field wins
    untouched = settings.with_settings(NeuralBaselinesConfig(), "neural_baselines", "other")
    assert untouched == NeuralBaselinesConfig()  # a collection without settings
    assert settings.with_settings(NeuralBaselinesConfig(), "cross_encoder", "cran") == NeuralBaselinesConfig()


@pytest.mark.parametrize(
    ("assets", "where"),
    [
        ("cross_encoder: {inits: [bert]}", "collections.cran.assets.cross_encoder: this asset takes no settings"),
        ("neural_baselines: {modles: [knrm]}", "collections.cran.assets.neural_baselines.modles: unknown config field"),
        ("neural_baselines: {epochs: many}", "collections.cran.assets.neural_baselines.epochs: "),
    ],
)
def test_bad_settings_name_the_file_and_the_field(project, assets, where):
    path = project(f"collections:\n  cran:\n    kind: cranfield\n    path: p\n    assets:\n      {assets}\n")
    with pytest.raises(CollectionConfigError) as error:
        settings.check_settings({"neural_baselines": NeuralBaselinesConfig})
    assert str(error.value).startswith(f"{path}: {where}")


def test_every_settable_asset_reads_the_settings_source():
    from assets.definitions import SETTABLE, defs

    graph = defs.resolve_asset_graph()
    for name in SETTABLE:
        assert dg.AssetKey("collection_settings") in graph.get(dg.AssetKey(name)).parent_keys, name


def test_a_collections_query_words_override_what_ghrm_would_read_off_it(project):
    import polars as pl

    from assets.defs.ghrm import GHRMAssetConfig, fit_lengths

    project(YAML.replace("neural_baselines: {models: [knrm, bert-maxp], epochs: 3}", "ghrm_runs: {query_words: 12}"))
    config = settings.with_settings(GHRMAssetConfig(), "ghrm_runs", "cran")
    queries = pl.DataFrame({"query_id": ["q1"], "text": ["one two three"]})
    corpus = pl.DataFrame({"doc_id": ["d"], "title": [""], "text": ["alpha beta"]})
    domain, _ = fit_lengths(config, config.to_domain(), queries, corpus.lazy())
    assert (domain.inputs.query_words, domain.inputs.doc_words) == (12, 2)  # the YAML's 12; documents read off
    plain = settings.with_settings(GHRMAssetConfig(), "ghrm_runs", "other")
    assert fit_lengths(plain, plain.to_domain(), queries, corpus.lazy())[0].inputs.query_words == 3


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("example", sorted(path.name for path in EXAMPLES.glob("*.yaml")))
def test_every_example_config_loads_and_its_asset_settings_check(project, example):
    """A typo in an example (an unknown asset setting, a bad field) fails here, not hours into a reproduction."""
    from assets.definitions import SETTABLE

    project((EXAMPLES / example).read_text(encoding="utf-8"))
    settings.check_settings(SETTABLE)
    assert settings.collection_specs()  # at least one collection
