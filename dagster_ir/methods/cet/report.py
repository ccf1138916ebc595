"""Report pieces of the CET lab: a table shaped like the paper's Table 1, and the tau sensitivity plot.

`table1(per_query, ...)` takes per-query values (PER_QUERY_EVAL rows, e.g. from
`dagster_ir.evaluation.evaluate_run` of the lab's runs against the *dense* judgments) and returns one
row per (system, measure): the mean, and a paired two-sided t-test (`compare_to_baseline`) against
the reference (DML, as the paper's Table 1 marks †) and against the best baseline (‡). The paper's
‡ is RANCE, its strongest baseline on its test sets; we choose the best baseline on **dev**, never
on the reported split: `dev_best_baseline(manifest)` takes the lab's baseline (naive, zhan,
rocketqa, rance, dml) with the highest dev MRR@10. `Table1.to_markdown()` renders it like the
paper: "retriever + ranker" rows, MRR@10, MRR@100, nDCG@10, nDCG@100 columns, the best value per
column in bold. `sweeps_plot(manifest)` is Figure 4: dev MRR@10 against tau (CET) and eta
(RocketQA), the chosen values ringed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dagster_ir.evaluation import SignificanceConfig, aggregate, compare_to_baseline
from dagster_ir.lazy import lazy_module
from dagster_ir.schemas import PER_QUERY_EVAL, Schema, validate

if TYPE_CHECKING:
    from matplotlib.figure import Figure

if TYPE_CHECKING:
    import matplotlib.figure as mpl_figure
else:
    mpl_figure = lazy_module("matplotlib.figure")

TABLE1_MEASURES: tuple[str, ...] = ("RR@10", "RR@100", "nDCG@10", "nDCG@100")
DEFAULT_SIGNIFICANCE = SignificanceConfig()
BASELINES: tuple[str, ...] = ("naive", "zhan", "rocketqa", "rance", "dml")  # candidates for the best baseline
MEASURE_LABELS = {"RR@10": "MRR@10", "RR@100": "MRR@100", "nDCG@10": "NDCG@10", "nDCG@100": "NDCG@100"}
OVER_REFERENCE, OVER_BEST = "†", "‡"

TABLE1_SCHEMA: Schema = {
    "system": pl.String,  # "dense + cet"; the retriever's own run is just "dense"
    "run_name": pl.String,
    "measure": pl.String,
    "mean": pl.Float64,
    "p_reference": pl.Float64,  # paired t-test against the reference, dml (null for it)
    "better_than_reference": pl.Boolean,  # significant and higher
    "p_best": pl.Float64,  # against the best baseline chosen on dev (null for it, or without one)
    "better_than_best": pl.Boolean,
}


@dataclass(frozen=True)
class Table1:
    """The table (TABLE1_SCHEMA rows) and what it was compared with."""

    frame: pl.DataFrame
    reference: str
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
                row = self.frame.filter((pl.col("system") == system) & (pl.col("measure") == measure)).row(
                    0, named=True
                )
                text = f"{row['mean']:.{decimals}f}"
                text = f"**{text}**" if round(row["mean"], decimals) == best_of[measure] else text
                marks = (OVER_REFERENCE if row["better_than_reference"] else "") + (
                    OVER_BEST if row["better_than_best"] else ""
                )
                cells.append(text + marks)
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n\n" + self.caption()

    def caption(self) -> str:
        best = (
            f"the best baseline on dev ({self.best_baseline})"
            if self.best_baseline
            else "the best baseline (none chosen)"
        )
        return (
            f"{OVER_REFERENCE} / {OVER_BEST}: significant improvement over {self.reference} / over {best} "
            f"(paired two-sided t-test, p < {self.config.alpha:g}, {self.config.correction} correction). "
            "Best value per column in bold."
        )


def best_baseline(per_query: pl.DataFrame, measure: str, baselines: Sequence[str] = BASELINES) -> str | None:
    """The baseline run with the highest mean `measure` (None when none of them is present). Give it
    dev values only: the report's choice is `dev_best_baseline`."""
    means = aggregate(per_query).filter(pl.col("measure") == measure)
    present = means.filter(pl.col("run_name").is_in(list(baselines)))
    if present.height == 0:
        return None
    return present.sort(["mean", "run_name"], descending=[True, False])["run_name"][0]


def pool_units(manifest: pl.DataFrame) -> pl.DataFrame:
    """One row per ranker of a manifest that holds several training units (a `unit` column: folds and
    seeds), its dev MRR@10 the mean over the units (each unit's own validation queries) and its other
    fields the first unit's; a manifest of one unit comes back as it is."""
    if "unit" not in manifest.columns or manifest["unit"].n_unique() <= 1:
        return manifest
    pooled = manifest.group_by("run_name", maintain_order=True).agg(
        pl.col("dev_mrr10").mean(), pl.exclude("run_name", "dev_mrr10").first()
    )
    return pooled.select(manifest.columns)


def dev_best_baseline(manifest: pl.DataFrame, baselines: Sequence[str] = BASELINES) -> str | None:
    """The Table 1 baseline of a lab manifest with the highest dev MRR@10 (ties: the first in
    `baselines`); None when no baseline has a dev score."""
    if "dev_mrr10" not in manifest.columns:
        return None
    rows = manifest.filter(
        pl.col("run_name").is_in(list(baselines)) & pl.col("dev_mrr10").is_not_null() & pl.col("dev_mrr10").is_not_nan()
    )
    if rows.height == 0:
        return None
    order = {name: i for i, name in enumerate(baselines)}
    ranked = sorted(rows.select("run_name", "dev_mrr10").iter_rows(), key=lambda r: (-r[1], order[r[0]]))
    return ranked[0][0]


def table1(
    per_query: pl.DataFrame,
    runs: Sequence[str] | None = None,
    *,
    retriever: str = "dense",
    reference: str = "dml",
    best: str | None = None,
    measures: Sequence[str] = TABLE1_MEASURES,
    config: SignificanceConfig = DEFAULT_SIGNIFICANCE,
) -> Table1:
    """The Table-1-shaped comparison of `runs` (default: every run of `per_query`, in order): †
    against `reference`, ‡ against `best` (the best baseline chosen on dev; None: no ‡)."""
    validate(per_query, PER_QUERY_EVAL, "per-query evaluation")
    runs = list(runs) if runs is not None else per_query["run_name"].unique(maintain_order=True).to_list()
    wanted = [reference, *runs, *([best] if best else [])]
    missing = [r for r in wanted if r not in set(per_query["run_name"].to_list())]
    if missing:
        raise ValueError(f"table1: runs {missing} are not in the per-query table")
    chosen = per_query.filter(pl.col("run_name").is_in(wanted) & pl.col("measure").is_in(list(measures)))
    against_reference = _against(chosen, reference, measures, config)
    against_best = _against(chosen, best, measures, config) if best else None
    rows = []
    for run in runs:
        for measure in measures:
            vs_reference = against_reference[run, measure]
            vs_best = against_best[run, measure] if against_best else (None, False)
            mean = float(chosen.filter((pl.col("run_name") == run) & (pl.col("measure") == measure))["value"].mean())
            rows.append((system_label(run, retriever), run, measure, mean, *vs_reference, *vs_best))
    return Table1(pl.DataFrame(rows, schema=TABLE1_SCHEMA, orient="row"), reference, best, tuple(measures), config)


def system_label(run: str, retriever: str) -> str:
    """ "dense + cet"; the retriever alone is "dense"; a run named "bm25+bert" (its own retriever) "bm25 + bert"."""
    if run == retriever:
        return retriever
    if "+" in run:
        return " + ".join(run.split("+"))
    return f"{retriever} + {run}"


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
    fig = mpl_figure.Figure(figsize=(5, 3.5), layout="constrained")
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


def sweeps_plot(manifest: pl.DataFrame) -> Figure:
    """Figure 4 on dev: dev MRR@10 of CET against tau (left) and of RocketQA against eta (right, at
    the quantiles of naive's scores that placed it; the raw eta in the tick labels), the chosen
    value ringed, naive's dev MRR@10 dashed. Needs the manifest's sweep and dev_mrr10 columns."""
    needed = {"sweep", "sweep_value", "dev_mrr10", "run_name", "notes"}
    if not needed <= set(manifest.columns):
        raise ValueError(f"sweeps_plot: the manifest lacks {sorted(needed - set(manifest.columns))}")
    scored = manifest.filter(pl.col("dev_mrr10").is_not_null())
    if scored.filter(pl.col("sweep").is_in(["tau", "eta"])).height == 0:
        raise ValueError("sweeps_plot: no tau or eta sweep with dev scores in the manifest")
    naive = scored.filter(pl.col("run_name") == "naive")["dev_mrr10"]
    chosen_eta = _chosen_eta_quantile(manifest)
    fig = mpl_figure.Figure(figsize=(9, 3.5), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, sweep, label in (
        (axes[0], "tau", "tau (CET)"),
        (axes[1], "eta", "eta quantile of naive's scores (RocketQA)"),
    ):
        rows = scored.filter(pl.col("sweep") == sweep).sort("sweep_value")
        ax.set_xlabel(label)
        ax.set_ylabel("dev MRR@10")
        ax.grid(True, alpha=0.3)
        if rows.height == 0:
            ax.text(0.5, 0.5, f"{sweep} not swept", ha="center", va="center", transform=ax.transAxes)
            continue
        x, y = rows["sweep_value"].to_numpy(), rows["dev_mrr10"].to_numpy()
        ax.plot(x, y, marker="o", color="#4f6fad", label="cet" if sweep == "tau" else "rocketqa")
        pick = chosen_eta
        if sweep == "tau":
            cet_row = manifest.filter(pl.col("run_name") == "cet")
            pick = float(cet_row["tau"][0]) if "tau" in manifest.columns and cet_row.height else None
        if pick is not None and np.isclose(x, pick).any():
            i = int(np.flatnonzero(np.isclose(x, pick))[0])
            ax.plot(
                [x[i]],
                [y[i]],
                marker="o",
                markersize=14,
                fillstyle="none",
                color="#c0392b",
                linestyle="none",
                label="chosen" if sweep == "eta" else "the cet row",
            )
        if naive.len():
            ax.axhline(float(naive[0]), linestyle="--", color="C1", label="naive")
        if sweep == "tau":
            ax.set_xscale("log", base=2)
            ax.set_xticks(x, [f"{t:g}" for t in x])
        else:
            etas = [json.loads(n).get("eta", float("nan")) for n in rows["notes"]]
            ax.set_xticks(x, [f"{q:g}\n({e:.3g})" for q, e in zip(x, etas, strict=True)])
        ax.legend(loc="best")
    fig.suptitle("Figure 4 on dev: sensitivity to tau and eta")
    return fig


def _chosen_eta_quantile(manifest: pl.DataFrame) -> float | None:
    rows = manifest.filter(pl.col("run_name") == "rocketqa")
    if rows.height == 0:
        return None
    return json.loads(rows["notes"][0]).get("eta_quantile")


def training_curves_plot(
    curves: Mapping[str, Sequence[float]], ylabel: str = "training loss", smooth: int = 5
) -> Figure:
    """One line per ranker of a per-step training curve, as a moving average over `smooth` steps."""
    fig = mpl_figure.Figure(figsize=(6, 3.5), layout="constrained")
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
