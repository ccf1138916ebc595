"""PHP's ablations and Table 3 baselines pre-trained under torchrun (`dagster_ir.neural.train_job`).

`chain_inputs(config, examples, segments, links, out_dir, checkpoint_dir)`: the values and frames of
a job running `stages.pretrain_chain` (an ablation: its stages in order, each from the one before):
the examples of its stages and the segments and links they read (`stage_job.text_frames`).
`baseline_inputs(method, config, examples, out_dir, checkpoint_dir, max_steps)`: those of a job
running `baseline_training.pretrain_baseline` (ICT, WLP, PROP, HARP) on its examples.

`chain_job(job)` / `baseline_job(job)`, run by every process, train as the asset does in one
process, each process on its share of every global batch (DDP); rank 0 writes each model's folder
(the other processes wait for it before a chain's next stage starts from it) and the results
(`StageResult`s, read back by `read_results`). As for the PHP stages, MLM's mean over the masked
tokens is taken per process (as BERT's multi-GPU pre-training does), so with an MLM term N processes
weight the tokens slightly otherwise than one process.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import polars as pl

from dagster_ir.methods.php.baseline_training import pretrain_baseline
from dagster_ir.methods.php.config import PhpConfig
from dagster_ir.methods.php.stage_job import text_frames
from dagster_ir.methods.php.stages import StageResult, pretrain_chain
from dagster_ir.neural.finetune_job import config_from_json, config_to_json
from dagster_ir.neural.train_job import Job
from dagster_ir.neural.training import TrainResult

CHAIN = f"{__name__}:chain_job"
BASELINE = f"{__name__}:baseline_job"


def chain_inputs(
    config: PhpConfig,
    examples: pl.DataFrame,
    segments: pl.DataFrame | pl.LazyFrame,
    links: pl.DataFrame | pl.LazyFrame,
    out_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
) -> tuple[dict, dict]:
    """(values, frames) of a job pre-training `config.stages` in order (see the module docstring)."""
    examples = examples.filter(pl.col("stage").is_in(list(config.stages)))
    frames = {"examples": examples, **text_frames(examples, segments, links)}
    values = {"config": config_to_json(config), "out_dir": str(out_dir), "checkpoint_dir": str(checkpoint_dir)}
    return values, frames


def baseline_inputs(
    method: str,
    config: PhpConfig,
    examples: pl.DataFrame,
    out_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
    max_steps: int | None,
) -> tuple[dict, dict]:
    """(values, frames) of a job pre-training the Table 3 baseline `method` on its examples."""
    values = {
        "method": method,
        "config": config_to_json(config),
        "out_dir": str(out_dir),
        "checkpoint_dir": str(checkpoint_dir),
        "max_steps": max_steps,
    }
    return values, {"examples": examples.filter(pl.col("method") == method)}


def _returned(results: list[StageResult]) -> dict:
    return {
        "results": [
            {
                "stage": r.stage,
                "path": str(r.path),
                "init": r.init,
                "examples": r.examples,
                "train": dataclasses.asdict(r.train) if r.train is not None else None,
            }
            for r in results
        ]
    }


def chain_job(job: Job) -> dict:
    """One process's part of a chain job."""
    values = job.values
    log = job.on_log
    on_log = None if log is None else (lambda stage, step, logs: log(step, {**logs, "stage": stage}))
    results = pretrain_chain(
        config_from_json(PhpConfig, values["config"]),
        job.frame("examples"),
        job.lazy("segments"),
        job.lazy("links"),
        values["out_dir"],
        values["checkpoint_dir"],
        on_log=on_log,
    )
    return _returned(results)


def baseline_job(job: Job) -> dict:
    """One process's part of a baseline job."""
    values = job.values
    result = pretrain_baseline(
        values["method"],
        job.frame("examples"),
        config_from_json(PhpConfig, values["config"]),
        values["out_dir"],
        values["checkpoint_dir"],
        max_steps=values["max_steps"],
        on_log=job.on_log,
    )
    return _returned([result])


def read_results(result: dict) -> list[StageResult]:
    """The `StageResult`s of a job's result."""
    return [
        StageResult(
            r["stage"],
            Path(r["path"]),
            r["init"],
            r["examples"],
            TrainResult(**r["train"]) if r["train"] is not None else None,
        )
        for r in result["results"]
    ]
