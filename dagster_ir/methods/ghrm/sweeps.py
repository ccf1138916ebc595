"""The paper's hyperparameter studies (section 4.4, Figures 3-5), chosen on validation folds only.

Figure 3 varies the pooling rate, Figure 4 the number of blocks T and Figure 5 the k of the k-max
readout, each with the other settings at GHRM's defaults. `run_sweep` does the same on a grid for
one training unit (a rotation of the folds under cross-validation, the train/model and dev splits
under a fixed split; see `dagster_ir.collections.protocol`): for every value it trains GHRM on the
unit's training queries, picks the epoch on its validation queries (as `protocol.train_ghrm` always
does) and records the validation measures at that epoch. Test queries are never scored: the paper
says its hyperparameters were tuned on the validation set, so the sweep is the tuning, and `choose`
picks per parameter the value with the best mean over the units' validation queries. (The paper's
figures plot test scores; a figure of validation scores is what can be drawn without looking at
test.)

A setting that several sweeps share (the defaults appear in all three) is trained once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from dagster_ir.evaluation import evaluate_run
from dagster_ir.methods.ghrm.model import GHRMConfig, ModelConfig
from dagster_ir.methods.ghrm.protocol import (
    GHRMData,
    RerankInputs,
    rerank_inputs,
    score_inputs,
    torch_threads,
    train_ghrm,
)

PARAMETERS = {"rate": "pooling rate", "blocks": "number of blocks T", "top_k": "k of the k-max readout"}
# one unit's rows; the asset adds the unit's fold and seed
SWEEP_RESULTS = {
    "parameter": pl.String,
    "value": pl.Float64,
    "measure": pl.String,
    "validation": pl.Float64,
    "best_epoch": pl.Int32,
}


@dataclass(frozen=True)
class SweepConfig:
    """The grid (paper: rate 0.4-1.0, T 0-4, k 10-70) and the measures recorded."""

    rate: tuple[float, ...] = (0.4, 0.6, 0.8, 1.0)
    blocks: tuple[int, ...] = (0, 1, 2, 3)
    top_k: tuple[int, ...] = (10, 20, 40, 70)
    measures: tuple[str, ...] = ("nDCG@20", "P@20")

    def __post_init__(self) -> None:
        for name in PARAMETERS:
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"SweepConfig.{name}: values repeat: {values}")
        if not any(getattr(self, name) for name in PARAMETERS):
            raise ValueError("SweepConfig: every grid is empty; nothing to sweep")
        if not self.measures:
            raise ValueError("SweepConfig.measures: give at least one measure")


PROFILES: dict[str, SweepConfig] = {
    # 7 trainings per unit at the demo profile's size (the defaults rate 0.8, T 2, k 20 shared)
    "demo": SweepConfig(rate=(0.4, 0.8, 1.0), blocks=(0, 1, 2), top_k=(10, 20, 40)),
    "paper": SweepConfig(
        rate=(0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0), blocks=(0, 1, 2, 3, 4), top_k=(10, 20, 30, 40, 50, 60, 70)
    ),
}


def sweep_settings(base: ModelConfig, sweep: SweepConfig) -> list[tuple[str, float, ModelConfig]]:
    """(parameter, value, model config) for every grid point, the other parameters at `base`."""
    return [
        (name, float(value), dataclasses.replace(base, **{name: value}))
        for name in PARAMETERS
        for value in getattr(sweep, name)
    ]


def _setting_name(model: ModelConfig) -> str:
    return hashlib.sha256(json.dumps(dataclasses.asdict(model), sort_keys=True).encode()).hexdigest()[:10]


def run_sweep(
    data: GHRMData,
    train_queries: Sequence[str],
    validation_queries: Sequence[str],
    config: GHRMConfig,
    sweep: SweepConfig,
    checkpoint_root: str | Path,
    workers: int = 1,
) -> pl.DataFrame:
    """SWEEP_RESULTS rows: every grid point's chosen epoch and validation measures.

    Checkpoints go to `checkpoint_root/<setting hash>` (resumed when present). `workers` > 1 trains the
    settings that many at a time in spawned worker processes (each seeded alike: the same rows).
    """
    if not validation_queries:
        raise ValueError("run_sweep: no validation queries; the sweep chooses on them")
    if workers < 1:
        raise ValueError(f"run_sweep: workers must be >= 1, got {workers}")
    settings = sweep_settings(config.model, sweep)
    distinct = {_setting_name(model): model for _, _, model in settings}
    job = (data, list(train_queries), list(validation_queries), config, tuple(sweep.measures), str(checkpoint_root))
    if workers == 1 or len(distinct) < 2:
        _start_worker(*job)
        try:
            trained = {key: _setting_in_worker(model) for key, model in distinct.items()}
        finally:
            _WORKER.clear()
    else:
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        with ProcessPoolExecutor(
            min(workers, len(distinct)), mp_context=get_context("spawn"), initializer=_start_worker, initargs=job
        ) as pool:
            futures = {key: pool.submit(_setting_in_worker, model) for key, model in distinct.items()}
            trained = {key: future.result() for key, future in futures.items()}
    rows = [
        (name, value, measure, score, epoch)
        for name, value, model in settings
        for measure, score, epoch in trained[_setting_name(model)]
    ]
    return pl.DataFrame(rows, schema=SWEEP_RESULTS, orient="row")


_WORKER: dict[str, object] = {}  # what `_setting_in_worker` trains on (set once per process)


def _start_worker(
    data: GHRMData, train: list[str], validation: list[str], config: GHRMConfig, measures: tuple[str, ...], root: str
) -> None:
    # every setting scores the same validation candidates after each epoch: batched (and collated) once
    inputs = rerank_inputs(data, validation, config.training.rerank_depth, config.training.eval_batch_size)
    _WORKER.update(
        data=data, train=train, validation=validation, inputs=inputs, config=config, measures=measures, root=Path(root)
    )


def _setting_in_worker(model: ModelConfig) -> list[tuple[str, float, int]]:
    w = _WORKER
    config = dataclasses.replace(w["config"], model=model)
    with torch_threads(config.training.threads):
        return _validate_one(
            w["data"], config, w["train"], w["validation"], w["inputs"], w["measures"], w["root"] / _setting_name(model)
        )


def _validate_one(
    data: GHRMData,
    config: GHRMConfig,
    train: Sequence[str],
    queries: Sequence[str],
    validation: RerankInputs,
    measures: Sequence[str],
    folder: Path,
) -> list[tuple[str, float, int]]:
    """Train one setting and score the validation `queries` (`validation`: their candidates, batched) with the
    chosen epoch's weights (a sweep compares trained settings: the untrained start does not compete)."""
    model, result, _, _ = train_ghrm(data, config, "ghrm", train, queries, folder, validation, keep_start=False)
    run = score_inputs(model, data, validation, "ghrm")
    judged = data.qrels.filter(pl.col("query_id").is_in(pl.Series(list(queries), dtype=pl.String).implode()))
    values = evaluate_run(run, judged, list(measures))
    means = values.group_by("measure").agg(pl.col("value").mean())
    return [(m, float(v), result.best_epoch) for m, v in means.sort("measure").iter_rows()]


def sweep_means(results: pl.DataFrame) -> pl.DataFrame:
    """Mean validation value per (parameter, value, measure) over the units' rows, sorted by value."""
    return (
        results.group_by("parameter", "value", "measure")
        .agg(pl.col("validation").mean().alias("mean"), pl.len().alias("units"))
        .sort("parameter", "measure", "value")
    )


def choose(results: pl.DataFrame, measure: str) -> dict[str, float]:
    """Per parameter, the value with the best mean validation `measure` (ties: the smaller value)."""
    means = sweep_means(results).filter(pl.col("measure") == measure)
    if means.height == 0:
        raise ValueError(f"choose: no results for {measure!r} (have {results['measure'].unique().to_list()})")
    best = (
        means.sort(["parameter", "mean", "value"], descending=[False, True, False])
        .group_by("parameter", maintain_order=True)
        .first()
    )
    return {p: v for p, v in best.select("parameter", "value").iter_rows()}


def sweep_figure(results: pl.DataFrame, chosen: dict[str, float], measures: Sequence[str]):
    """One panel per swept parameter (Figures 3-5): mean validation value of each measure; the choice ringed."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    means = sweep_means(results)
    swept = [p for p in PARAMETERS if p in set(means["parameter"].to_list())]
    figure = Figure(figsize=(4 * len(swept), 3.2), dpi=100)
    axes = figure.subplots(1, len(swept), squeeze=False)[0]
    for ax, parameter in zip(axes, swept):
        for measure in measures:
            part = means.filter((pl.col("parameter") == parameter) & (pl.col("measure") == measure))
            ax.plot(part["value"].to_list(), part["mean"].to_list(), marker="o", label=measure)
            at = part.filter(pl.col("value") == chosen[parameter]) if parameter in chosen else part.clear()
            if at.height:
                ax.plot(
                    at["value"].to_list(),
                    at["mean"].to_list(),
                    marker="o",
                    markersize=12,
                    fillstyle="none",
                    color="black",
                    linestyle="none",
                )
        ax.set_xlabel(PARAMETERS[parameter])
        ax.set_ylabel("validation (mean of units)")
        ax.legend()
    figure.tight_layout()
    return figure


def sweep_caption(results: pl.DataFrame, chosen: dict[str, float], measure: str, measures: Sequence[str]) -> str:
    """What `sweep_figure` shows, in a sentence."""
    keys = [c for c in ("fold", "seed") if c in results.columns]
    units = results.select(keys).unique().height if keys else 1
    return (
        f"GHRM sweeps (Figures 3-5): validation {', '.join(measures)}, mean of {units} training unit(s); "
        f"ringed: the value chosen by {measure} ({', '.join(f'{k}={v:g}' for k, v in chosen.items())}). "
        "Test queries are never scored."
    )
