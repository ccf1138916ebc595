"""Plots for asset metadata: a PNG rendered with matplotlib, embedded as Markdown for the UI."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import dagster as dg


def bar_chart_markdown(x: list, heights: list, xlabel: str, ylabel: str) -> dg.MetadataValue:
    """A bar chart as a Markdown image (base64 PNG), shown inline in the Dagster UI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3), dpi=100)
    ax.bar([str(v) for v in x], heights, color="#4f6fad")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if len(x) > 20:
        ax.set_xticks(ax.get_xticks()[:: max(1, len(x) // 20)])
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    encoded = base64.b64encode(buffer.getvalue()).decode()
    return dg.MetadataValue.md(f"![{ylabel} by {xlabel}](data:image/png;base64,{encoded})")


def training_curve_metadata(folder: Path, partition_key: str, curves: dict, measure: str, asset: str) -> dict:
    """Training curves (`dagster_ir.neural.curves.EpochCurve` by model): JSON per model, a PNG written to
    `folder/training_curves.png` (its path) and the same image inline."""
    from dagster_ir.neural.curves import write_epoch_curves_png

    if not curves:
        return {}
    png = write_epoch_curves_png(folder / "training_curves.png", curves, measure, f"{asset} on {partition_key}")
    encoded = base64.b64encode(png.read_bytes()).decode()
    return {"training_curves_png": dg.MetadataValue.path(str(png)),
            "training_curves": dg.MetadataValue.md(f"![training curves](data:image/png;base64,{encoded})"),
            **{f"{name}_curve": dg.MetadataValue.json(curve.as_dict()) for name, curve in curves.items()}}
