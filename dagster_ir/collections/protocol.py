"""The evaluation protocol of trained methods: training units (collection, fold, seed) and their queries.

A collection's `protocol` says how a trained method meets its queries:

- `fixed`: one model per seed, trained on `train/model`, its checkpoint (and any hyperparameter)
  chosen on `dev`, fusion weights learned on `train/fusion`, scored on `test`. For collections
  large enough to spare a fixed split (wiki-car).
- `cv`: k-fold cross-validation (k = `split.folds`), rotated as GHRM does: in rotation i fold i is
  the test fold, fold i+1 mod k the validation fold and the other k-2 folds the training folds
  (60/20/20 for k = 5). Checkpoints, hyperparameters and fusion weights are chosen on the
  validation fold. Each query is scored by the one model whose test fold held it, so a run merged
  over the k rotations covers every query, and no model has seen the queries it scores.

A *training unit* is one model to train: (collection, fold, seed); its key names a partition of
every trained asset (`<collection>/seed-<s>` under `fixed`, `<collection>/fold-<i>/seed-<s>` under
`cv`; collection names never hold "/", so a unit key is never a collection key). `unit_queries`
gives a unit's query ids per role.

Seeds are offsets: seed s adds s to every seed of a method's settings (`offset_seeds`): the
training seed, sampling seeds, the fusion restarts' seed. Seed 0 is the configuration as given, so
a single-seed run reproduces the unseeded pipeline exactly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import polars as pl

from dagster_ir.collections.splits import fold_roles
from dagster_ir.schemas import QUERY_SPLITS, validate

ProtocolKind = Literal["fixed", "cv"]
PROTOCOLS: tuple[str, ...] = ("fixed", "cv")
T = TypeVar("T")


@dataclass(frozen=True)
class Protocol:
    """How trained methods are evaluated on a collection: `kind` ("fixed" | "cv") and the seeds."""

    kind: ProtocolKind = "cv"
    seeds: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        if self.kind not in PROTOCOLS:
            raise ValueError(f"Protocol.kind must be one of {list(PROTOCOLS)}, got {self.kind!r}")
        if not self.seeds:
            raise ValueError("Protocol.seeds: give at least one seed")
        if any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in self.seeds):
            raise ValueError(f"Protocol.seeds must be non-negative integers, got {list(self.seeds)}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"Protocol.seeds: a seed is listed twice in {list(self.seeds)}")


@dataclass(frozen=True)
class TrainingUnit:
    """One model to train: a collection, a rotation (`fold`, None under a fixed split) and a seed."""

    collection: str
    protocol: ProtocolKind
    fold: int | None
    folds: int
    seed: int

    @property
    def key(self) -> str:
        """The partition key: `<collection>/seed-<s>` or `<collection>/fold-<i>/seed-<s>`."""
        if self.fold is None:
            return f"{self.collection}/seed-{self.seed}"
        return f"{self.collection}/fold-{self.fold}/seed-{self.seed}"


def training_units(collection: str, protocol: Protocol, folds: int) -> list[TrainingUnit]:
    """The units of one collection: one per seed under `fixed`, one per (fold, seed) under `cv`."""
    if "/" in collection:
        raise ValueError(f"training_units: a collection name cannot hold '/': {collection!r}")
    if protocol.kind == "fixed":
        return [TrainingUnit(collection, "fixed", None, folds, seed) for seed in protocol.seeds]
    fold_roles(folds, 0)  # at least 3 folds
    return [TrainingUnit(collection, "cv", fold, folds, seed) for fold in range(folds) for seed in protocol.seeds]


@dataclass(frozen=True)
class UnitQueries:
    """A unit's query ids by role: what it trains on, where it chooses, what it scores."""

    train: list[str]  # model training (fixed: train/model; cv: the k-2 training folds)
    validation: list[str]  # checkpoint and hyperparameter choice (fixed: dev; cv: the validation fold)
    fusion: list[str]  # learned fusion weights (fixed: train/fusion; cv: the validation fold)
    test: list[str]  # the queries the unit's model scores for the report (fixed: test; cv: the test fold)

    def of(self, role: str) -> list[str]:
        """The ids of a role by name ("train", "validation", "fusion", "test")."""
        if role not in ("train", "validation", "fusion", "test"):
            raise ValueError(f"UnitQueries: unknown role {role!r} (train, validation, fusion, test)")
        return getattr(self, role)


def unit_queries(splits: pl.DataFrame, unit: TrainingUnit) -> UnitQueries:
    """The query ids of each role of `unit`, from the collection's QUERY_SPLITS frame (sorted)."""
    validate(splits, QUERY_SPLITS, "query_splits")
    if unit.protocol == "fixed":
        by_split = {
            name: _sorted(splits.filter(pl.col("split") == name))
            for name in ("train/model", "dev", "train/fusion", "test")
        }
        return UnitQueries(by_split["train/model"], by_split["dev"], by_split["train/fusion"], by_split["test"])
    seen = int(splits["fold"].max()) + 1 if splits.height else 0
    if seen > unit.folds:
        raise ValueError(f"unit_queries: query_splits hold fold {seen - 1} but {unit.key} rotates {unit.folds} folds")
    roles = fold_roles(unit.folds, unit.fold)
    members = {role: _sorted(splits.filter(pl.col("fold").is_in(folds))) for role, folds in roles.items()}
    return UnitQueries(members["train"], members["validation"], members["validation"], members["test"])


def report_query_ids(splits: pl.DataFrame, protocol: ProtocolKind) -> list[str]:
    """The queries a report scores: the `test` split (fixed) or, under cv, every query (each is in
    exactly one test fold)."""
    validate(splits, QUERY_SPLITS, "query_splits")
    chosen = splits if protocol == "cv" else splits.filter(pl.col("split") == "test")
    return _sorted(chosen)


def _sorted(frame: pl.DataFrame) -> list[str]:
    return frame["query_id"].sort().to_list()


def offset_seeds(config: T, offset: int) -> T:
    """`config` (a dataclass, nested ones included) with every int field named `seed` or `*_seed`
    shifted by `offset`; offset 0 returns `config` itself."""
    if offset == 0:
        return config
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"offset_seeds: expected a dataclass instance, got {type(config).__name__}")
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if _is_seed(field.name) and isinstance(value, int) and not isinstance(value, bool):
            changes[field.name] = value + offset
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes[field.name] = offset_seeds(value, offset)
    return dataclasses.replace(config, **changes)


def _is_seed(name: str) -> bool:
    return name == "seed" or name.endswith("_seed")


UNIT_COLUMNS = {"fold": pl.Int32, "seed": pl.Int64}


def tag_unit(frame: pl.DataFrame, unit: TrainingUnit) -> pl.DataFrame:
    """`frame` with the unit's `fold` (null under a fixed split) and `seed` as columns (replaced if
    present), so outputs merged over units still say which model produced each row."""
    return frame.with_columns(fold=pl.lit(unit.fold, dtype=pl.Int32), seed=pl.lit(unit.seed, dtype=pl.Int64))
