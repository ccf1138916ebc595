"""Figures for evaluation reports: per-query differences from a baseline and recall curves.

Figures are built on `matplotlib.figure.Figure` directly, never through pyplot, so no display, GUI
backend or global figure state is involved; `figure_to_png_bytes` renders with Agg.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dagster_ir.lazy import lazy_module
from dagster_ir.schemas import PER_QUERY_EVAL, validate

if TYPE_CHECKING:
    from matplotlib.figure import Figure

if TYPE_CHECKING:
    import matplotlib.figure as mpl_figure
else:
    mpl_figure = lazy_module("matplotlib.figure")

_BETTER, _WORSE, _TIE = "#2b8a3e", "#c92a2a", "#868e96"


def per_query_difference_plot(per_query: pl.DataFrame, run: str, baseline: str, measure: str) -> Figure:
    """Bars of `run` minus `baseline` on `measure`, largest gain first, one per query both answered.

    The bars of each sign are one `StepPatch` (`ax.patches`: better, equal, worse, those present);
    `bar_heights(ax)` reads the heights back, one per query.
    """
    differences = _differences(per_query, run, baseline, measure)
    fig = mpl_figure.Figure(figsize=(8, 3.5), layout="constrained")
    ax = fig.subplots()
    # the differences are sorted, so the better, equal and worse queries are three runs of touching bars:
    # each is drawn as one filled step patch (one artist, not one rectangle per query: the same picture,
    # drawn several times faster; a report draws one such figure per run)
    edges = np.arange(differences.size + 1) - 0.5
    for part, colour in ((differences > 0, _BETTER), (differences == 0, _TIE), (differences < 0, _WORSE)):
        where = np.flatnonzero(part)
        if where.size:
            first, last = where[0], where[-1] + 1
            ax.stairs(
                differences[first:last], edges[first : last + 1], baseline=0.0, fill=True, color=colour, linewidth=0
            )
    ax.axhline(0, color="black", linewidth=0.8)
    wins, losses = int((differences > 0).sum()), int((differences < 0).sum())
    ties = differences.size - wins - losses
    ax.set_title(f"{measure}: {run} − {baseline} per query ({wins} better, {ties} equal, {losses} worse)")
    ax.set_xlabel(f"queries, sorted by difference (n = {differences.size})")
    ax.set_ylabel(f"Δ {measure}")
    ax.set_xlim(-0.5, max(differences.size, 1) - 0.5)
    ax.set_xticks([])
    return fig


def bar_heights(ax) -> list[float]:
    """The per-query heights a `per_query_difference_plot` axis draws, left to right."""
    return [float(v) for patch in ax.patches for v in patch.get_data().values]


def recall_curve_plot(curves: pl.DataFrame, title: str = "Recall by depth") -> Figure:
    """One line per run of mean recall@k against k (log scale); `curves` as `recall_curve` returns."""
    validate(curves, {"run_name": pl.String, "k": pl.Int64, "recall": pl.Float64}, "recall curves")
    fig = mpl_figure.Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    for (name,), curve in curves.partition_by("run_name", maintain_order=True, as_dict=True).items():
        ax.plot(curve["k"].to_numpy(), curve["recall"].to_numpy(), label=name)
    ax.set_xscale("log")
    ax.set_ylim(0, 1)
    ax.set_xlabel("depth k")
    ax.set_ylabel("mean recall@k")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if curves.height:
        ax.legend(loc="lower right")
    return fig


def figure_to_png_bytes(fig: Figure, dpi: int = 100) -> bytes:
    """The figure rendered as PNG (Agg), without the software-version metadata that varies."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


def _differences(per_query: pl.DataFrame, run: str, baseline: str, measure: str) -> np.ndarray:
    validate(per_query, PER_QUERY_EVAL, "per-query evaluation")
    values = per_query.filter(pl.col("measure") == measure)
    runs = set(values["run_name"].unique().to_list())
    for name in (run, baseline):
        if name not in runs:
            raise ValueError(f"run {name!r} has no {measure} values (runs with {measure}: {sorted(runs)})")
    paired = values.filter(pl.col("run_name") == run).join(
        values.filter(pl.col("run_name") == baseline), on="query_id", suffix="_baseline"
    )
    return np.sort((paired["value"] - paired["value_baseline"]).to_numpy())[::-1]
