"""Plots for asset metadata: a small PNG rendered with matplotlib, embedded as Markdown for the UI.

An image above `assets.lib.metadata.INLINE_IMAGE_LIMIT` bytes is not embedded (the event log keeps every
materialization's metadata): the entry is then the chart's values as a table.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from pathlib import Path

import dagster as dg

from assets.lib import metadata as asset_metadata  # INLINE_IMAGE_LIMIT read at each call (a test lowers it)
from dagster_ir.neural.curves import write_epoch_curves_png


def bar_chart_markdown(x: list, heights: list, xlabel: str, ylabel: str) -> dg.MetadataValue:
    """A bar chart as a Markdown image (base64 PNG), shown inline in the Dagster UI; its values as a
    table when the PNG would pass the inline limit."""

    png = _bar_chart_png(x, heights, xlabel, ylabel)
    if len(png) > asset_metadata.INLINE_IMAGE_LIMIT:
        return values_table(x, heights, xlabel, ylabel)
    encoded = base64.b64encode(png).decode()
    return dg.MetadataValue.md(f"![{ylabel} by {xlabel}](data:image/png;base64,{encoded})")


def values_table(x: list, heights: list, xlabel: str, ylabel: str) -> dg.MetadataValue:
    """The (x, height) pairs of a chart as a UI table."""
    schema = dg.TableSchema(columns=[dg.TableColumn(xlabel, "string"), dg.TableColumn(ylabel, "float")])
    records = [dg.TableRecord({xlabel: str(a), ylabel: float(b)}) for a, b in zip(x, heights, strict=True)]
    return dg.MetadataValue.table(records=records, schema=schema)


def _bar_chart_png(x: list, heights: list, xlabel: str, ylabel: str) -> bytes:
    import matplotlib  # matplotlib: loaded to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: loaded to draw

    fig, ax = plt.subplots(figsize=(6, 3), dpi=80)
    ax.bar([str(v) for v in x], heights, color="#4f6fad")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if len(x) > 20:
        ax.set_xticks(ax.get_xticks()[:: max(1, len(x) // 20)])
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def training_curve_metadata(
    folder: Path, partition_key: str, curves: dict, measure: str, asset: str, *, shown: Callable[[Path], str] = str
) -> dict:
    """Training curves (`dagster_ir.neural.curves.EpochCurve` by model): JSON per model, a PNG written to
    `folder/training_curves.png` (its path, as `shown` gives it: relative to the data directory), and the same image inline when it is under the inline limit."""

    if not curves:
        return {}
    png = write_epoch_curves_png(folder / "training_curves.png", curves, measure, f"{asset} on {partition_key}")
    metadata = {
        "training_curves_png": dg.MetadataValue.path(shown(png)),
        **{f"{name}_curve": dg.MetadataValue.json(curve.as_dict()) for name, curve in curves.items()},
    }
    data = png.read_bytes()
    if len(data) <= asset_metadata.INLINE_IMAGE_LIMIT:
        encoded = base64.b64encode(data).decode()
        metadata["training_curves"] = dg.MetadataValue.md(f"![training curves](data:image/png;base64,{encoded})")
    return metadata
