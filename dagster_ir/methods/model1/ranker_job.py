"""Neural Model 1, BERT-Model1 and BERT-vanilla trained under torchrun (`dagster_ir.neural.train_job`).

`job_inputs(model, folder, ...)` saves the freshly built model (its initial weights: the embeddings
or encoder of the backbone, the head seeded by the training seed) into `folder/init` and returns the
job's values and frames: the training negatives, the dev candidates and qrels, the queries and the
documents they name. `train_ranker_job(job)`, run by every process, loads that model, tokenises
the texts as the asset does (the backbone's word pieces) and trains with `neural.train_ranker`:
the same global batches as one process, each process training on its share (DDP), the best dev
epoch chosen on rank 0. Rank 0 saves the model into `output` and returns the `TrainResult`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import polars as pl

from dagster_ir.methods.model1 import bert
from dagster_ir.methods.model1 import neural as nn
from dagster_ir.methods.model1.vocabulary import wordpiece_vocabulary
from dagster_ir.neural.train_job import Job
from dagster_ir.neural.training import TrainResult, on_rank_zero

TARGET = f"{__name__}:train_ranker_job"
KINDS = {"neural_model1": nn.NeuralModel1, "bert_model1": bert.BertModel1, "bert_vanilla": bert.BertVanilla}


def kind_of(model) -> str:
    """The job's name for `model`'s class."""
    for name, cls in KINDS.items():
        if type(model) is cls:
            return name
    raise TypeError(f"ranker_job: no job for a {type(model).__name__}")


def job_inputs(
    model,
    folder: str | os.PathLike[str],
    *,
    queries: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    doc_ids: pl.Series,
    negatives: pl.DataFrame,
    dev_run: pl.DataFrame | None,
    qrels: pl.DataFrame | None,
    checkpoint_dir: str | os.PathLike[str],
    output: str | os.PathLike[str],
) -> tuple[dict, dict]:
    """(values, frames) of a job training `model`; its initial weights are saved into `folder/init`."""
    init = model.save(Path(folder) / "init")
    wanted = doc_ids.unique().to_frame("doc_id").lazy()
    frames = {
        "queries": queries.select("query_id", "text"),
        "corpus": corpus.lazy().join(wanted, on="doc_id", how="semi"),
        "doc_ids": doc_ids.to_frame("doc_id"),
        "negatives": negatives,
    }
    if dev_run is not None and qrels is not None:
        frames.update(dev_run=dev_run, qrels=qrels)
    values = {"kind": kind_of(model), "init": str(init), "checkpoint_dir": str(checkpoint_dir), "output": str(output)}
    return values, frames


def train_ranker_job(job: Job) -> dict:
    """One process's part (see the module docstring)."""
    values = job.values
    model = KINDS[values["kind"]].load(values["init"])
    vocabulary = wordpiece_vocabulary(model.config.backbone)
    texts = nn.NeuralTexts(
        nn.TokenizedTexts.of_queries(job.frame("queries"), vocabulary),
        nn.TokenizedTexts.of_documents(job.lazy("corpus"), job.frame("doc_ids")["doc_id"], vocabulary),
    )
    dev = (job.frame("dev_run"), job.frame("qrels")) if (job.folder / "dev_run.parquet").is_file() else (None, None)
    result, start_score, kept_start = nn.train_ranker(
        model, texts, job.frame("negatives"), values["checkpoint_dir"], dev_run=dev[0], qrels=dev[1], on_log=job.on_log
    )
    on_rank_zero(model.save, values["output"])
    return {"train": dataclasses.asdict(result), "start_score": start_score, "kept_start": kept_start}


def read_train_result(result: dict) -> tuple[TrainResult, float | None, bool]:
    """What `nn.train_ranker` returned in the job: the training record, the start's score, whether it was kept."""
    return TrainResult(**result["train"]), result.get("start_score"), bool(result.get("kept_start", False))
