"""Query splits: a fixed train/fusion, train/model, dev, test split and k folds for rotation.

`split_queries` gives every query a split and a fold (QUERY_SPLITS schema). Queries are shuffled in
units: a unit is one query, or with grouping every query of a group (for wiki-car, an article), so a
group never straddles two splits or two folds. Units are sorted by key and shuffled with
`numpy.random.default_rng(seed)`, so the result depends on the seed and the set of queries, never
on their row order. Along the shuffled units, a unit goes to the split (fold) whose share of the
query count contains the unit's midpoint; ungrouped, each split's size is its fraction of the
queries rounded (off by less than one query); grouped, off by less than the largest group.
Folds use a second, independent shuffle.

Fold rotation follows GHRM's cross-validation: for rotation i of k folds, fold i is the test set,
fold (i+1) mod k the validation set and the other k-2 folds the training set (60/20/20 for k=5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from dagster_ir.schemas import QUERY_SPLITS

SPLITS = ("train/fusion", "train/model", "dev", "test")
ROLES = ("train", "validation", "test")


@dataclass(frozen=True)
class SplitConfig:
    """Fractions of the queries per split, the shuffle seed, the number of folds and the grouping.

    `group_by` names a column of the queries frame whose equal values must share split and fold.
    """

    train_fusion: float = 0.1
    train_model: float = 0.6
    dev: float = 0.1
    test: float = 0.2
    seed: int = 42
    folds: int = 5
    group_by: str | None = None

    def __post_init__(self) -> None:
        for name, value in zip(SPLITS, self.fractions, strict=True):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"SplitConfig: fraction of {name!r} must lie in [0, 1], got {value}")
        if not math.isclose(sum(self.fractions), 1.0, abs_tol=1e-9):
            raise ValueError(f"SplitConfig: fractions must sum to 1, got {sum(self.fractions)}")
        if self.folds < 3:
            raise ValueError(f"SplitConfig: folds must be at least 3 (test, validation, train), not {self.folds}")

    @property
    def fractions(self) -> tuple[float, float, float, float]:
        """Fractions in the order of SPLITS."""
        return (self.train_fusion, self.train_model, self.dev, self.test)


def split_queries(
    queries: pl.DataFrame, config: SplitConfig = SplitConfig(), groups: pl.Series | None = None
) -> pl.DataFrame:
    """QUERY_SPLITS frame (query_id, split, fold) in the row order of `queries`.

    `groups`, one key per query row, overrides `config.group_by`; with neither, queries are ungrouped.
    """
    keys = _group_keys(queries, config, groups)
    if queries["query_id"].is_duplicated().any():
        raise ValueError("split_queries: duplicate query_id in queries")
    units = pl.DataFrame({"key": keys}).group_by("key").len().sort("key")
    rng = np.random.default_rng(config.seed)
    sizes = units["len"].to_numpy()
    split_index = _assign(sizes, rng.permutation(len(units)), np.asarray(config.fractions))
    fold_index = _assign(sizes, rng.permutation(len(units)), np.full(config.folds, 1.0 / config.folds))
    table = units.select(
        "key",
        pl.Series("split", np.asarray(SPLITS)[split_index], dtype=pl.String),
        pl.Series("fold", fold_index, dtype=pl.Int32),
    )
    frame = pl.DataFrame({"query_id": queries["query_id"], "key": keys})
    return frame.join(table, on="key", how="left", maintain_order="left").select(*QUERY_SPLITS)


def split_query_ids(query_splits: pl.DataFrame, split: str, *, where: str) -> pl.Series:
    """The query ids of `split` ("all": every query); ValueError naming `where` when it selects none.

    A misspelt split must fail loudly: an empty selection would give an empty run, and a report
    leaves a method without runs out.
    """
    if split == "all":
        return query_splits["query_id"]
    chosen = query_splits.filter(pl.col("split") == split)["query_id"]
    if chosen.len() == 0:
        have = query_splits["split"].unique().sort().to_list()
        raise ValueError(f"{where}: no queries in split {split!r} (splits with queries: {have}, or 'all')")
    return chosen


def _group_keys(queries: pl.DataFrame, config: SplitConfig, groups: pl.Series | None) -> pl.Series:
    if groups is None and config.group_by is not None:
        if config.group_by not in queries.columns:
            have = queries.columns
            raise ValueError(f"SplitConfig.group_by: queries have no column {config.group_by!r} (have {have})")
        groups = queries[config.group_by]
    if groups is None:
        return queries["query_id"].rename("key")
    if len(groups) != queries.height:
        raise ValueError(f"split_queries: {len(groups)} group keys for {queries.height} queries")
    if groups.null_count():
        raise ValueError("split_queries: a query has no group (null group key)")
    return groups.cast(pl.String).rename("key")


def _assign(sizes: np.ndarray, order: np.ndarray, fractions: np.ndarray) -> np.ndarray:
    """Bucket of each unit: walking units in `order`, the bucket whose share holds the unit's midpoint."""
    shuffled = sizes[order]
    midpoints = np.cumsum(shuffled) - shuffled / 2.0
    bounds = np.cumsum(fractions) * sizes.sum()
    bucket_in_order = np.minimum(np.searchsorted(bounds, midpoints, side="right"), len(fractions) - 1)
    bucket = np.empty(len(sizes), dtype=np.int64)
    bucket[order] = bucket_in_order
    return bucket


def fold_roles(k: int, i: int) -> dict[str, list[int]]:
    """Folds per role in rotation `i` of `k`: test = i, validation = i+1 mod k, train = the rest."""
    if k < 3:
        raise ValueError(f"fold_roles: need at least 3 folds, got {k}")
    if not 0 <= i < k:
        raise ValueError(f"fold_roles: rotation {i} outside 0..{k - 1}")
    test, validation = i, (i + 1) % k
    train = [fold for fold in range(k) if fold not in (test, validation)]
    return {"train": train, "validation": [validation], "test": [test]}


def fold_assignment(splits: pl.DataFrame, i: int, *, folds: int | None = None) -> pl.DataFrame:
    """(query_id, role) for rotation `i`; `folds` defaults to the largest fold in `splits` plus one."""
    k = folds if folds is not None else int(splits["fold"].max()) + 1
    role_of = {fold: role for role, members in fold_roles(k, i).items() for fold in members}
    roles = pl.DataFrame(
        {"fold": list(role_of), "role": list(role_of.values())}, schema={"fold": pl.Int32, "role": pl.String}
    )
    return splits.join(roles, on="fold", how="left", maintain_order="left").select("query_id", "role")
