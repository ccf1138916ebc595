"""One PHP pre-training stage as a torchrun job: the inputs in a folder, one module every process runs.

`write_job(folder, *, stage, init, examples, segments, links, config, out_dir, checkpoint_dir)` writes
`job.json` (the stage, the init folder, the `PhpConfig`, the output and checkpoint folders) and the
stage's examples with the segments and links they read: the segments of the examples' articles
(queries) and of their positive and negative articles (documents), the links out of the examples'
articles (anchors), so a job over a whole Wikipedia dump copies only what the stage trains on.
Put `folder` on the directory every node mounts.

`python -m dagster_ir.methods.php.stage_job FOLDER` runs `stages.pretrain_stage` in every process:
the same global batches as one process, each process training on its share (DDP); rank 0 saves the
stage's model into the output folder and `result.json` into FOLDER; `read_result(folder)` gives the
`StageResult` back. A relaunched job resumes from `checkpoint_dir` as an in-process stage does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import polars as pl

from dagster_ir.methods.php.config import PhpConfig
from dagster_ir.methods.php.stages import StageResult, pretrain_stage
from dagster_ir.neural.finetune_job import config_from_json, config_to_json
from dagster_ir.storage.atomic import write_text_atomic

JOB_FILE = "job.json"
RESULT_FILE = "result.json"


def write_job(
    folder: str | os.PathLike[str],
    *,
    stage: str,
    init: str,
    examples: pl.DataFrame,
    segments: pl.DataFrame | pl.LazyFrame,
    links: pl.DataFrame | pl.LazyFrame,
    config: PhpConfig,
    out_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
) -> Path:
    """Write a stage's job (see the module docstring)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RESULT_FILE).unlink(missing_ok=True)
    examples = examples.filter(pl.col("stage") == stage)
    examples.write_parquet(folder / "examples.parquet")
    for name, frame in text_frames(examples, segments, links).items():
        frame.sink_parquet(folder / f"{name}.parquet")
    job = {
        "stage": stage,
        "init": init,
        "config": config_to_json(config),
        "out_dir": str(out_dir),
        "checkpoint_dir": str(checkpoint_dir),
    }
    write_text_atomic(folder / JOB_FILE, json.dumps(job, indent=1))
    return folder


def text_frames(
    examples: pl.DataFrame, segments: pl.DataFrame | pl.LazyFrame, links: pl.DataFrame | pl.LazyFrame
) -> dict[str, pl.LazyFrame]:
    """The segments and links `examples` read: "segments" of their query, positive and negative
    articles, "links" out of their query articles."""
    articles = pl.concat([examples["article_id"], examples["pos_id"], examples["neg_ids"].explode()]).unique()
    wanted = articles.drop_nulls().to_frame("article_id").lazy()
    sources = examples["article_id"].unique().to_frame("src_id").lazy()
    return {
        "segments": segments.lazy().join(wanted, on="article_id", how="semi"),
        "links": links.lazy().join(sources, on="src_id", how="semi"),
    }


def read_result(folder: str | os.PathLike[str]) -> StageResult:
    """The `StageResult` rank 0 wrote; a clear error when the job left none."""
    from dagster_ir.neural.training import TrainResult

    path = Path(folder) / RESULT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the pre-training job wrote no result (see torchrun's output)")
    values = json.loads(path.read_text(encoding="utf-8"))
    train = TrainResult(**values["train"]) if values["train"] is not None else None
    return StageResult(values["stage"], Path(values["path"]), values["init"], values["examples"], train)


def run_job(folder: str | os.PathLike[str]) -> None:
    """One process's part of the job in `folder` (under torchrun: every process calls it)."""
    import torch

    from dagster_ir.neural.distributed import metrics_logger
    from dagster_ir.neural.training import init_distributed, world

    folder = Path(folder)
    job = json.loads((folder / JOB_FILE).read_text(encoding="utf-8"))
    config = config_from_json(PhpConfig, job["config"])
    init_distributed(config.train.device)
    result = pretrain_stage(
        job["stage"],
        job["init"],
        pl.read_parquet(folder / "examples.parquet"),
        pl.scan_parquet(folder / "segments.parquet"),
        pl.scan_parquet(folder / "links.parquet"),
        config,
        job["out_dir"],
        job["checkpoint_dir"],
        on_log=metrics_logger(),
    )
    if world()[0] == 0:
        values = {
            "stage": result.stage,
            "path": str(result.path),
            "init": result.init,
            "examples": result.examples,
            "train": dataclasses.asdict(result.train) if result.train is not None else None,
        }
        write_text_atomic(folder / RESULT_FILE, json.dumps(values))
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    run_job(sys.argv[1])
