"""Plots for asset metadata: a small PNG rendered with matplotlib, embedded as Markdown for the UI.

An image above `assets.metadata.INLINE_IMAGE_LIMIT` bytes is not embedded (the event log keeps every
materialization's metadata): the entry is then the chart's values as a table.
"""

from __future__ import annotations

import base64
import io

import dagster as dg


def bar_chart_markdown(x: list, heights: list, xlabel: str, ylabel: str) -> dg.MetadataValue:
    """A bar chart as a Markdown image (base64 PNG), shown inline in the Dagster UI; its values as a
    table when the PNG would pass the inline limit."""
    from assets.metadata import INLINE_IMAGE_LIMIT

    png = _bar_chart_png(x, heights, xlabel, ylabel)
    if len(png) > INLINE_IMAGE_LIMIT:
        return values_table(x, heights, xlabel, ylabel)
    encoded = base64.b64encode(png).decode()
    return dg.MetadataValue.md(f"![{ylabel} by {xlabel}](data:image/png;base64,{encoded})")


def values_table(x: list, heights: list, xlabel: str, ylabel: str) -> dg.MetadataValue:
    """The (x, height) pairs of a chart as a UI table."""
    schema = dg.TableSchema(columns=[dg.TableColumn(xlabel, "string"), dg.TableColumn(ylabel, "float")])
    records = [dg.TableRecord({xlabel: str(a), ylabel: float(b)}) for a, b in zip(x, heights, strict=True)]
    return dg.MetadataValue.table(records=records, schema=schema)


def _bar_chart_png(x: list, heights: list, xlabel: str, ylabel: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
