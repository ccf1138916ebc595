"""One training unit's baselines: train on its training queries, choose on validation, rerank its test queries.

`run_baselines` is what the `neural_baselines` asset calls once per training unit (collection,
fold, seed; see `dagster_ir.collections.protocol`). For every model named it

1. builds the examples of the unit's training queries, one per (query, positive) with
   `n_negatives` negatives: by default (`train_pairs: "candidates"`) positives judged relevant
   within the candidate run's top `train_depth` (= `rerank_depth`) and negatives drawn from that
   depth, as the cross-encoders' fine-tuning draws them; with "negatives", from the shared
   `negatives` table;
2. trains with the shared loop, reranking the unit's validation queries' candidates (the
   candidate run's top `rerank_depth`) after every epoch and keeping the epoch with the best
   `selection_measure`; the starting weights (a BERT model's: the cross-encoders' start, see
   `reranker.build_bert_model`; an interaction model's: freshly initialised, seeded) are scored
   first and kept when no epoch beats them, as the cross-encoders' fine-tuning does
   (`select_start`); test queries are never scored before that choice;
3. reranks the unit's test queries' candidates with the chosen weights, and its validation
   queries' too (`BaselineRun.validation_run`), from which `first_stage_interpolations` chooses
   the weight of the `<model>+<candidates>` rows (`dagster_ir.fusion.interpolate`; beyond the papers).

Interaction models read the word2vec vectors (the GHRM asset's) through a `WordVocabulary` built
over the whole corpus (IDF from every document) with the caller's `tokenize`; BERT models read the
passages of `bert_passages`. A document's text is its title followed by its text. Checkpoints go
to `checkpoint_root/<model>-<hash of everything training reads>/`, so a rerun with the same inputs
resumes or reuses them, and changed inputs never resume an old run.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import polars as pl

from dagster_ir.collections import fold_assignment
from dagster_ir.fusion.interpolate import interpolated_run
from dagster_ir.methods.baselines.inputs import WordEncoder, build_word_vocabulary
from dagster_ir.methods.baselines.reranker import (
    BERT_MODELS,
    MODELS,
    BaselineConfig,
    build_bert_model,
    build_word_model,
    examples_from_negatives,
    rerank_with,
    runs_on,
    train_baseline,
    validation_evaluator,
)
from dagster_ir.negatives import NegativeConfig, candidate_pairs
from dagster_ir.neural.memory import release_freed_memory
from dagster_ir.neural.training import TrainResult, against_start
from dagster_ir.retrieval.runs import top_k
from dagster_ir.schemas import QUERIES, RUN, validate


@dataclass(frozen=True)
class BaselineRun:
    """One model of one unit: its test run, the training record and where its checkpoints are."""

    name: str
    run: pl.DataFrame  # RUN rows over the unit's test queries
    result: TrainResult
    examples: int
    seconds: float
    checkpoint_dir: Path
    validation_run: pl.DataFrame | None = None  # the chosen weights' reranking of the validation queries
    start_score: float | None = None  # the untrained weights' validation score (None: not scored)
    kept_start: bool = False  # the untrained weights scored above every epoch, so they were kept

    @property
    def validation_best(self) -> float | None:
        if self.kept_start:
            return self.start_score
        return self.result.dev_scores[self.result.best_epoch] if self.result.dev_scores else None

    @property
    def chosen_epoch(self) -> int:
        """The weights kept, counting epochs from 1: 0 is the start (kept only when scored above every epoch)."""
        return 0 if self.kept_start else self.result.best_epoch + 1


def document_text(title: str | None, text: str | None) -> str:
    return " ".join(part for part in (title, text) if part)


def corpus_texts(corpus: pl.DataFrame | pl.LazyFrame, chunk: int = 50_000):
    """Every document's title and text, streamed `chunk` rows at a time."""
    lazy, offset = corpus.lazy(), 0
    while True:
        part = lazy.slice(offset, chunk).select("title", "text").collect()
        if part.height == 0:
            return
        yield from (document_text(t, x) for t, x in part.iter_rows())
        offset += chunk


def run_baselines(
    models: Sequence[str],
    config: BaselineConfig,
    *,
    corpus: pl.DataFrame | pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    candidates: pl.DataFrame,
    negatives: pl.DataFrame,
    train_queries: Sequence[str],
    validation_queries: Sequence[str],
    test_queries: Sequence[str],
    checkpoint_root: str | Path,
    tokenize: Callable[[str], list[str]] | None = None,
    vectors=None,
    on_model: Callable[[BaselineRun], None] | None = None,
) -> list[BaselineRun]:
    """Train and score every model of `models` for one unit (see the module docstring)."""
    unknown = sorted(set(models) - set(MODELS))
    if unknown or not models:
        raise ValueError(f"run_baselines: unknown models {unknown} or none (have {list(MODELS)})")
    validate(queries, QUERIES, "queries")
    validate(candidates, RUN, "candidates")
    if candidates["run_name"].n_unique() > 1:
        raise ValueError(f"run_baselines: pass one candidate run, got {sorted(candidates['run_name'].unique())}")
    if config.train_pairs == "candidates":
        negatives = training_pairs(candidates, qrels, train_queries, config)
    examples = examples_from_negatives(negatives, train_queries, config.n_negatives)
    scored = top_k(
        candidates.filter(
            pl.col("query_id").is_in(pl.Series([*validation_queries, *test_queries], dtype=pl.String).implode())
        ),
        config.rerank_depth,
    )
    needed = sorted({d for _, p, n in examples for d in (p, *n)} | set(scored["doc_id"].to_list()))
    docs = (
        corpus.lazy()
        .filter(pl.col("doc_id").is_in(pl.Series(needed, dtype=pl.String).implode()))
        .select("doc_id", "title", "text")
        .collect()
    )
    doc_texts = {d: document_text(t, x) for d, t, x in docs.iter_rows()}
    missing = [d for d in needed if d not in doc_texts]
    if missing:
        raise ValueError(
            f"run_baselines: {len(missing)} documents of the negatives or candidates are not in the corpus "
            f"(e.g. {missing[0]!r})"
        )
    query_texts = dict(queries.select("query_id", "text").iter_rows())
    word_encoder = None
    if any(m not in BERT_MODELS for m in models):
        if tokenize is None or vectors is None:
            raise ValueError("run_baselines: the interaction models need `tokenize` and word `vectors`")
        vocabulary = build_word_vocabulary(corpus_texts(corpus), tokenize, vectors)
        word_encoder = WordEncoder(vocabulary, tokenize, config.query_words, config.doc_words)
        word_encoder.add_texts(query_texts, doc_texts)
    key = fingerprint(
        config,
        examples,
        scored,
        qrels,
        validation_queries,
        test_queries,
        word_encoder.vocabulary.vectors if word_encoder else None,
    )
    results = []
    for name in models:
        started = time.monotonic()
        if name in BERT_MODELS:
            model, encoder = build_bert_model(name, config)
            encoder.add_texts(query_texts, doc_texts)
        else:
            model, encoder = build_word_model(name, word_encoder.vocabulary.vectors, config), word_encoder
        folder = Path(checkpoint_root) / f"{name}-{key}"
        evaluate = validation_evaluator(name, encoder, scored, qrels, validation_queries, config)
        # the start (a BERT model's pretrained weights, an interaction model's fresh ones) competes with its epochs
        result, start_score, kept_start = against_start(
            model, evaluate, partial(train_baseline, name, model, encoder, examples, config, folder, evaluate)
        )
        run = rerank_with(
            model,
            encoder,
            scored,
            test_queries,
            config.rerank_depth,
            name,
            config.eval_batch_size,
            *runs_on(name, config),
        )
        validation_run = (
            rerank_with(
                model,
                encoder,
                scored,
                validation_queries,
                config.rerank_depth,
                name,
                config.eval_batch_size,
                *runs_on(name, config),
            )
            if validation_queries
            else None
        )
        results.append(
            BaselineRun(
                name,
                run,
                result,
                len(examples),
                time.monotonic() - started,
                folder,
                validation_run,
                start_score,
                kept_start,
            )
        )
        del model, encoder, evaluate
        release_freed_memory()  # a BERT training leaves GiBs of freed activations resident otherwise
        if on_model is not None:
            on_model(results[-1])
    return results


def run_rotations(
    models: Sequence[str], config: BaselineConfig, splits: pl.DataFrame, checkpoint_root: str | Path, **inputs
) -> tuple[pl.DataFrame, list[BaselineRun]]:
    """`run_baselines` once per rotation of the k folds of `splits` (test fold i, validation fold i+1 mod k, the
    rest training: GHRM's protocol), every query scored by the model whose test fold held it.

    Returns the test runs of all rotations (RUN columns plus `fold`, the rotation) and every rotation's
    results; checkpoints go to `checkpoint_root/fold-<i>/`.
    """
    k = int(splits["fold"].max()) + 1
    runs, results = [], []
    for fold in range(k):
        roles = fold_assignment(splits, fold, folds=k)
        members = {
            r: roles.filter(pl.col("role") == r)["query_id"].sort().to_list() for r in ("train", "validation", "test")
        }
        done = run_baselines(
            models,
            config,
            train_queries=members["train"],
            validation_queries=members["validation"],
            test_queries=members["test"],
            checkpoint_root=Path(checkpoint_root) / f"fold-{fold}",
            **inputs,
        )
        done = [replace(r, run=r.run.with_columns(fold=pl.lit(fold, dtype=pl.Int32))) for r in done]
        runs += [r.run for r in done]
        results += done
    return pl.concat(runs), results


def first_stage_interpolations(
    results: Sequence[BaselineRun], candidates: pl.DataFrame, qrels: pl.DataFrame, measure: str, suffix: str
) -> tuple[list[pl.DataFrame], dict[str, list[float]]]:
    """Per result with a validation run: its test run interpolated with `candidates` (run `<name>+<suffix>`)
    under the weight chosen on its own validation queries by `measure`; and the weights chosen, per name."""
    runs, weights = [], {}
    for r in results:
        if r.validation_run is None or r.validation_run.height == 0:
            continue
        mixed, choice = interpolated_run(r.validation_run, r.run, candidates, qrels, f"{r.name}+{suffix}", measure)
        extra = [c for c in r.run.columns if c not in RUN]  # e.g. fold, kept as the pure run has it
        runs.append(
            mixed.join(r.run.select("query_id", *extra).unique("query_id"), on="query_id", how="left")
            if extra
            else mixed
        )
        weights.setdefault(f"{r.name}+{suffix}", []).append(choice.weight)
    return runs, weights


def training_pairs(
    candidates: pl.DataFrame, qrels: pl.DataFrame, train_queries: Sequence[str], config: BaselineConfig
) -> pl.DataFrame:
    """NEGATIVES rows of the training queries from the candidates' top `train_depth` (only their qrels are read)."""
    wanted = pl.Series(list(train_queries), dtype=pl.String).implode()
    sampling = NegativeConfig(
        strategy="random",
        depth=config.train_depth or config.rerank_depth,
        n_per_positive=config.n_negatives,
        seed=config.seed,
    )
    return candidate_pairs(
        candidates.filter(pl.col("query_id").is_in(wanted)),
        qrels.filter(pl.col("query_id").is_in(wanted)),
        train_queries,
        sampling,
    ).negatives


def fingerprint(
    config: BaselineConfig,
    examples,
    candidates: pl.DataFrame,
    qrels: pl.DataFrame,
    validation: Sequence[str],
    test: Sequence[str],
    vectors: np.ndarray | None,
) -> str:
    """A short hash of what training reads: settings, examples, candidates, qrels, roles and vectors."""
    digest = hashlib.sha256(json.dumps(asdict(config), sort_keys=True, default=str).encode())
    digest.update(json.dumps([list(e) for e in examples]).encode())
    digest.update(json.dumps([sorted(validation), sorted(test)]).encode())
    for frame, key in ((candidates, ["query_id", "doc_id", "rank"]), (qrels, ["query_id", "doc_id", "relevance"])):
        digest.update(hashlib.sha256(frame.select(key).sort(key).write_csv().encode()).digest())
    if vectors is not None:
        digest.update(vectors.tobytes())
    return digest.hexdigest()[:12]
