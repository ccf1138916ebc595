"""Fine-tune a cross-encoder for reranking with LCE over (query, positive, negatives), select on dev.

`fine_tune(model, queries, corpus, negatives, config, checkpoint_dir, evaluate=None)` trains with
the shared loop (`training.train`): one example per (query, positive) of the NEGATIVES table; epoch
e takes that example's negatives e*n .. e*n + n - 1 by sample_no (n = `n_negatives`, all when None;
a list shorter than needed is cycled, counted), so a table drawn with n * epochs negatives per
positive gives every epoch fresh ones; input `[CLS] q [SEP] d [SEP]` with the document cut to fit
(FirstP). `dev_evaluator(...)` builds the `evaluate` callback: rerank the dev queries' candidates
and return the mean of a measure. With `evaluate`, the model is scored before training and after
every epoch (one epoch included); the best of those - the starting weights too when
`select_start` - is kept, so every choice is made on dev only. `FineTuned` records the curve.

Training pairs (`training_pairs`, `train_pairs: "candidates"`, the default): positives are the
judged-relevant documents within the candidate run's top `train_depth` (default: `dev_depth`, the
depth reranked) and negatives are drawn from the same top `train_depth`, so training looks like
the task: telling the relevant candidates from the others in the first stage's top k.
`train_pairs: "negatives"` trains on the shared `negatives` asset instead (every judged positive,
negatives from BM25's top 100: the recipe before). The two recipes' measurements are in the
documentation's PHP page ("How the fine-tuning recipe was measured").

PROFILES: "paper" = AdamW lr 1e-5, warm-up 0.01, weight decay 0.1, 1 epoch, batch 32, max length
512 (bert-base-uncased); "demo" = one epoch over the unit's examples capped at 40 steps of 8
examples with one negative each (wiki-car's unit has about 800 examples: half an epoch; the
collections YAML sets real budgets per collection, e.g. `epochs: 2, max_steps: 0` for Cranfield),
lr 2e-4, max length 96, on the bundled MiniLM; validation scores the start and the end.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import torch

from dagster_ir.negatives import NegativeConfig, candidate_pairs
from dagster_ir.neural.cross_encoder import (
    BUCKET_OVERHEAD_TOKENS,
    CROSS_ATTENTION,
    CrossEncoder,
    bucketed_scores,
    is_saved,
    lce_loss,
)
from dagster_ir.neural.curves import EpochCurve, epoch_curve
from dagster_ir.neural.rerank import CrossEncoderScorer, RerankConfig, rerank
from dagster_ir.neural.training import TrainConfig, TrainResult, against_start, shuffled_batches, train, unwrap
from dagster_ir.retrieval.runs import top_k
from dagster_ir.schemas import NEGATIVES, RUN, validate
from dagster_ir.storage.atomic import atomic_path, write_text_atomic

TRAIN_PAIRS = ("candidates", "negatives")


@dataclass(frozen=True)
class FineTuneConfig:
    """Cross-encoder fine-tuning settings (defaults: the paper's)."""

    backbone: str = ""  # "" = the bundled all-MiniLM-L6-v2 (the "bert" row starts here)
    n_negatives: int | None = None  # per example; None: every negative the table has for it
    max_length: int = 512
    max_query_length: int | None = 64  # None: min(64, max_length // 2)
    use_title: bool = True
    dev_depth: int = 100  # candidates reranked per dev query for model selection (= the rerank depth)
    dev_measure: str = "nDCG@10"
    score_batch_size: int = 64
    train_pairs: str = "candidates"  # "candidates": pairs from the run's top train_depth; "negatives": the table
    train_depth: int | None = None  # None: dev_depth
    select_start: bool = True  # the starting weights compete with every epoch on dev
    # a model started from the backbone: "full" | "gated" | "gated-segments" (`neural.gated_attention`);
    # None: the CrossEncoder's default for its head. A pre-trained folder keeps its own.
    cross_attention: str | None = None
    train: TrainConfig = TrainConfig(lr=1e-5, warmup_ratio=0.01, weight_decay=0.1, epochs=1, batch_size=32)

    def __post_init__(self) -> None:
        if self.n_negatives is not None and self.n_negatives < 1:
            raise ValueError(f"FineTuneConfig.n_negatives must be >= 1 or None, got {self.n_negatives}")
        if self.train_pairs not in TRAIN_PAIRS:
            raise ValueError(f"FineTuneConfig.train_pairs must be one of {TRAIN_PAIRS}, got {self.train_pairs!r}")
        if self.cross_attention not in (None, *CROSS_ATTENTION):
            raise ValueError(
                f"FineTuneConfig.cross_attention must be one of {CROSS_ATTENTION} or None, got {self.cross_attention!r}"
            )
        if self.train_depth is not None and self.train_depth < 1:
            raise ValueError(f"FineTuneConfig.train_depth must be >= 1 or None, got {self.train_depth}")

    @property
    def pair_depth(self) -> int:
        """The candidate depth training pairs come from."""
        return self.train_depth or self.dev_depth


PROFILES: dict[str, FineTuneConfig] = {
    "demo": FineTuneConfig(
        n_negatives=1, max_length=96, max_query_length=32, dev_depth=20,
        train=TrainConfig(lr=2e-4, warmup_ratio=0.1, weight_decay=0.1, epochs=1, batch_size=8, max_steps=40),
    ),
    "paper": FineTuneConfig(backbone="bert-base-uncased"),
}  # fmt: skip


@dataclass(frozen=True)
class FineTuneExample:
    query_id: str
    pos_doc_id: str
    neg_doc_ids: tuple[str, ...]


def finetune_examples(
    negatives: pl.DataFrame, n_negatives: int | None, epoch: int = 0
) -> tuple[list[FineTuneExample], int]:
    """(examples sorted by query and positive, how many had their negatives repeated to reach n).

    Epoch `epoch` takes each example's negatives epoch*n .. epoch*n + n - 1 (by sample_no, cycling).
    """
    validate(negatives, NEGATIVES, "negatives")
    grouped = (
        negatives.sort("query_id", "pos_doc_id", "sample_no")
        .group_by("query_id", "pos_doc_id", maintain_order=True)
        .agg("neg_doc_id")
    )
    width = n_negatives or (int(grouped["neg_doc_id"].list.len().max()) if grouped.height else 1)
    examples, repeated = [], 0
    for query_id, pos_doc_id, negs in grouped.iter_rows():
        if len(negs) < width * (epoch + 1 if n_negatives else 1):
            repeated += 1
        start = epoch * width if n_negatives else 0
        picked = tuple(negs[(start + i) % len(negs)] for i in range(width))
        examples.append(FineTuneExample(query_id, pos_doc_id, picked))
    return examples, repeated


def training_pairs(
    run: pl.DataFrame, qrels: pl.DataFrame, train_query_ids: Sequence[str], config: FineTuneConfig
) -> pl.DataFrame:
    """NEGATIVES rows for the training queries: positives judged relevant within the run's top
    `pair_depth`, n_negatives * epochs negatives per positive drawn from that depth (seed: the
    training seed). Only the training queries' judgements are read."""
    validate(run, RUN, "run")
    wanted = pl.Series(list(train_query_ids), dtype=pl.String).implode()
    sampling = NegativeConfig(
        strategy="random",
        depth=config.pair_depth,
        n_per_positive=(config.n_negatives or 1) * config.train.epochs,
        seed=config.train.seed,
    )
    return candidate_pairs(
        run.filter(pl.col("query_id").is_in(wanted)),
        qrels.filter(pl.col("query_id").is_in(wanted)),
        train_query_ids,
        sampling,
    ).negatives


@dataclass(frozen=True)
class FineTuned:
    """A fine-tuning's record: the training run, the examples, and what dev chose."""

    train: TrainResult
    examples: int
    start_score: float | None  # dev score of the starting weights (None without evaluate)
    kept_start: bool  # the starting weights beat every epoch on dev and were kept

    @property
    def dev_score(self) -> float | None:
        """Dev score of the weights kept."""
        if self.kept_start:
            return self.start_score
        return self.train.dev_scores[self.train.best_epoch] if self.train.dev_scores else None

    @property
    def chosen(self) -> str:
        """ "start" or "epoch <n>" (1-based)."""
        return "start" if self.kept_start else f"epoch {self.train.best_epoch + 1}"

    def curve(self) -> EpochCurve:
        """Loss and dev score per epoch, epoch 0 the start (see `neural.curves`)."""
        return epoch_curve(self.train, self.start_score, self.kept_start)


def load_model(init: str, config: FineTuneConfig, seed: int | None = None) -> CrossEncoder:
    """The cross-encoder to fine-tune: the backbone (`init` "") or a pre-trained folder (a saved
    cross-encoder keeps its own cross-attention; any other starts with `config.cross_attention`)."""
    path = init or config.backbone
    return CrossEncoder.from_pretrained(
        path,
        max_length=config.max_length,
        max_query_length=config.max_query_length,
        seed=config.train.seed if seed is None else seed,
        cross_attention=None if is_saved(path) else config.cross_attention,
    )


def _doc_texts(corpus: pl.DataFrame | pl.LazyFrame, doc_ids: pl.Series, use_title: bool) -> dict[str, str]:
    docs = corpus.lazy().join(doc_ids.to_frame("doc_id").lazy(), on="doc_id", how="semi")
    has_title = use_title and "title" in docs.collect_schema()
    text = (
        pl.concat_str([pl.col("title"), pl.col("text")], separator=" ").str.strip_chars()
        if has_title
        else pl.col("text")
    )
    frame = docs.select("doc_id", text=text).collect()
    missing = set(doc_ids.to_list()) - set(frame["doc_id"].to_list())
    if missing:
        raise ValueError(
            f"fine_tune: {len(missing)} documents of the negatives table are not in the corpus, "
            f"e.g. {sorted(missing)[:5]}"
        )
    return dict(zip(frame["doc_id"], frame["text"], strict=True))


def fine_tune(
    model: CrossEncoder,
    queries: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    negatives: pl.DataFrame,
    config: FineTuneConfig,
    checkpoint_dir: str | os.PathLike[str],
    *,
    evaluate: Callable[[torch.nn.Module], float] | None = None,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
) -> FineTuned:
    """Train `model` in place and keep the weights dev chose (see the module docstring)."""
    epochs = [finetune_examples(negatives, config.n_negatives, e)[0] for e in range(config.train.epochs)]
    examples = epochs[0]
    if not examples:
        raise ValueError("fine_tune: the negatives table is empty")
    doc_ids = pl.concat([negatives["pos_doc_id"], negatives["neg_doc_id"]]).unique()
    doc_ids_tokens = _tokenized(model, _doc_texts(corpus, doc_ids, config.use_title))
    query_text = dict(zip(queries["query_id"], queries["text"], strict=True))
    missing = {e.query_id for e in examples} - query_text.keys()
    if missing:
        raise ValueError(
            f"fine_tune: {len(missing)} queries of the negatives table have no text, e.g. {sorted(missing)[:5]}"
        )
    query_tokens = _tokenized(model, {e.query_id: query_text[e.query_id] for e in examples})

    def loss_fn(wrapped: torch.nn.Module, batch: Sequence[FineTuneExample]) -> tuple[torch.Tensor, dict]:
        bare = unwrap(wrapped)
        pairs = [
            bare.encode_pair(query_tokens[e.query_id], doc_ids_tokens[d])
            for e in batch
            for d in (e.pos_doc_id, *e.neg_doc_ids)
        ]
        # pairs of similar length share a pass, padded to their own longest (DDP allows one pass a step)
        scores = bucketed_scores(wrapped, bare, pairs, BUCKET_OVERHEAD_TOKENS if wrapped is bare else math.inf)
        return lce_loss(scores.view(len(batch), -1)), {}

    def make_batches(epoch: int, rng: np.random.Generator) -> list[list[FineTuneExample]]:
        return shuffled_batches(epochs[epoch % len(epochs)], config.train.batch_size, rng)

    result, start_score, kept_start = against_start(
        model,
        evaluate,
        lambda: train(model, make_batches, loss_fn, config.train, checkpoint_dir, on_log=on_log, evaluate=evaluate),
        keep_start=config.select_start,
    )
    return FineTuned(result, len(examples), start_score, kept_start)


def kept_dev_run(tuned: FineTuned, dev_runs: Sequence[pl.DataFrame]) -> pl.DataFrame | None:
    """The dev reranking of the weights `tuned` kept, from the `dev_evaluator` runs of one `fine_tune` in call
    order (the start, then each epoch); None when they do not line up (no validation, a resumed training)."""
    if tuned.start_score is None or len(dev_runs) != 1 + len(tuned.train.dev_scores):
        return None
    return dev_runs[0] if tuned.kept_start else dev_runs[1 + tuned.train.best_epoch]


DEV_RUN_FILE = "dev_run.parquet"  # in a fine-tuned model's folder: its reranking of the validation queries
DEV_RUN_SETTINGS = "dev_run.json"


def save_dev_run(
    folder: str | os.PathLike[str], run: pl.DataFrame, *, candidate: str, depth: int, bf16: bool, use_title: bool = True
) -> None:
    """Keep the kept weights' validation reranking beside the model (`load_dev_run` reads it back), so that
    reranking the validation queries again with the same model (`reranked_runs`' interpolation) is not needed."""
    validate(run, RUN, "dev run")
    folder = Path(folder)
    with atomic_path(folder / DEV_RUN_FILE) as tmp:
        run.write_parquet(tmp)
    write_text_atomic(folder / DEV_RUN_SETTINGS, json.dumps(_dev_run_settings(candidate, depth, bf16, use_title)))


def _dev_run_settings(candidate: str, depth: int, bf16: bool, use_title: bool) -> dict:
    return {"candidate": candidate, "depth": depth, "bf16": bool(bf16), "use_title": bool(use_title)}


def load_dev_run(
    folder: str | os.PathLike[str],
    candidates: pl.DataFrame,
    *,
    candidate: str,
    depth: int,
    bf16: bool,
    use_title: bool = True,
) -> pl.DataFrame | None:
    """The validation reranking `save_dev_run` kept in `folder`, if it reranks exactly `candidates`' top `depth`
    (the same queries and documents) from the same candidate run, texts and precision; else None."""
    folder = Path(folder)
    try:
        settings = json.loads((folder / DEV_RUN_SETTINGS).read_text(encoding="utf-8"))
        run = pl.read_parquet(folder / DEV_RUN_FILE)
    except (OSError, ValueError):
        return None
    if settings != _dev_run_settings(candidate, depth, bf16, use_title):
        return None
    pairs = top_k(candidates, depth).select("query_id", "doc_id")
    if (
        run.height != pairs.height
        or run.select("query_id", "doc_id").join(pairs, on=["query_id", "doc_id"], how="anti").height
    ):
        return None
    return run


def _tokenized(model: CrossEncoder, texts: dict[str, str]) -> dict[str, list[int]]:
    keys = list(texts)
    return dict(zip(keys, model.tokenize([texts[k] for k in keys]), strict=True))


def dev_evaluator(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    qrels: pl.DataFrame,
    dev_query_ids: Sequence[str],
    config: FineTuneConfig,
    on_run: Callable[[pl.DataFrame], None] | None = None,
) -> Callable[[torch.nn.Module], float]:
    """`evaluate` for fine_tune: mean `dev_measure` of the model's reranking of the dev queries.
    `on_run` receives each reranking (RUN rows, run name "dev"), e.g. to keep the chosen weights' one."""
    from dagster_ir.evaluation import aggregate, evaluate_run

    dev = pl.Series(list(dev_query_ids), dtype=pl.String).implode()
    dev_run = run.filter(pl.col("query_id").is_in(dev))
    dev_qrels = qrels.filter(pl.col("query_id").is_in(dev))
    if dev_run.height == 0:
        raise ValueError("dev_evaluator: the candidate run has no dev query")
    docs = corpus.lazy().join(dev_run.lazy().select("doc_id").unique(), on="doc_id", how="semi").collect()
    rerank_config = RerankConfig(depth=config.dev_depth, run_name="dev", use_title=config.use_title)

    def evaluate(model: torch.nn.Module) -> float:
        scorer = CrossEncoderScorer(
            model, batch_size=config.score_batch_size, device=str(model.device), bf16=config.train.bf16
        )
        reranked = rerank(dev_run, queries, docs, scorer, rerank_config)
        if on_run is not None:
            on_run(reranked)
        summary = aggregate(evaluate_run(reranked, dev_qrels, [config.dev_measure]))
        return float(summary["mean"][0])

    return evaluate
