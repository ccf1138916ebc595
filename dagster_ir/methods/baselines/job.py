"""One training unit's neural baselines under torchrun (`dagster_ir.neural.train_job`).

`job_inputs(models, config, ...)` gives the job's values and frames: the settings, the roles (or
the query splits, to rotate the folds), the corpus (every document when an interaction model is
asked for: their IDF reads them all; else the documents of the candidates and negatives), queries,
qrels, candidates and negatives, the word vector file and the text
preprocessing. `baselines_job(job)`, run by every process, calls `run_baselines` (or
`run_rotations`) as the asset does in one process: each model trains with the shared loop on its
share of every global batch (DDP), the epoch is chosen on validation on rank 0 and every process
then holds the chosen weights and reranks the validation and test queries (the same scores; rank
0's are kept). `read_results(result)` gives the asset the `BaselineRun`s (and the rotated output) back.

Deviation, BERT-MaxP only: the passage MaxP trains on is drawn per example from a generator each
process advances over its own share of the batch, so N processes draw other passages than one does
(the same distribution: one passage of each document, uniformly); every other model trains on the
same examples as in one process.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import polars as pl

from dagster_ir.methods.baselines.protocol import BaselineRun, run_baselines, run_rotations
from dagster_ir.methods.baselines.reranker import BERT_MODELS, BaselineConfig
from dagster_ir.neural.finetune_job import config_from_json, config_to_json
from dagster_ir.neural.train_job import Job
from dagster_ir.neural.training import TrainResult

TARGET = f"{__name__}:baselines_job"


def job_inputs(
    models: Sequence[str],
    config: BaselineConfig,
    *,
    corpus: pl.DataFrame | pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    candidates: pl.DataFrame,
    negatives: pl.DataFrame,
    vectors: str | os.PathLike[str],
    remove_stopwords: bool,
    lemmatize: bool,
    checkpoint_root: str | Path,
    text_module: str,
    vectors_module: str,
    roles: dict[str, Sequence[str]] | None = None,
    query_splits: pl.DataFrame | None = None,
) -> tuple[dict, dict]:
    """(values, frames) of a job; `roles` (train/validation/test query ids) or `query_splits` (rotate the folds)."""
    if (roles is None) == (query_splits is None):
        raise ValueError("baselines job: give either roles or query_splits (to rotate the folds)")
    corpus = corpus.lazy().select("doc_id", "title", "text")
    if all(m in BERT_MODELS for m in models):  # no IDF to compute: only the documents training and scoring read
        docs = pl.concat([candidates["doc_id"], negatives["pos_doc_id"], negatives["neg_doc_id"]]).unique()
        corpus = corpus.join(docs.to_frame("doc_id").lazy(), on="doc_id", how="semi")
    frames = {
        "corpus": corpus,
        "queries": queries.select("query_id", "text"),
        "qrels": qrels,
        "candidates": candidates,
        "negatives": negatives,
    }
    if query_splits is not None:
        frames["query_splits"] = query_splits
    values = {
        "models": list(models),
        "config": config_to_json(config),
        "vectors": str(vectors),
        "text": {"remove_stopwords": remove_stopwords, "lemmatize": lemmatize},
        # the asset layer names the text preprocessing (`TextConfig`, `tokens`) and the vector loader
        # (`load_vectors`) the job imports: methods do not import each other
        "text_module": text_module,
        "vectors_module": vectors_module,
        "checkpoint_root": str(checkpoint_root),
        "roles": {k: list(v) for k, v in (roles or {}).items()},
    }
    return values, frames


def baselines_job(job: Job) -> dict:
    """One process's part (see the module docstring)."""
    import importlib

    values = job.values
    text = importlib.import_module(values["text_module"])
    load_vectors = importlib.import_module(values["vectors_module"]).load_vectors
    config = config_from_json(BaselineConfig, values["config"])
    common = dict(
        corpus=job.lazy("corpus"),
        queries=job.frame("queries"),
        qrels=job.frame("qrels"),
        candidates=job.frame("candidates"),
        negatives=job.frame("negatives"),
        tokenize=partial(text.tokens, config=text.TextConfig(**values["text"])),
        vectors=load_vectors(values["vectors"]),
    )
    if values["roles"]:
        roles = values["roles"]
        results = run_baselines(
            values["models"],
            config,
            train_queries=roles["train"],
            validation_queries=roles["validation"],
            test_queries=roles["test"],
            checkpoint_root=values["checkpoint_root"],
            **common,
        )
        output = None
    else:
        output, results = run_rotations(
            values["models"], config, job.frame("query_splits"), values["checkpoint_root"], **common
        )
    returned = {
        "models": [
            {
                "name": r.name,
                "train": dataclasses.asdict(r.result),
                "examples": r.examples,
                "seconds": r.seconds,
                "checkpoint_dir": str(r.checkpoint_dir),
                "validation": r.validation_run is not None,
                "start_score": r.start_score,
                "kept_start": r.kept_start,
            }
            for r in results
        ]
    }
    for i, r in enumerate(results):
        returned[f"run-{i}"] = r.run
        if r.validation_run is not None:
            returned[f"validation-{i}"] = r.validation_run
    if output is not None:
        returned["output"] = output
    return returned


def read_results(result: dict) -> tuple[pl.DataFrame | None, list[BaselineRun]]:
    """(the rotated output or None, the `BaselineRun`s) of a job's result."""
    runs = [
        BaselineRun(
            m["name"],
            result[f"run-{i}"],
            TrainResult(**m["train"]),
            m["examples"],
            m["seconds"],
            Path(m["checkpoint_dir"]),
            result[f"validation-{i}"] if m["validation"] else None,
            m["start_score"],
            m["kept_start"],
        )
        for i, m in enumerate(result["models"])
    ]
    return result.get("output"), runs
