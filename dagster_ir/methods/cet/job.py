"""The CET lab of one training unit under torchrun (`dagster_ir.neural.train_job`).

`job_inputs(data, config, out_dir)` gives the job's values (the `LabConfig`, the roles, the output
folder) and frames: the candidate runs, queries, sparse and dense labels, and the documents the runs
and labels name. `lab_job(job)`, run by every process, calls `lab.train_lab` as the asset does in one
process: every ranker (R, and S for CET) trains with the shared loop on its share of every global
batch (DDP); the negatives are drawn alike on every process (seeded by epoch), so each process sees
the same global batches as one process would. Rank 0 writes the rankers' folders
(`model.save_ranker`); every process then holds the same weights and measures the dev MRR@10 (rank
0's is kept). Rank 0's metrics carry the ranker's name (`ranker`). `read_trained(result)` gives the
asset the `TrainedRanker`s back.
"""

from __future__ import annotations

import dataclasses
import os

import polars as pl

from dagster_ir.methods.cet.lab import LabData, TrainedRanker, train_lab
from dagster_ir.methods.cet.model import LabConfig
from dagster_ir.neural.finetune_job import config_from_json, config_to_json
from dagster_ir.neural.train_job import Job
from dagster_ir.neural.training import TrainResult

TARGET = f"{__name__}:lab_job"


def job_inputs(data: LabData, config: LabConfig, out_dir: str | os.PathLike[str]) -> tuple[dict, dict]:
    """(values, frames) of a job training the lab of `data` into `out_dir`."""
    docs = pl.concat([data.candidate_runs["doc_id"], data.sparse_qrels["doc_id"], data.dense_qrels["doc_id"]]).unique()
    wanted = docs.to_frame("doc_id").lazy()
    frames = {
        "candidate_runs": data.candidate_runs,
        "queries": data.queries,
        "corpus": data.corpus.lazy().join(wanted, on="doc_id", how="semi"),
        "sparse_qrels": data.sparse_qrels,
        "dense_qrels": data.dense_qrels,
    }
    values = {
        "config": config_to_json(config),
        "out_dir": str(out_dir),
        "train": list(data.train_query_ids),
        "dev": list(data.dev_query_ids),
    }
    return values, frames


def lab_job(job: Job) -> dict:
    """One process's part (see the module docstring)."""
    values = job.values
    data = LabData(
        job.frame("candidate_runs"),
        job.frame("queries"),
        job.lazy("corpus"),
        job.frame("sparse_qrels"),
        job.frame("dense_qrels"),
        tuple(values["train"]),
        tuple(values["dev"]),
    )
    log = job.on_log
    on_log = None if log is None else (lambda name, step, logs: log(step, {**logs, "ranker": name}))
    trained = train_lab(data, config_from_json(LabConfig, values["config"]), values["out_dir"], on_log=on_log)
    return {"trained": [dataclasses.asdict(t) for t in trained]}


def read_trained(result: dict) -> list[TrainedRanker]:
    """The `TrainedRanker`s of a job's result."""
    return [
        TrainedRanker(**{**t, "result": TrainResult(**t["result"]) if t["result"] is not None else None})
        for t in result["trained"]
    ]
