"""Cross-encoder fine-tuning as a torchrun job: the inputs in a folder, one module every process runs.

`write_job(folder, *, init, config, queries, corpus, negatives, checkpoint_dir, output, dev=None)`
writes what the training processes read: `job.json` (the `FineTuneConfig`, the init, the checkpoint
and output folders), `queries.parquet`, `corpus.parquet` (only the documents the negatives and the
dev run name), `negatives.parquet` and, for model selection on dev, `dev_run.parquet`,
`dev_qrels.parquet` and the dev query ids. Put `folder` on the directory every node mounts.

`config_to_json` / `config_from_json` carry a frozen config dataclass (nested ones too) through JSON.

`python -m dagster_ir.neural.finetune_job FOLDER`, run by every process of torchrun
(`dagster_ir.neural.distributed.torchrun_command`), fine-tunes with `finetune.fine_tune`: the same
examples, global batches and schedule as in one process, each process training on its share of
every global batch (DDP all-reduces the gradients: `training.train`), the dev evaluation on rank 0.
Rank 0 appends each step's metrics to $DAGSTER_IR_METRICS, saves the model into the output folder
and writes `result.json` (the `FineTuned` record: training run, example count, the start's dev score and
whether it was kept) into FOLDER; `read_result(folder)` reads it back. A relaunched job resumes from `checkpoint_dir` as an in-process run does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from dagster_ir.storage.atomic import write_text_atomic

JOB_FILE = "job.json"
RESULT_FILE = "result.json"


def config_to_json(config: Any) -> dict:
    """A frozen config dataclass as JSON values (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def config_from_json(cls: type, values: dict) -> Any:
    """A (nested) frozen config dataclass from its `asdict` JSON; nested dataclass fields by their default's type."""
    kwargs = {}
    for field in dataclasses.fields(cls):
        if field.name not in values:
            continue
        value = values[field.name]
        default = field.default if field.default is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default) and isinstance(value, dict):
            value = config_from_json(type(default), value)
        elif isinstance(value, list):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        kwargs[field.name] = value
    return cls(**kwargs)


def write_job(
    folder: str | os.PathLike[str],
    *,
    init: str,
    config,
    queries: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    negatives: pl.DataFrame,
    checkpoint_dir: str | os.PathLike[str],
    output: str | os.PathLike[str],
    dev: tuple[pl.DataFrame, pl.DataFrame, Sequence[str]] | None = None,
) -> Path:
    """Write a fine-tuning job (see the module docstring); `dev` = (candidate run, qrels, dev query ids)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RESULT_FILE).unlink(missing_ok=True)
    doc_ids = [negatives["pos_doc_id"], negatives["neg_doc_id"]] + ([dev[0]["doc_id"]] if dev else [])
    wanted = pl.concat(doc_ids).unique().to_frame("doc_id").lazy()
    corpus.lazy().join(wanted, on="doc_id", how="semi").sink_parquet(folder / "corpus.parquet")
    queries.select("query_id", "text").write_parquet(folder / "queries.parquet")
    negatives.write_parquet(folder / "negatives.parquet")
    job = {
        "init": init,
        "config": config_to_json(config),
        "checkpoint_dir": str(checkpoint_dir),
        "output": str(output),
        "dev_query_ids": None,
    }
    if dev is not None:
        run, qrels, ids = dev
        run.write_parquet(folder / "dev_run.parquet")
        qrels.write_parquet(folder / "dev_qrels.parquet")
        job["dev_query_ids"] = list(ids)
    write_text_atomic(folder / JOB_FILE, json.dumps(job, indent=1))
    return folder


def read_result(folder: str | os.PathLike[str]):
    """The `finetune.FineTuned` that rank 0 wrote; a clear error when the job left none."""
    from dagster_ir.neural.finetune import FineTuned
    from dagster_ir.neural.training import TrainResult

    path = Path(folder) / RESULT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the fine-tuning job wrote no result (see torchrun's output)")
    values = json.loads(path.read_text(encoding="utf-8"))
    return FineTuned(
        TrainResult(**values["train"]), int(values["examples"]), values["start_score"], bool(values["kept_start"])
    )


def run_job(folder: str | os.PathLike[str]) -> None:
    """One process's part of the job in `folder` (under torchrun: every process calls it)."""
    import torch

    from dagster_ir.neural import finetune
    from dagster_ir.neural.distributed import metrics_logger
    from dagster_ir.neural.training import init_distributed, world

    folder = Path(folder)
    job = json.loads((folder / JOB_FILE).read_text(encoding="utf-8"))
    config = config_from_json(finetune.FineTuneConfig, job["config"])
    init_distributed(config.train.device)
    queries = pl.read_parquet(folder / "queries.parquet")
    corpus = pl.read_parquet(folder / "corpus.parquet")
    evaluate = None
    if job["dev_query_ids"]:
        evaluate = finetune.dev_evaluator(
            pl.read_parquet(folder / "dev_run.parquet"),
            queries,
            corpus,
            pl.read_parquet(folder / "dev_qrels.parquet"),
            job["dev_query_ids"],
            config,
        )
    model = finetune.load_model(job["init"], config)
    tuned = finetune.fine_tune(
        model,
        queries,
        corpus,
        pl.read_parquet(folder / "negatives.parquet"),
        config,
        job["checkpoint_dir"],
        evaluate=evaluate,
        on_log=metrics_logger(),
    )
    if world()[0] == 0:
        model.save(job["output"])
        write_text_atomic(
            folder / RESULT_FILE,
            json.dumps(
                {
                    "train": dataclasses.asdict(tuned.train),
                    "examples": tuned.examples,
                    "start_score": tuned.start_score,
                    "kept_start": tuned.kept_start,
                }
            ),
        )
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    run_job(sys.argv[1])
