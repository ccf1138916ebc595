"""Significance against a baseline run: paired t-tests and bootstrap confidence intervals.

For each measure and each run other than the baseline:

* a paired, two-sided t-test (`scipy.stats.ttest_rel`) of the run's per-query values against the
  baseline's, on the queries both were evaluated on; the p-value may be corrected for the several
  runs compared with the one baseline (`correction`: ``"none"``, ``"bonferroni"`` or ``"holm"``; the
  family is the runs of one measure, i.e. one column of the results table);
* a percentile bootstrap confidence interval of the mean of the run (over its own queries) and of
  the mean difference from the baseline (over the common queries): queries are resampled with
  replacement `n_resamples` times from a generator seeded with `seed`, so intervals are repeatable.

A t-test is undefined when a run equals the baseline on every query or fewer than two queries are
shared: its p-value is then NaN (null in the comparison table) and the run is not marked
significant. Otherwise the values are scipy's, including t = ±inf, p = 0 for a constant non-zero
difference.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import polars as pl
import polars.selectors as cs

from dagster_ir.lazy import lazy_module
from dagster_ir.schemas import COMPARISON_EVAL, PER_QUERY_EVAL, validate

if TYPE_CHECKING:
    import scipy.stats as stats
else:
    stats = lazy_module("scipy.stats")

Correction = Literal["none", "bonferroni", "holm"]

# Elements of one block of resamples (rows x queries): each array of a block stays under ~64 MB.
_BLOCK_ELEMENTS = 1 << 23


@dataclass(frozen=True)
class SignificanceConfig:
    """How runs are compared with the baseline; see the module docstring."""

    alpha: float = 0.05
    correction: Correction = "none"
    n_resamples: int = 10_000
    confidence: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.correction not in ("none", "bonferroni", "holm"):
            raise ValueError(f"correction must be none, bonferroni or holm, got {self.correction!r}")
        if self.n_resamples < 1:
            raise ValueError(f"n_resamples must be >= 1, got {self.n_resamples}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")


def paired_ttest(values: np.ndarray, baseline: np.ndarray) -> tuple[float, float]:
    """(t statistic, two-sided p-value) of a paired t-test; NaN, NaN where the test is undefined."""
    values, baseline = np.asarray(values, float), np.asarray(baseline, float)
    if values.shape != baseline.shape:
        raise ValueError(f"paired vectors differ in shape: {values.shape} vs {baseline.shape}")
    if values.size < 2 or np.array_equal(values, baseline):
        return float("nan"), float("nan")
    result = stats.ttest_rel(values, baseline)
    return float(result.statistic), float(result.pvalue)


def adjust_p_values(p_values: np.ndarray, correction: Correction) -> np.ndarray:
    """Correct a family of p-values (Bonferroni or Holm's step-down); NaNs stay NaN, out of the family."""
    p = np.asarray(p_values, float)
    if correction == "none":
        return p.copy()
    adjusted = np.full_like(p, np.nan)
    tested = np.flatnonzero(~np.isnan(p))
    m = tested.size
    if correction == "bonferroni":
        adjusted[tested] = np.minimum(1.0, p[tested] * m)
    elif correction == "holm":
        order = tested[np.argsort(p[tested], kind="stable")]
        stepped = np.maximum.accumulate(p[order] * (m - np.arange(m)))
        adjusted[order] = np.minimum(1.0, stepped)
    else:
        raise ValueError(f"unknown correction {correction!r}")
    return adjusted


def bootstrap_ci(
    values: np.ndarray, *, n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float] | tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean of each column of `values` (queries x columns).

    All columns share the same resamples of the queries, so a 1-D vector gives the same interval
    alone as stacked with others. Returns (low, high), each of shape (columns,) (scalars for 1-D).
    """
    matrix = np.asarray(values, float)
    vector = matrix.ndim == 1
    matrix = matrix[:, None] if vector else matrix
    n = matrix.shape[0]
    if n == 0:
        raise ValueError("bootstrap of an empty vector")
    rng = np.random.default_rng(seed)
    means = np.empty((n_resamples, matrix.shape[1]))
    block = max(1, _BLOCK_ELEMENTS // n)
    for start in range(0, n_resamples, block):
        rows = min(block, n_resamples - start)
        means[start : start + rows] = _resample_counts(rng, rows, n) @ matrix / n
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail], axis=0)
    return (float(low[0]), float(high[0])) if vector else (low, high)


def _resample_counts(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    """How often each of `n` queries is drawn in each of `rows` resamples with replacement."""
    draws = rng.integers(0, n, size=(rows, n))
    flat = (draws + np.arange(rows)[:, None] * n).ravel()
    return np.bincount(flat, minlength=rows * n).reshape(rows, n).astype(float)


def compare_to_baseline(
    per_query: pl.DataFrame,
    baseline: str,
    measures: list[str] | None = None,
    config: SignificanceConfig = SignificanceConfig(),
) -> pl.DataFrame:
    """One COMPARISON_EVAL row per (run, measure): mean and CI, difference from `baseline`, test result.

    Runs keep their order of first appearance with the baseline first; measures keep the order
    given (default: order of first appearance). The baseline's own row has delta 0 and no test;
    statistics that do not apply or are undefined (a NaN p-value, see the module docstring) are null.
    """
    validate(per_query, PER_QUERY_EVAL, "per-query evaluation")
    _check_unique(per_query)
    runs = _runs(per_query, baseline)
    measures = _measures(per_query, measures)
    vectors = [_MeasureVectors.from_wide(_wide(per_query, measure, runs)) for measure in measures]
    # one bootstrap for all vectors of a length: the resampling is drawn once, not per measure
    intervals = iter(_grouped_ci([v for mv in vectors for v in (*mv.own, *mv.differences)], config))
    rows = []
    for measure, mv in zip(measures, vectors):
        mean_ci = [next(intervals) for _ in runs]
        delta_ci = [next(intervals) for _ in runs]
        rows.extend(_measure_rows(measure, runs, mv, mean_ci, delta_ci, config))
    return pl.DataFrame(rows, schema=COMPARISON_EVAL).with_columns(cs.float().fill_nan(None))


@dataclass(frozen=True)
class _MeasureVectors:
    """One measure's values per run (over its own queries) and paired with the baseline (run 0)."""

    own: list[np.ndarray]
    pairs: list[tuple[np.ndarray, np.ndarray]]  # (run, baseline) on the queries both have

    @classmethod
    def from_wide(cls, wide: np.ndarray) -> _MeasureVectors:
        own = [column[~np.isnan(column)] for column in wide.T]
        return cls(own, [_common_queries(column, wide[:, 0]) for column in wide.T])

    @property
    def differences(self) -> list[np.ndarray]:
        return [values - base for values, base in self.pairs]


def _check_unique(per_query: pl.DataFrame) -> None:
    key = ["run_name", "query_id", "measure"]
    if per_query.select(key).n_unique() == per_query.height:
        return
    first = per_query.filter(pl.struct(key).is_duplicated()).select(key).row(0, named=True)
    raise ValueError(f"per-query evaluation: more than one value for {first}")


def _runs(per_query: pl.DataFrame, baseline: str) -> list[str]:
    runs = per_query["run_name"].unique(maintain_order=True).to_list()
    if baseline not in runs:
        raise ValueError(f"baseline run {baseline!r} not in the per-query table (runs: {runs})")
    return [baseline] + [run for run in runs if run != baseline]


def _measures(per_query: pl.DataFrame, measures: list[str] | None) -> list[str]:
    present = per_query["measure"].unique(maintain_order=True).to_list()
    if measures is None:
        return present
    missing = [m for m in measures if m not in present]
    if missing:
        raise ValueError(f"measures {missing} not in the per-query table (measures: {present})")
    return list(measures)


def _wide(per_query: pl.DataFrame, measure: str, runs: list[str]) -> np.ndarray:
    """Queries x runs matrix of one measure's values, NaN where a run lacks a query."""
    table = per_query.filter(pl.col("measure") == measure).pivot(
        on="run_name", index="query_id", values="value", aggregate_function=None
    )
    for run in runs:
        if run not in table.columns:
            table = table.with_columns(pl.lit(None, pl.Float64).alias(run))
    return table.select(runs).to_numpy().astype(float)


def _measure_rows(
    measure: str,
    runs: list[str],
    vectors: _MeasureVectors,
    mean_ci: list[tuple[float, float]],
    delta_ci: list[tuple[float, float]],
    config: SignificanceConfig,
) -> list[dict[str, object]]:
    """COMPARISON_EVAL rows of one measure; run 0 is the baseline."""
    tests = [(np.nan, np.nan)] + [paired_ttest(values, base) for values, base in vectors.pairs[1:]]
    p_values = np.array([p for _, p in tests])
    adjusted = np.concatenate([[np.nan], adjust_p_values(p_values[1:], config.correction)])
    differences = vectors.differences
    return [
        {
            "run_name": run,
            "measure": measure,
            "n_queries": vectors.own[i].size,
            "mean": _mean(vectors.own[i]),
            "ci_low": mean_ci[i][0],
            "ci_high": mean_ci[i][1],
            "n_common": differences[i].size,
            "delta": _mean(differences[i]),
            "delta_ci_low": delta_ci[i][0] if i else np.nan,
            "delta_ci_high": delta_ci[i][1] if i else np.nan,
            "t_statistic": tests[i][0],
            "p_value": p_values[i],
            "p_adjusted": adjusted[i],
            "significant": bool(adjusted[i] < config.alpha),
        }
        for i, run in enumerate(runs)
    ]


def _common_queries(values: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    shared = ~np.isnan(values) & ~np.isnan(base)
    return values[shared], base[shared]


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if values.size else float("nan")


def _grouped_ci(vectors: list[np.ndarray], config: SignificanceConfig) -> list[tuple[float, float]]:
    """Bootstrap intervals of many vectors, one bootstrap per distinct length (shared resamples)."""
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, vector in enumerate(vectors):
        by_length[vector.size].append(i)
    intervals: list[tuple[float, float]] = [(np.nan, np.nan)] * len(vectors)
    for length, members in by_length.items():
        if length == 0:
            continue
        low, high = bootstrap_ci(
            np.column_stack([vectors[i] for i in members]),
            n_resamples=config.n_resamples,
            confidence=config.confidence,
            seed=config.seed,
        )
        for j, i in enumerate(members):
            intervals[i] = (float(low[j]), float(high[j]))
    return intervals
