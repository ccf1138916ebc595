"""The training protocol: units per collection, fold rotation, roles of a fixed split, seed offsets."""

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pytest

from dagster_ir.collections import (
    CollectionConfigError,
    Protocol,
    SplitConfig,
    TrainingUnit,
    offset_seeds,
    report_query_ids,
    split_queries,
    tag_unit,
    training_units,
    unit_queries,
    units_of,
)
from dagster_ir.collections.config import parse_collections_config
from dagster_ir.methods.baselines import MODELS


def _splits(n: int, folds: int = 5, seed: int = 42) -> pl.DataFrame:
    queries = pl.DataFrame({"query_id": [f"q{i:03d}" for i in range(n)], "text": ["t"] * n})
    return split_queries(queries, SplitConfig(folds=folds, seed=seed))


@pytest.mark.parametrize(("n", "folds"), [(225, 5), (64, 5), (31, 3), (50, 10)])
def test_cv_rotation_puts_every_query_in_exactly_one_test_fold(n, folds):
    splits = _splits(n, folds)
    units = training_units("c", Protocol("cv"), folds)
    tests = [q for unit in units for q in unit_queries(splits, unit).test]
    assert sorted(tests) == sorted(splits["query_id"].to_list())  # each query once, none left out
    assert len(tests) == len(set(tests))


@pytest.mark.parametrize("folds", [3, 5, 7])
def test_cv_roles_are_disjoint_cover_the_queries_and_keep_test_out_of_training(folds):
    splits = _splits(120, folds)
    fold_of = dict(splits.select("query_id", "fold").iter_rows())
    for unit in training_units("c", Protocol("cv"), folds):
        roles = unit_queries(splits, unit)
        train, validation, test = set(roles.train), set(roles.validation), set(roles.test)
        assert not train & test and not train & validation and not validation & test
        assert train | validation | test == set(fold_of)
        assert {fold_of[q] for q in test} == {unit.fold}
        assert {fold_of[q] for q in validation} == {(unit.fold + 1) % folds}
        assert unit.fold not in {fold_of[q] for q in train}  # the test fold never trains its own model
        assert roles.fusion == roles.validation  # fusion weights are chosen on validation, never on test


def test_five_folds_rotate_sixty_twenty_twenty():
    splits = _splits(100)
    roles = unit_queries(splits, TrainingUnit("c", "cv", 2, 5, 0))
    assert (len(roles.train), len(roles.validation), len(roles.test)) == (60, 20, 20)


def test_each_query_is_validation_in_one_rotation_and_trains_the_others():
    splits = _splits(40)
    units = training_units("c", Protocol("cv"), 5)
    for query in splits["query_id"]:
        roles = [unit_queries(splits, u) for u in units]
        assert sum(query in r.validation for r in roles) == 1
        assert sum(query in r.train for r in roles) == 3


def test_fixed_split_roles_are_the_named_splits():
    splits = pl.DataFrame(
        {
            "query_id": ["a", "b", "c", "d", "e", "f"],
            "split": ["train/model", "dev", "test", "train/fusion", "train/model", "test"],
            "fold": [0, 1, 2, 3, 4, 0],
        }
    ).cast({"fold": pl.Int32})
    roles = unit_queries(splits, TrainingUnit("w", "fixed", None, 5, 1))
    assert (roles.train, roles.validation, roles.fusion, roles.test) == (["a", "e"], ["b"], ["d"], ["c", "f"])
    assert roles.of("test") == ["c", "f"]
    with pytest.raises(ValueError, match="unknown role"):
        roles.of("dev")
    assert report_query_ids(splits, "fixed") == ["c", "f"]
    assert report_query_ids(splits, "cv") == ["a", "b", "c", "d", "e", "f"]


def test_unit_keys_per_protocol_and_seed():
    assert [u.key for u in training_units("wiki-car", Protocol("fixed", (0, 2)), 5)] == [
        "wiki-car/seed-0",
        "wiki-car/seed-2",
    ]
    keys = [u.key for u in training_units("cran", Protocol("cv", (0, 1)), 3)]
    assert keys == [
        "cran/fold-0/seed-0",
        "cran/fold-0/seed-1",
        "cran/fold-1/seed-0",
        "cran/fold-1/seed-1",
        "cran/fold-2/seed-0",
        "cran/fold-2/seed-1",
    ]
    with pytest.raises(ValueError, match="at least 3 folds"):
        training_units("c", Protocol("cv"), 2)


def test_a_unit_refuses_splits_with_more_folds_than_it_rotates():
    with pytest.raises(ValueError, match="rotates 3 folds"):
        unit_queries(_splits(20, folds=5), TrainingUnit("c", "cv", 0, 3, 0))


@pytest.mark.parametrize(
    ("kind", "seeds", "message"),
    [("loo", (0,), "kind"), ("cv", (), "at least one"), ("cv", (1, 1), "twice"), ("cv", (-1,), "non-negative")],
)
def test_bad_protocols_are_refused(kind, seeds, message):
    with pytest.raises(ValueError, match=message):
        Protocol(kind, seeds)


def test_collections_yaml_sets_protocol_and_seeds_with_defaults_per_kind(tmp_path):
    document = {
        "collections": {
            "wiki-car": {"kind": "wiki-car"},
            "cran": {"kind": "cranfield", "path": "c", "seeds": [0, 1, 2], "split": {"folds": 4}},
            "small": {"kind": "local", "corpus": "d", "topics": "t", "qrels": "q", "protocol": "fixed"},
        }
    }
    specs = parse_collections_config(document, source=tmp_path / "x.yaml")
    assert specs["wiki-car"].protocol == Protocol("fixed", (0,))
    assert specs["cran"].protocol == Protocol("cv", (0, 1, 2))
    assert specs["small"].protocol == Protocol("fixed", (0,))
    assert len(units_of(specs["cran"])) == 12 and units_of(specs["small"])[0].key == "small/seed-0"


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"protocol": "kfold"}, "protocol"),
        ({"seeds": 3}, "seeds"),
        ({"seeds": [0, True]}, "seeds"),
        ({"seeds": [2, 2]}, "seeds"),
    ],
)
def test_bad_protocol_fields_name_the_file_and_field(tmp_path, entry, field):
    document = {"collections": {"cran": {"kind": "cranfield", "path": "c", **entry}}}
    with pytest.raises(CollectionConfigError, match=rf"x\.yaml: collections\.cran\.{field}"):
        parse_collections_config(document, source=tmp_path / "x.yaml")


def test_the_cranfield_example_is_cross_validated():
    example = Path(__file__).resolve().parents[3] / "examples" / "cranfield.yaml"
    import yaml

    specs = parse_collections_config(yaml.safe_load(example.read_text()), source=example)
    assert specs["cranfield"].protocol.kind == "cv" and specs["wiki-car"].protocol.kind == "fixed"
    # the reproduction trains every neural baseline of the papers' tables, the BERT ones included (issue #17)
    assert sorted(specs["cranfield"].assets["neural_baselines"]["models"]) == sorted(MODELS)


@dataclass(frozen=True)
class _Inner:
    seed: int = 7
    negative_seed: int = 3
    seeds_seen: int = 1  # not a seed field
    lr: float = 0.1


@dataclass(frozen=True)
class _Outer:
    seed: int = 42
    inner: _Inner = field(default_factory=_Inner)
    name: str = "x"


def test_offset_seeds_shifts_every_seed_field_and_nothing_else():
    shifted = offset_seeds(_Outer(), 2)
    assert shifted == _Outer(seed=44, inner=_Inner(seed=9, negative_seed=5))
    assert offset_seeds(_Outer(), 0) is not None and offset_seeds(_Outer(), 0) == _Outer()
    with pytest.raises(TypeError, match="dataclass"):
        offset_seeds({"seed": 1}, 1)


def test_tag_unit_names_fold_and_seed():
    frame = pl.DataFrame({"query_id": ["a"], "seed": [42]})
    tagged = tag_unit(frame, TrainingUnit("c", "cv", 3, 5, 1))
    assert tagged.row(0, named=True) == {"query_id": "a", "seed": 1, "fold": 3}
    fixed = tag_unit(frame, TrainingUnit("c", "fixed", None, 5, 0))
    assert fixed["fold"].null_count() == 1 and fixed.schema["fold"] == pl.Int32


SHARED_CRANFIELD = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "cranfield"


def _scored_by(splits: pl.DataFrame, units: list[TrainingUnit]) -> dict[tuple[str, int], list[TrainingUnit]]:
    """(query, seed) -> the units whose test fold holds the query: a run merged over the units."""
    scored: dict[tuple[str, int], list[TrainingUnit]] = {}
    for unit in units:
        for query in unit_queries(splits, unit).test:
            scored.setdefault((query, unit.seed), []).append(unit)
    return scored


def test_with_three_seeds_each_query_is_scored_once_per_seed_by_a_model_that_never_saw_it():
    splits = _splits(64)
    units = training_units("c", Protocol("cv", (0, 1, 2)), 5)
    assert len(units) == 15
    scored = _scored_by(splits, units)
    assert set(scored) == {(q, s) for q in splits["query_id"] for s in (0, 1, 2)}
    for (query, _), by in scored.items():
        assert len(by) == 1  # exactly one test fold per query and seed
        roles = unit_queries(splits, by[0])
        assert query not in roles.train and query not in roles.validation and query not in roles.fusion


def test_a_unit_trains_on_no_query_of_its_own_test_fold_for_any_seed():
    splits = _splits(90, seed=7)
    fold_of = dict(splits.select("query_id", "fold").iter_rows())
    for unit in training_units("c", Protocol("cv", (0, 3)), 5):
        roles = unit_queries(splits, unit)
        chosen_on = set(roles.train) | set(roles.validation) | set(roles.fusion)
        assert all(fold_of[q] != unit.fold for q in chosen_on)
        assert {fold_of[q] for q in roles.train} == set(range(5)) - {unit.fold, (unit.fold + 1) % 5}


@pytest.mark.skipif(not SHARED_CRANFIELD.is_dir(), reason=f"Cranfield data not found at {SHARED_CRANFIELD}")
def test_cranfield_cv_scores_all_225_queries_once():
    from dagster_ir.collections import read_cranfield

    _, queries, _ = read_cranfield(SHARED_CRANFIELD)
    splits = split_queries(queries, SplitConfig())
    units = training_units("cranfield", Protocol("cv"), SplitConfig().folds)
    scored = _scored_by(splits, units)
    assert len(scored) == queries.height == 225 and all(len(by) == 1 for by in scored.values())
    assert report_query_ids(splits, "cv") == sorted(queries["query_id"].to_list())
