"""Training curves per epoch: the mean training loss and the validation measure, as data and as a plot.

`epoch_curve(result, start_score=None) -> EpochCurve`: epoch 0 is the starting weights (their
validation score when measured, no loss), epoch e >= 1 the mean loss of epoch e's optimizer steps
and the validation score after it. A run cut short by `max_steps` counts the steps it took.
`plot_epoch_curves(curves, measure, title) -> Figure`: two panels (loss, validation measure) with
one line per model; `write_epoch_curves_png(path, ...)` writes it atomically.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dagster_ir.lazy import lazy_module
from dagster_ir.neural.training import TrainResult
from dagster_ir.storage.atomic import atomic_path

if TYPE_CHECKING:
    from matplotlib.figure import Figure

if TYPE_CHECKING:
    import matplotlib.figure as mpl_figure
else:
    mpl_figure = lazy_module("matplotlib.figure")


@dataclass(frozen=True)
class EpochCurve:
    """Per epoch (0 = before training): mean training loss and validation score (NaN where none)."""

    loss: list[float]
    validation: list[float]
    chosen: int  # the epoch whose weights were kept (0: the start)

    def as_dict(self) -> dict:
        def clean(values):  # JSON has no NaN
            return [None if math.isnan(v) else round(v, 5) for v in values]

        return {
            "epoch": list(range(len(self.loss))),
            "train_loss": clean(self.loss),
            "validation": clean(self.validation),
            "chosen_epoch": self.chosen,
        }


def epoch_curve(result: TrainResult, start_score: float | None = None, kept_start: bool = False) -> EpochCurve:
    """The curve of one training run (see the module docstring)."""
    epochs = max(len(result.dev_scores), 1)
    losses = result.loss_curve
    size = math.ceil(len(losses) / epochs) if losses else 0
    loss = [math.nan] + [sum(part) / len(part) for part in (losses[i : i + size] for i in range(0, len(losses), size))]
    validation = [math.nan if start_score is None else float(start_score), *map(float, result.dev_scores)]
    length = max(len(loss), len(validation))
    loss += [math.nan] * (length - len(loss))
    validation += [math.nan] * (length - len(validation))
    return EpochCurve(loss, validation, 0 if kept_start else result.best_epoch + 1)


def plot_epoch_curves(curves: Mapping[str, EpochCurve], measure: str, title: str) -> Figure:
    """Loss and validation measure by epoch, one line per model; the kept epoch marked."""
    fig = mpl_figure.Figure(figsize=(8, 3.2), layout="constrained")
    loss_ax, dev_ax = fig.subplots(1, 2)
    for name, curve in curves.items():
        epochs = list(range(len(curve.loss)))
        loss_ax.plot(epochs, curve.loss, marker="o", label=name)
        (line,) = dev_ax.plot(epochs, curve.validation, marker="o", label=name)
        if curve.chosen < len(curve.validation) and not math.isnan(curve.validation[curve.chosen]):
            dev_ax.plot(
                [curve.chosen], [curve.validation[curve.chosen]], marker="*", markersize=14, color=line.get_color()
            )
    loss_ax.set_xlabel("epoch")
    loss_ax.set_ylabel("mean training loss")
    dev_ax.set_xlabel("epoch (0: before training; star: kept)")
    dev_ax.set_ylabel(f"validation {measure}")
    for ax in (loss_ax, dev_ax):
        ax.grid(True, alpha=0.3)
    if curves:
        dev_ax.legend(fontsize="small")
    fig.suptitle(title)
    return fig


def write_epoch_curves_png(
    path: str | os.PathLike[str], curves: Mapping[str, EpochCurve], measure: str, title: str
) -> Path:
    """`plot_epoch_curves` written as a PNG to `path`, atomically."""
    from dagster_ir.evaluation.plots import figure_to_png_bytes

    data = figure_to_png_bytes(plot_epoch_curves(curves, measure, title))
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)
    return Path(path)
