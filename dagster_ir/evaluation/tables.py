"""The tables of a report as plain data, shaped like the results tables of IR papers.

`results_table`: one row per run (baseline first), one column per measure; a cell knows its value,
whether it is the best of its column and whether it differs significantly from the baseline.
`interval_table` and `difference_table` hold the confidence intervals and tests behind it.
Renderers (Markdown, HTML, terminal) only decide how a cell looks.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from dagster_ir.evaluation.significance import SignificanceConfig

SIGNIFICANT = "†"


@dataclass(frozen=True)
class Cell:
    """One measure of one run: display text plus what decorates it."""

    text: str
    best: bool = False
    significant: bool = False
    detail: str = ""  # CI, difference and p-value, for a tooltip


@dataclass(frozen=True)
class Table:
    """A caption, column headers (the first names the row label) and rows of (label, cells)."""

    caption: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, tuple[Cell, ...]], ...]


def results_table(
    comparison: pl.DataFrame, baseline: str, measures: list[str], config: SignificanceConfig, decimals: int
) -> Table:
    """Means per run and measure; best of each column marked, significance vs `baseline` marked."""
    runs = comparison["run_name"].unique(maintain_order=True).to_list()
    best = _best_per_measure(comparison, decimals)
    rows = []
    for run in runs:
        cells = []
        for measure in measures:
            row = _row(comparison, run, measure)
            text = _number(row["mean"], decimals)
            cells.append(
                Cell(
                    text=text,
                    best=row["mean"] is not None and round(row["mean"], decimals) == best[measure],
                    significant=bool(row["significant"]),
                    detail=_detail(row, run == baseline, config, decimals),
                )
            )
        rows.append((_label(run, baseline), tuple(cells)))
    return Table(_results_caption(comparison, baseline, config), ("Run", *measures), tuple(rows))


def interval_table(
    comparison: pl.DataFrame, baseline: str, measures: list[str], config: SignificanceConfig, decimals: int
) -> Table:
    """Each mean with its bootstrap confidence interval."""
    rows = []
    for run in comparison["run_name"].unique(maintain_order=True).to_list():
        cells = tuple(
            Cell(_with_interval(row["mean"], row["ci_low"], row["ci_high"], decimals, signed=False))
            for row in (_row(comparison, run, measure) for measure in measures)
        )
        rows.append((_label(run, baseline), cells))
    caption = (
        f"Mean and {_percent(config.confidence)} confidence interval (percentile bootstrap over "
        f"queries, {config.n_resamples:,} resamples, seed {config.seed})."
    )
    return Table(caption, ("Run", *measures), tuple(rows))


def difference_table(
    comparison: pl.DataFrame, baseline: str, measures: list[str], config: SignificanceConfig, decimals: int
) -> Table:
    """Mean difference from the baseline with its interval and p-value, one row per other run."""
    rows = []
    for run in comparison["run_name"].unique(maintain_order=True).to_list():
        if run == baseline:
            continue
        cells = []
        for measure in measures:
            row = _row(comparison, run, measure)
            interval = _with_interval(row["delta"], row["delta_ci_low"], row["delta_ci_high"], decimals, True)
            cells.append(Cell(f"{interval}, {_p(row['p_adjusted'])}", significant=bool(row["significant"])))
        rows.append((run, tuple(cells)))
    adjusted = "" if config.correction == "none" else f" ({config.correction.title()}-adjusted)"
    caption = (
        f"Difference from {baseline}: mean of per-query differences, {_percent(config.confidence)} "
        f"bootstrap confidence interval, paired two-sided t-test p-value{adjusted}."
    )
    return Table(caption, ("Run", *measures), tuple(rows))


def seed_table(spread: pl.DataFrame, runs: list[str], baseline: str, measures: list[str], decimals: int) -> Table:
    """Per run and measure, the mean over seeds of the per-seed means, +- their sample sd, and the
    number of seeds (SEED_SPREAD rows of `dagster_ir.evaluation.seeds`)."""
    rows = []
    for run in runs:
        cells = []
        for measure in measures:
            found = spread.filter((pl.col("run_name") == run) & (pl.col("measure") == measure))
            if found.height == 0:
                cells.append(Cell("n/a"))
                continue
            row = found.row(0, named=True)
            sd = "" if row["sd"] is None else f" ± {row['sd']:.{decimals}f}"
            cells.append(
                Cell(
                    f"{_number(row['mean'], decimals)}{sd} ({row['seeds']})",
                    detail=f"min {_number(row['min'], decimals)}, max {_number(row['max'], decimals)}",
                )
            )
        rows.append((_label(run, baseline), tuple(cells)))
    caption = (
        "Mean over seeds of each seed's mean, ± the sample standard deviation over seeds (number of "
        "seeds); a run trained once per seed varies with the seed, an untrained run does not. "
        "The tests above compare per-query values averaged over seeds."
    )
    return Table(caption, ("Run", *measures), tuple(rows))


def _row(comparison: pl.DataFrame, run: str, measure: str) -> dict:
    rows = comparison.filter((pl.col("run_name") == run) & (pl.col("measure") == measure))
    if rows.height != 1:
        raise ValueError(f"comparison has {rows.height} rows for run {run!r}, measure {measure!r}")
    return rows.row(0, named=True)


def _best_per_measure(comparison: pl.DataFrame, decimals: int) -> dict[str, float | None]:
    """Highest displayed mean per measure (all our measures are higher-is-better)."""
    best = comparison.group_by("measure").agg(pl.col("mean").round(decimals).max())
    return dict(best.iter_rows())


def _results_caption(comparison: pl.DataFrame, baseline: str, config: SignificanceConfig) -> str:
    counts = comparison["n_queries"].unique().sort().to_list()
    queries = f"{counts[0]:,} queries" if len(counts) == 1 else f"{counts[0]:,}-{counts[-1]:,} queries"
    family = comparison["run_name"].n_unique() - 1
    correction = (
        ""
        if config.correction == "none"
        else f", {config.correction.title()}-corrected for the {family} runs compared per measure"
    )
    return (
        f"Mean over {queries}. {SIGNIFICANT} marks a significant "
        f"difference from the baseline {baseline} (paired two-sided t-test, p < {config.alpha:g}"
        f"{correction})."
    )


def _detail(row: dict, is_baseline: bool, config: SignificanceConfig, decimals: int) -> str:
    interval = f"{_percent(config.confidence)} CI {_interval(row['ci_low'], row['ci_high'], decimals, False)}"
    if is_baseline:
        return f"{interval}; baseline"
    delta = _with_interval(row["delta"], row["delta_ci_low"], row["delta_ci_high"], decimals, True)
    return f"{interval}; difference {delta}; {_p(row['p_adjusted'])}"


def _label(run: str, baseline: str) -> str:
    return f"{run} (baseline)" if run == baseline else run


def _with_interval(value: float | None, low: float | None, high: float | None, decimals: int, signed: bool) -> str:
    return f"{_number(value, decimals, signed)} {_interval(low, high, decimals, signed)}"


def _interval(low: float | None, high: float | None, decimals: int, signed: bool) -> str:
    return f"[{_number(low, decimals, signed)}, {_number(high, decimals, signed)}]"


def _number(value: float | None, decimals: int, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.{decimals}f}" if signed else f"{value:.{decimals}f}"


def _p(p: float | None) -> str:
    """``p=0.0123``, ``p<0.0001`` or ``p=n/a``."""
    if p is None:
        return "p=n/a"
    return "p<0.0001" if p < 1e-4 else f"p={p:.4f}"


def _percent(confidence: float) -> str:
    return f"{confidence * 100:g}%"
