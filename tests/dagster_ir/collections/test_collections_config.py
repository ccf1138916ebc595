from pathlib import Path

import polars as pl
import pytest

from dagster_ir.collections.config import (
    TOP_LEVEL_KEYS,
    CollectionConfigError,
    CranfieldSpec,
    IrdsSpec,
    LocalSpec,
    WikiCarSpec,
    collection_versions,
    inputs_identity,
    load_collection,
    load_collections_config,
    run_import_versions,
    settings_versions,
)
from dagster_ir.collections.splits import SplitConfig
from dagster_ir.collections.wikicar import WikiCarConfig
from dagster_ir.schemas import SEGMENTS

SHARED_CRANFIELD = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "cranfield"

FULL = """
collections:
  wiki-car:
    kind: wiki-car
    skip_headings: [history]
  cran:
    kind: cranfield
    path: data/cranfield
  msmarco-doc-dev:
    kind: irds
    dataset: msmarco-document/dev
    split: {test: 0.3, dev: 0.0, seed: 1}
  robust04:
    kind: local
    corpus: docs.jsonl
    topics: /abs/topics.txt
    qrels: qrels.txt
    topic_field: desc
"""


CRAN = "collections:\n  x:\n    kind: cranfield\n    path: p\n"


def write_config(tmp_path, text: str) -> Path:
    path = tmp_path / "dagster-ir.yaml"
    path.write_text(text)
    return path


def test_full_config_is_parsed_with_paths_relative_to_the_file(tmp_path):
    specs = load_collections_config(write_config(tmp_path, FULL))
    assert list(specs) == ["wiki-car", "cran", "msmarco-doc-dev", "robust04"]
    assert specs["wiki-car"].wiki_car.skip_headings == ("history",)
    assert specs["wiki-car"].split == SplitConfig(group_by="article_id")
    assert specs["cran"] == CranfieldSpec("cran", tmp_path / "data" / "cranfield")
    assert specs["msmarco-doc-dev"] == IrdsSpec(
        "msmarco-doc-dev", "msmarco-document/dev", SplitConfig(test=0.3, dev=0.0, seed=1)
    )
    assert specs["robust04"] == LocalSpec(
        "robust04", tmp_path / "docs.jsonl", Path("/abs/topics.txt"), tmp_path / "qrels.txt", "desc"
    )
    assert [s.kind for s in specs.values()] == ["wiki-car", "cranfield", "irds", "local"]


def test_default_without_a_file_is_wiki_car_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_collections_config() == {"wiki-car": WikiCarSpec("wiki-car")}
    write_config(tmp_path, "collections:\n  c:\n    kind: irds\n    dataset: antique/test\n")
    assert list(load_collections_config()) == ["c"]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("collections: {}\n", "collections: expected a non-empty mapping"),
        ("runs: {}\n", "collections: expected a top-level `collections` mapping"),
        ("collections:\n  x:\n    kind: trec\n", "collections.x.kind: expected one of"),
        ("collections:\n  x:\n    path: p\n", "collections.x.kind: expected one of"),
        ("collections:\n  x:\n    kind: [irds]\n", "collections.x.kind: expected one of"),
        ("collections:\n  x: 3\n", "collections.x: expected a mapping"),
        ("collections:\n  x:\n    kind: irds\n", "collections.x.dataset: required"),
        ("collections:\n  x:\n    kind: irds\n    dataset: 5\n", "collections.x.dataset: expected a non-empty string"),
        ("collections:\n  x:\n    kind: irds\n    dataset: a\n    datset: b\n", "collections.x.datset: unknown field"),
        ("collections:\n  x:\n    kind: cranfield\n", "collections.x.path: required"),
        ("collections:\n  x:\n    kind: local\n    corpus: c\n    topics: t\n", "collections.x.qrels: required"),
        (CRAN + "    split: {tets: 0.2}\n", "collections.x.split.tets: unknown field"),
        (CRAN + "    split: {seed: '1'}\n", "collections.x.split.seed: wrong type"),
        (CRAN + "    split: {test: 0.5}\n", "collections.x.split: SplitConfig: fractions must sum to 1"),
        (
            "collections:\n  x:\n    kind: wiki-car\n    skip_headings: notes\n",
            "collections.x.skip_headings: expected a list",
        ),
        ("collections:\n  a b:\n    kind: wiki-car\n", "collections.a b: a collection name holds only"),
        ("collections: [\n", "not valid YAML"),
        (CRAN + "    assets: [neural_baselines]\n", "collections.x.assets: expected a mapping of asset names"),
        (
            CRAN + "    assets: {neural_baselines: [knrm]}\n",
            "collections.x.assets.neural_baselines: expected a mapping",
        ),
        (
            CRAN + "run:\n  x: {a: a.trec}\n",
            "run: unknown top-level key (allowed: collections, runs, executor, schedules)",
        ),
    ],
)
def test_bad_config_names_file_and_field(tmp_path, text, where):
    path = write_config(tmp_path, text)
    with pytest.raises(CollectionConfigError) as error:
        load_collections_config(path)
    assert str(error.value).startswith(f"{path}: ")
    assert where in str(error.value)


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(CollectionConfigError, match="not found"):
        load_collections_config(tmp_path / "nope.yaml")


def segments() -> pl.DataFrame:
    rows = [("1", "Wing", 1, "", "lead"), ("1", "Wing", 2, "History", "h"), ("1", "Wing", 3, "Design", "d")]
    return pl.DataFrame([(*r, 1) for r in rows], schema=SEGMENTS, orient="row")


def test_load_wiki_car_uses_the_spec_settings():
    corpus, queries, qrels = load_collection(WikiCarSpec("wiki-car"), segments=segments())
    assert pl.concat(list(corpus)).height == 3
    assert queries["query_id"].to_list() == ["1/History", "1/Design"]
    skipping = WikiCarSpec("wiki-car", WikiCarConfig(skip_headings=("history",)))
    assert load_collection(skipping, segments=segments()).queries["query_id"].to_list() == ["1/Design"]
    with pytest.raises(ValueError, match="pass segments="):
        load_collection(WikiCarSpec("wiki-car"))


def test_load_local_spec(tmp_path):
    (tmp_path / "docs.tsv").write_text("d1\tx\n")
    (tmp_path / "topics.tsv").write_text("1\tq\n")
    (tmp_path / "qrels.txt").write_text("1 0 d1 1\n")
    path = write_config(
        tmp_path,
        "collections:\n  mine:\n    kind: local\n    corpus: docs.tsv\n    topics: topics.tsv\n    qrels: qrels.txt\n",
    )
    corpus, queries, qrels = load_collection(load_collections_config(path)["mine"])
    assert pl.concat(list(corpus)).rows() == [("d1", "", "x")]
    assert queries.rows() == [("1", "q")] and qrels.rows() == [("1", "d1", 1)]


def test_load_irds_spec_goes_through_ir_datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds"))
    import ir_datasets
    from ir_datasets.formats import GenericDoc, GenericQuery, TrecQrel

    class Fake:
        def has_docs(self):
            return True

        def has_queries(self):
            return True

        def has_qrels(self):
            return True

        def docs_iter(self):
            return iter([GenericDoc("d", "x")])

        def queries_iter(self):
            return iter([GenericQuery("1", "q")])

        def qrels_iter(self):
            return iter([TrecQrel("1", "d", 1, "0")])

    seen = []
    monkeypatch.setattr(ir_datasets, "load", lambda dataset_id: seen.append(dataset_id) or Fake())
    corpus, queries, _ = load_collection(IrdsSpec("x", "antique/test"))
    assert seen == ["antique/test"]
    assert pl.concat(list(corpus)).rows() == [("d", "", "x")]


@pytest.mark.skipif(not SHARED_CRANFIELD.is_dir(), reason=f"Cranfield data not found at {SHARED_CRANFIELD}")
def test_load_cranfield_spec():
    corpus, queries, qrels = load_collection(CranfieldSpec("cranfield", SHARED_CRANFIELD))
    assert (pl.concat(list(corpus)).height, queries.height, qrels.height) == (1400, 225, 1837)


def test_unknown_top_level_keys_are_listed_in_one_place(tmp_path, monkeypatch):
    path = write_config(tmp_path, CRAN + "protocol: {folds: 5}\n")
    with pytest.raises(CollectionConfigError, match="protocol: unknown top-level key"):
        load_collections_config(path)
    monkeypatch.setitem(TOP_LEVEL_KEYS, "protocol", "read by another stage")  # how a new section joins
    assert list(load_collections_config(path)) == ["x"]


TWO = """
collections:
  a:
    kind: local
    corpus: docs.tsv
    topics: topics.tsv
    qrels: qrels.txt
  b:
    kind: irds
    dataset: antique/test
runs:
  a: {ext: ext.trec}
"""


def test_each_collection_is_versioned_by_its_own_section_and_files(tmp_path):
    for name in ("docs.tsv", "topics.tsv", "qrels.txt", "ext.trec"):
        (tmp_path / name).write_text(f"{name}\n")
    path = write_config(tmp_path, TWO)
    first = collection_versions(path)
    assert set(first) == {"a", "b"} and first["a"] != first["b"]
    assert collection_versions(path) == first  # stable
    write_config(tmp_path, TWO.replace("dataset: antique/test", "dataset: antique/test\n    split: {seed: 7}"))
    second = collection_versions(path)
    assert second["a"] == first["a"] and second["b"] != first["b"]  # only b's section changed
    write_config(tmp_path, TWO + "# a comment and reordered keys change nothing\n")
    assert collection_versions(path) == first
    (tmp_path / "docs.tsv").write_text("d1\tother text\n")  # a's corpus edited in place
    third = collection_versions(path)
    assert third["a"] != first["a"] and third["b"] == first["b"]
    assert collection_versions(None) == {"wiki-car": collection_versions(None)["wiki-car"]}


def test_imported_runs_are_versioned_by_their_content(tmp_path):
    (tmp_path / "ext.trec").write_text("1 Q0 d1 1 2.0 ext\n")
    path = write_config(tmp_path, TWO)
    first = run_import_versions(path)
    assert set(first) == {"a", "b"}  # b has no imported runs: a version all the same
    (tmp_path / "ext.trec").write_text("1 Q0 d2 1 2.0 ext\n")
    second = run_import_versions(path)
    assert second["a"] != first["a"] and second["b"] == first["b"]
    write_config(tmp_path, TWO.replace("runs:\n  a: {ext: ext.trec}\n", ""))
    assert run_import_versions(path)["a"] == first["b"]  # no runs at all


def test_inputs_identity_changes_whenever_a_version_may_and_hashes_no_run_file(tmp_path, monkeypatch):
    import dagster_ir.collections.config as config

    (tmp_path / "ext.trec").write_text("1 Q0 d1 1 2.0 ext\n")
    path = write_config(tmp_path, TWO)
    first = inputs_identity(path)
    assert inputs_identity(path) == first  # stable
    (tmp_path / "ext.trec").write_text("1 Q0 d1 1 2.0 ext\n2 Q0 d1 1 2.0 ext\n")  # an imported run grew
    second = inputs_identity(path)
    assert second != first
    write_config(tmp_path, TWO.replace("dataset: antique/test", "dataset: antique/test\n    profile: paper"))
    assert inputs_identity(path) not in (first, second)  # a settings-only edit (collection_versions ignores it)
    assert inputs_identity(None) == inputs_identity(None)
    monkeypatch.setattr(config, "_content_hash", lambda _: pytest.fail("a poll must not read run files whole"))
    inputs_identity(path)


def test_asset_settings_are_read_and_versioned_apart_from_the_rest_of_the_section(tmp_path):
    settings = "\n    assets:\n      neural_baselines: {models: [knrm, bert-maxp]}"
    with_settings = TWO.replace("dataset: antique/test", "dataset: antique/test" + settings)
    path = write_config(tmp_path, TWO)
    assert all(spec.assets == {} for spec in load_collections_config(path).values())
    assert settings_versions(path) == {"a": "none", "b": "none"}
    write_config(tmp_path, with_settings)
    specs = load_collections_config(path)
    assert specs["b"].assets == {"neural_baselines": {"models": ["knrm", "bert-maxp"]}} and specs["a"].assets == {}
    first = settings_versions(path)
    assert first["a"] == "none" and first["b"] != "none"
    write_config(tmp_path, with_settings.replace("dataset: antique/test", "dataset: antique/test\n    seeds: [0, 1]"))
    assert settings_versions(path) == first  # other fields of the section leave the settings' version alone
    write_config(tmp_path, with_settings.replace("knrm, ", ""))
    assert settings_versions(path)["b"] not in (first["b"], "none")
