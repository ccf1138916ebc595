"""Report pieces of the CET lab: a table shaped like the paper's Table 1, and the tau sensitivity plot.

`table1(per_query, ...)` takes per-query values (PER_QUERY_EVAL rows, e.g. from
`dagster_ir.evaluation.evaluate_run` of the lab's runs against the *dense* judgments) and returns one
row per (system, measure): the mean, and a paired two-sided t-test (`compare_to_baseline`) against
the naive ranker and against the best baseline - the baseline among zhan / rocketqa / rance with
the highest mean on the first measure (the paper compares CET with its two strongest baselines).
`Table1.to_markdown()` renders it like the paper: "retriever + ranker" rows, MRR@10, MRR@100,
nDCG@10, nDCG@100 columns, the best value per column in bold, † marking a significant improvement
over naive and ‡ over the best baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from dagster_ir.evaluation import SignificanceConfig, aggregate, compare_to_baseline
from dagster_ir.schemas import PER_QUERY_EVAL, validate

TABLE1_MEASURES: tuple[str, ...] = ("RR@10", "RR@100", "nDCG@10", "nDCG@100")
BASELINES: tuple[str, ...] = ("zhan", "rocketqa", "rance")
MEASURE_LABELS = {"RR@10": "MRR@10", "RR@100": "MRR@100", "nDCG@10": "NDCG@10", "nDCG@100": "NDCG@100"}
OVER_NAIVE, OVER_BEST = "†", "‡"

TABLE1_SCHEMA: dict[str, pl.DataType] = {
    "system": pl.String,  # "dense + cet"; the retriever's own run is just "dense"
    "run_name": pl.String,
    "measure": pl.String,
    "mean": pl.Float64,
    "p_naive": pl.Float64,  # paired t-test against naive (null for naive itself)
    "better_than_naive": pl.Boolean,  # significant and higher
    "p_best": pl.Float64,  # against the best baseline (null for it, or without baselines)
    "better_than_best": pl.Boolean,
}


@dataclass(frozen=True)
class Table1:
    """The table (TABLE1_SCHEMA rows) and what it was compared with."""

    frame: pl.DataFrame
    naive: str
    best_baseline: str | None
    measures: tuple[str, ...]
    config: SignificanceConfig

    def to_markdown(self, decimals: int = 4) -> str:
        """Rows "retriever + ranker", a column per measure; bold best, † / ‡ significant improvements."""
        best = self.frame.group_by("measure").agg(pl.col("mean").round(decimals).max()).rows()
        best_of = dict(best)
        header = ["Method", *(MEASURE_LABELS.get(m, m) for m in self.measures)]
        lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * len(self.measures)]
        for system in self.frame["system"].unique(maintain_order=True).to_list():
            cells = [system]
            for measure in self.measures:
                row = self.frame.filter((pl.col("system") == system) & (pl.col("measure") == measure)).row(0, named=True)
                text = f"{row['mean']:.{decimals}f}"
                text = f"**{text}**" if round(row["mean"], decimals) == best_of[measure] else text
                marks = (OVER_NAIVE if row["better_than_naive"] else "") + (OVER_BEST if row["better_than_best"] else "")
                cells.append(text + marks)
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n\n" + self.caption()

    def caption(self) -> str:
        best = f"the best baseline ({self.best_baseline})" if self.best_baseline else "the best baseline (none run)"
        return (f"{OVER_NAIVE} / {OVER_BEST}: significant improvement over {self.naive} / over {best} "
                f"(paired two-sided t-test, p < {self.config.alpha:g}, {self.config.correction} correction). "
                "Best value per column in bold.")


def best_baseline(per_query: pl.DataFrame, measure: str, baselines: Sequence[str] = BASELINES) -> str | None:
    """The baseline run with the highest mean `measure` (None when none of them is present)."""
    means = aggregate(per_query).filter(pl.col("measure") == measure)
    present = means.filter(pl.col("run_name").is_in(list(baselines)))
    if present.height == 0:
        return None
    return present.sort(["mean", "run_name"], descending=[True, False])["run_name"][0]


def table1(
    per_query: pl.DataFrame,
    runs: Sequence[str] | None = None,
    *,
    retriever: str = "dense",
    naive: str = "naive",
    baselines: Sequence[str] = BASELINES,
    measures: Sequence[str] = TABLE1_MEASURES,
    config: SignificanceConfig = SignificanceConfig(),
) -> Table1:
    """The Table-1-shaped comparison of `runs` (default: every run of `per_query`, in order)."""
    validate(per_query, PER_QUERY_EVAL, "per-query evaluation")
    runs = list(runs) if runs is not None else per_query["run_name"].unique(maintain_order=True).to_list()
    missing = [r for r in [naive, *runs] if r not in set(per_query["run_name"].to_list())]
    if missing:
        raise ValueError(f"table1: runs {missing} are not in the per-query table")
    chosen = per_query.filter(pl.col("run_name").is_in([naive, *runs]) & pl.col("measure").is_in(list(measures)))
    best = best_baseline(chosen, measures[0], baselines)
    against_naive = _against(chosen, naive, measures, config)
    against_best = _against(chosen, best, measures, config) if best else None
    rows = []
    for run in runs:
        for measure in measures:
            vs_naive = against_naive[run, measure]
            vs_best = against_best[run, measure] if against_best else (None, False)
            mean = float(chosen.filter((pl.col("run_name") == run) & (pl.col("measure") == measure))["value"].mean())
            system = retriever if run == retriever else f"{retriever} + {run}"  # the retriever alone
            rows.append((system, run, measure, mean, *vs_naive, *vs_best))
    return Table1(pl.DataFrame(rows, schema=TABLE1_SCHEMA, orient="row"), naive, best, tuple(measures), config)


def _against(
    per_query: pl.DataFrame, baseline: str, measures: Sequence[str], config: SignificanceConfig
) -> dict[tuple[str, str], tuple[float | None, bool]]:
    """(run, measure) -> (p-value, significantly better) against `baseline`."""
    comparison = compare_to_baseline(per_query, baseline, list(measures), config)
    return {
        (row["run_name"], row["measure"]): (row["p_adjusted"], bool(row["significant"]) and (row["delta"] or 0) > 0)
        for row in comparison.iter_rows(named=True)
    }


def tau_sensitivity_plot(
    per_query: pl.DataFrame,
    taus: Mapping[str, float],
    measure: str = "RR@10",
    references: Sequence[str] = ("naive",),
) -> Figure:
    """Mean `measure` of each CET run against its tau (`taus`: run name -> tau), log-2 x axis, with
    dashed horizontal lines for the `references` runs (the paper's Figure 4, left)."""
    validate(per_query, PER_QUERY_EVAL, "per-query evaluation")
    means = dict(aggregate(per_query).filter(pl.col("measure") == measure).select("run_name", "mean").iter_rows())
    absent = [run for run in [*taus, *references] if run not in means]
    if absent:
        raise ValueError(f"tau_sensitivity_plot: no {measure} values for runs {absent}")
    if not taus:
        raise ValueError("tau_sensitivity_plot: no CET runs given")
    points = sorted((tau, means[run]) for run, tau in taus.items())
    fig = Figure(figsize=(5, 3.5), layout="constrained")
    ax = fig.subplots()
    x, y = np.array(points).T
    ax.plot(x, y, marker="o", color="#4f6fad", label="cet")
    for i, run in enumerate(references):
        ax.axhline(means[run], linestyle="--", color=f"C{i + 1}", label=run)
    ax.set_xscale("log", base=2)
    ax.set_xticks(x, [f"{t:g}" for t in x])
    ax.set_xlabel("tau")
    ax.set_ylabel(f"mean {MEASURE_LABELS.get(measure, measure)}")
    ax.set_title(f"CET: sensitivity to tau ({measure})")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    return fig


def cet_taus(manifest: pl.DataFrame) -> dict[str, float]:
    """Run name -> tau of the CET rankers of a lab manifest (`cet_lab.manifest`)."""
    rows = manifest.filter(pl.col("method") == "cet").select("run_name", "tau")
    return dict(rows.iter_rows())


def training_curves_plot(curves: Mapping[str, Sequence[float]], ylabel: str = "training loss", smooth: int = 5) -> Figure:
    """One line per ranker of a per-step training curve, as a moving average over `smooth` steps."""
    fig = Figure(figsize=(6, 3.5), layout="constrained")
    ax = fig.subplots()
    for name, values in curves.items():
        values = np.asarray(values, dtype=float)
        if values.size == 0:
            continue
        window = max(1, min(smooth, values.size))
        averaged = np.convolve(values, np.ones(window) / window, mode="valid")
        ax.plot(np.arange(window, values.size + 1), averaged, label=name)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if curves:
        ax.legend(loc="best")
    return fig
