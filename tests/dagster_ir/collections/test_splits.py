import polars as pl
import pytest

from dagster_ir.collections.splits import (
    ROLES,
    SPLITS,
    SplitConfig,
    fold_assignment,
    fold_roles,
    split_queries,
)
from dagster_ir.schemas import QUERY_SPLITS, validate


def queries(n: int, **extra) -> pl.DataFrame:
    return pl.DataFrame({"query_id": [f"q{i}" for i in range(n)], "text": ["t"] * n, **extra})


def test_ungrouped_split_sizes_are_the_rounded_fractions():
    frame = split_queries(queries(50))
    validate(frame, QUERY_SPLITS, "query_splits")
    counts = dict(frame["split"].value_counts().rows())
    assert counts == {"train/fusion": 5, "train/model": 30, "dev": 5, "test": 10}
    assert sorted(frame["fold"].value_counts().rows()) == [(f, 10) for f in range(5)]


@pytest.mark.parametrize("n", [1, 7, 13, 101])
def test_fractions_respected_within_one_query(n):
    config = SplitConfig(train_fusion=0.15, train_model=0.5, dev=0.05, test=0.3, folds=4, seed=3)
    frame = split_queries(queries(n), config)
    counts = frame["split"].value_counts()
    for split, fraction in zip(SPLITS, config.fractions):
        got = counts.filter(pl.col("split") == split)["count"].sum()
        assert abs(got - fraction * n) < 1
    fold_counts = frame["fold"].value_counts()
    for fold in range(4):
        assert abs(fold_counts.filter(pl.col("fold") == fold)["count"].sum() - n / 4) < 1


def test_covering_and_disjoint_in_input_order():
    q = queries(40)
    frame = split_queries(q)
    assert frame["query_id"].to_list() == q["query_id"].to_list()
    assert frame["split"].is_in(list(SPLITS)).all()
    assert frame["fold"].is_between(0, 4).all()


def test_deterministic_given_seed_and_independent_of_row_order():
    q = queries(60)
    once = split_queries(q, SplitConfig(seed=7))
    shuffled = split_queries(q.sample(fraction=1.0, shuffle=True, seed=1), SplitConfig(seed=7))
    assert once.sort("query_id").equals(shuffled.sort("query_id"))
    assert not once.equals(split_queries(q, SplitConfig(seed=8)))


def test_folds_are_shuffled_independently_of_splits():
    frame = split_queries(queries(200))
    per_test_fold = frame.filter(pl.col("split") == "test")["fold"].n_unique()
    assert per_test_fold > 1


def test_groups_never_straddle_splits_or_folds():
    articles = [f"a{i // 3 + (i % 5 == 0)}" for i in range(90)]  # groups of 1..4 queries
    q = queries(90, article_id=articles)
    frame = split_queries(q, SplitConfig(group_by="article_id")).with_columns(article=pl.Series(articles))
    per_group = frame.group_by("article").agg(pl.col("split").n_unique(), pl.col("fold").n_unique())
    assert per_group["split"].max() == 1 and per_group["fold"].max() == 1
    largest = max(articles.count(a) for a in set(articles))
    for split, fraction in zip(SPLITS, SplitConfig().fractions):
        assert abs(frame.filter(pl.col("split") == split).height - fraction * 90) < largest


def test_explicit_groups_override_group_by_and_are_checked():
    q = queries(4)
    frame = split_queries(q, groups=pl.Series(["x", "x", "x", "x"]))
    assert frame["split"].n_unique() == 1 and frame["fold"].n_unique() == 1
    with pytest.raises(ValueError, match="3 group keys for 4 queries"):
        split_queries(q, groups=pl.Series(["x", "x", "y"]))
    with pytest.raises(ValueError, match="null group key"):
        split_queries(q, groups=pl.Series(["x", None, "y", "y"]))


def test_bad_inputs():
    with pytest.raises(ValueError, match="group_by: queries have no column 'article_id'"):
        split_queries(queries(3), SplitConfig(group_by="article_id"))
    with pytest.raises(ValueError, match="duplicate query_id"):
        split_queries(pl.DataFrame({"query_id": ["a", "a"], "text": ["", ""]}))


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"test": 0.3}, "sum to 1"),
        ({"dev": -0.1, "test": 0.4}, "'dev' must lie in [0, 1]"),
        ({"folds": 2}, "at least 3"),
    ],
)
def test_config_is_validated(kwargs, fragment):
    with pytest.raises(ValueError) as error:
        SplitConfig(**kwargs)
    assert fragment in str(error.value)


def test_fold_roles_rotation():
    assert fold_roles(5, 0) == {"train": [2, 3, 4], "validation": [1], "test": [0]}
    assert fold_roles(5, 4) == {"train": [1, 2, 3], "validation": [0], "test": [4]}
    for k in (3, 5, 10):
        for i in range(k):
            roles = fold_roles(k, i)
            assert sorted(sum(roles.values(), [])) == list(range(k))
            assert not set(roles["test"]) & (set(roles["train"]) | set(roles["validation"]))
        assert sorted(fold_roles(k, i)["test"][0] for i in range(k)) == list(range(k))
    with pytest.raises(ValueError):
        fold_roles(5, 5)


def test_fold_assignment_is_60_20_20():
    frame = split_queries(queries(100))
    for i in range(5):
        assigned = fold_assignment(frame, i)
        assert assigned["query_id"].to_list() == frame["query_id"].to_list()
        counts = dict(assigned["role"].value_counts().rows())
        assert counts == {"train": 60, "validation": 20, "test": 20}
        test_ids = set(assigned.filter(pl.col("role") == "test")["query_id"])
        assert test_ids == set(frame.filter(pl.col("fold") == i)["query_id"])
    assert set(ROLES) == {"train", "validation", "test"}


def test_a_split_that_selects_no_query_is_an_error():
    from dagster_ir.collections import split_query_ids

    splits = pl.DataFrame({"query_id": ["a", "b", "c"], "split": ["test", "dev", "test"], "fold": [0, 1, 2]})
    assert split_query_ids(splits, "test", where="x").to_list() == ["a", "c"]
    assert split_query_ids(splits, "all", where="x").to_list() == ["a", "b", "c"]
    with pytest.raises(
        ValueError, match=r"reranked_runs: no queries in split 'tset' \(splits with queries: \['dev', 'test'\]"
    ):
        split_query_ids(splits, "tset", where="reranked_runs")
