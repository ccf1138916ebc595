"""PHP curriculum (section 3.2): HP -> SHP -> MRDS, each stage from the previous stage's folder.

`pretrain_stage` trains one stage with `php_loss` in the shared training loop; `pretrain_chain`
runs `config.stages` in order, the first from the backbone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl

from dagster_ir.methods.php.config import PhpConfig, seed_of
from dagster_ir.methods.php.examples import stage_groups
from dagster_ir.methods.php.masking import PhpInputs
from dagster_ir.methods.php.model import PhpModel, php_loss
from dagster_ir.neural.backbone import backbone_path
from dagster_ir.neural.training import TrainConfig, TrainResult, on_rank_zero, shuffled_batches, train


@dataclass(frozen=True)
class StageResult:
    """One pre-training stage: where its model is, and what training did (None when skipped)."""

    stage: str
    path: Path
    init: str
    examples: int
    train: TrainResult | None


def stage_train_config(config: PhpConfig, stage: str) -> TrainConfig:
    """The TrainConfig of a stage: the shared settings with the stage's epochs."""
    return replace(config.train, epochs=config.epochs(stage))


def pretrain_stage(
    stage: str,
    init: str,
    examples: pl.DataFrame,
    segments: pl.DataFrame | pl.LazyFrame,
    links: pl.DataFrame | pl.LazyFrame,
    config: PhpConfig,
    out_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
    *,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
) -> StageResult:
    """Pre-train one stage from `init` (backbone or previous stage folder) and save it to `out_dir`.

    With no examples the stage passes `init` through unchanged (recorded as skipped).
    """
    stage_groups(stage)
    examples = examples.filter(pl.col("stage") == stage)
    train_config = stage_train_config(config, stage)
    model = PhpModel.from_pretrained(init, config, seed=train_config.seed)
    info = {"stage": stage, "init": init, "examples": examples.height, "config": asdict(config)}
    if examples.height == 0:
        on_rank_zero(model.save, out_dir, {**info, "skipped": True})
        return StageResult(stage, Path(out_dir), init, 0, None)
    inputs = PhpInputs(examples, segments, links, model.scorer, config)
    items = list(range(len(inputs)))

    def make_batches(epoch: int, rng: np.random.Generator) -> list[list[tuple[int, int]]]:
        return shuffled_batches([(i, epoch) for i in items], train_config.batch_size, rng)

    loss_fn = php_loss(config, inputs, lambda epoch: seed_of(train_config.seed, stage, epoch))
    result = train(model, make_batches, loss_fn, train_config, checkpoint_dir, on_log=on_log)
    # under torchrun every process holds the same weights: rank 0 writes them, the others wait (the
    # next stage of a chain starts from this folder)
    on_rank_zero(model.save, out_dir, {**info, "steps": result.steps, "loss_curve": result.loss_curve})
    return StageResult(stage, Path(out_dir), init, examples.height, result)


def pretrain_chain(
    config: PhpConfig,
    examples: pl.DataFrame,
    segments: pl.DataFrame | pl.LazyFrame,
    links: pl.DataFrame | pl.LazyFrame,
    out_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
    *,
    on_log: Callable[[str, int, dict[str, float]], None] | None = None,
) -> list[StageResult]:
    """Every stage of `config.stages` in order, the first from the backbone, each from the one before.

    Stage folders go to `out_dir/<stage>` and training checkpoints to `checkpoint_dir/<stage>`.
    """
    init, results = backbone_path(config.backbone), []
    for stage in config.stages:
        log = None if on_log is None else (lambda step, logs, stage=stage: on_log(stage, step, logs))
        result = pretrain_stage(
            stage,
            init,
            examples,
            segments,
            links,
            config,
            Path(out_dir) / stage,
            Path(checkpoint_dir) / stage,
            on_log=log,
        )
        results.append(result)
        init = str(result.path)
    return results
