"""Warm-start a cross-encoder by distilling a bi-encoder's scores into it (Margin-MSE).

Hofstaetter et al. 2020 ("Improving Efficient Neural Ranking Models with Cross-Architecture
Knowledge Distillation") train a student ranker on a teacher's score *margins*: for a query q and
two candidates d1, d2 the loss is `(S(q, d1) - S(q, d2) - (T(q, d1) - T(q, d2)))^2`, averaged over
the batch. Here the teacher is the bi-encoder the backbone was trained as (query and document
encoded apart, mean pooling, cosine: `retrieval.dense.BiEncoderScorer`) and the student the
cross-encoder over the same backbone (`neural.cross_encoder`, joint input `[CLS] q [SEP] d [SEP]`),
so the joint encoding learns to rank as the separate encodings did before it is fine-tuned on
relevance. Teacher scores are cosines times `teacher_scale` (the cosine head's starting scale), so
a cosine-head student starts on the teacher's scale.

Deviations from Hofstaetter et al.: the teacher is one bi-encoder (theirs: an ensemble of BERT
cross-encoders) and the student a cross-encoder (theirs: efficient students); the queries are
pseudo-queries (theirs: MS MARCO's training queries with a judged positive and a BM25 negative)
and the pairs two random candidates of the first stage's top `depth` (neither known relevant).
Deviation from the PHP paper: the paper starts every model (BERT, PHP and the Table 3 baselines)
from bert-base-uncased as released; a distilled start is a step before all of them, taken only
where validation says it helps - it is opt-in (`warm_start`), not the default.

Its measurements on Cranfield (a tie with the plain start on validation, so not the default) are in
the documentation's PHP page ("Why the joint pass ranks below the bi-encoder, and an optional warm
start").

No relevance judgement is read: the queries are pseudo-queries made from the collection
(`pseudo_queries`: each document's title, or its first words when it has none) and the candidates
any first-stage run for them (BM25's top `depth` in the pipeline). Test queries are never seen, not
even their text, so the warm start is computed once per (backbone, collection) and shared by every
fold, seed and init of that collection.

API
---
`DistillConfig` frozen settings (depth, pairs_per_query, max_queries, teacher_scale, train).
`pseudo_queries(corpus, max_queries=None, seed=0, words=12) -> QUERIES` frame ("pq:<doc_id>").
`teacher_scores(run, queries, corpus, depth, scorer=None) -> (query_id, doc_id, teacher)`: the
    teacher's score of every (query, candidate) of the run's top `depth`.
`margin_pairs(scores, pairs_per_query, rng) -> list[MarginPair]`: random candidate pairs per query
    with their teacher margin (pairs with equal teacher scores are skipped).
`margin_mse_loss(student_first, student_second, teacher_margin)`.
`distill(model, queries, corpus, scores, config, checkpoint_dir) -> Distilled`: trains `model` in
    place with the shared loop (`training.train`); `Distilled` records the loss before and after
    on the same pairs.
`warm_start(folder, *, backbone, queries, corpus, scores, config, max_length, max_query_length)
    -> Path`: the cached artifact: distils the backbone's cross-encoder once and saves it (a
    `CrossEncoder.save` folder plus `warm_start.json`, written atomically); a folder whose record
    holds the same key (backbone, settings, pseudo-queries, teacher scores) is reused as it is.
    Every model that starts "from the backbone" can then load the folder instead.
`start_record(path) -> dict | None`: that record (None for a plain backbone), for metadata.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import torch

from dagster_ir.neural.cross_encoder import COSINE_SCALE, CrossEncoder
from dagster_ir.neural.training import TrainConfig, TrainResult, shuffled_batches, train, unwrap
from dagster_ir.schemas import RUN, validate
from dagster_ir.storage.atomic import atomic_path

PSEUDO_PREFIX = "pq:"
START_FILE = "warm_start.json"


@dataclass(frozen=True)
class DistillConfig:
    """Margin-MSE warm-start settings."""

    depth: int = 20  # candidates per pseudo-query (the first stage's top depth)
    pairs_per_query: int = 4  # candidate pairs per pseudo-query and epoch
    max_queries: int | None = 2000  # pseudo-queries drawn from the collection (None: one per document)
    teacher_scale: float = COSINE_SCALE
    train: TrainConfig = TrainConfig(lr=5e-5, warmup_ratio=0.1, weight_decay=0.01, epochs=1, batch_size=16)

    def __post_init__(self) -> None:
        if self.depth < 2 or self.pairs_per_query < 1:
            raise ValueError(
                f"DistillConfig: depth must be >= 2 and pairs_per_query >= 1, got {self.depth}, {self.pairs_per_query}"
            )
        if self.max_queries is not None and self.max_queries < 1:
            raise ValueError(f"DistillConfig.max_queries must be >= 1 or None, got {self.max_queries}")


@dataclass(frozen=True)
class MarginPair:
    query_id: str
    first: str  # doc id
    second: str  # doc id
    margin: float  # teacher(q, first) - teacher(q, second)


@dataclass(frozen=True)
class Distilled:
    """A distillation's record: the training run, the pairs, the Margin-MSE before and after."""

    train: TrainResult
    pairs: int
    queries: int
    loss_before: float
    loss_after: float


def pseudo_queries(
    corpus: pl.DataFrame | pl.LazyFrame, max_queries: int | None = None, seed: int = 0, words: int = 12
) -> pl.DataFrame:
    """QUERIES rows made from documents: the title, or the text's first `words` words without one.

    At most `max_queries` documents, drawn with `seed`; ids are "pq:<doc_id>"; empty texts dropped.
    """
    frame = corpus.lazy()
    has_title = "title" in frame.collect_schema()
    first_words = pl.col("text").fill_null("").str.split(" ").list.head(words).list.join(" ")
    text = (
        pl.when(pl.col("title").fill_null("").str.strip_chars() != "").then(pl.col("title")).otherwise(first_words)
        if has_title
        else first_words
    )
    docs = frame.select("doc_id", text=text.str.strip_chars()).filter(pl.col("text") != "").collect()
    if max_queries is not None and docs.height > max_queries:
        docs = docs.sample(max_queries, seed=seed).sort("doc_id")
    return docs.select(query_id=pl.lit(PSEUDO_PREFIX) + pl.col("doc_id"), text="text")


def teacher_scores(
    run: pl.DataFrame, queries: pl.DataFrame, corpus: pl.DataFrame | pl.LazyFrame, depth: int, scorer=None
) -> pl.DataFrame:
    """(query_id, doc_id, teacher) for the run's top `depth`: the bi-encoder's score by default."""
    from dagster_ir.neural.rerank import RerankConfig, rerank
    from dagster_ir.retrieval.dense import BiEncoderScorer

    validate(run, RUN, "run")
    scored = rerank(run, queries, corpus, scorer or BiEncoderScorer(), RerankConfig(depth=depth, run_name="teacher"))
    return scored.select("query_id", "doc_id", teacher="score")


def margin_pairs(scores: pl.DataFrame, pairs_per_query: int, rng: np.random.Generator) -> list[MarginPair]:
    """`pairs_per_query` random pairs of distinct candidates per query, with the teacher's margin."""
    pairs = []
    for (query_id,), group in scores.sort("query_id", "doc_id").group_by("query_id", maintain_order=True):
        docs, values = group["doc_id"].to_list(), group["teacher"].to_numpy()
        if len(docs) < 2:
            continue
        for _ in range(pairs_per_query):
            i, j = rng.choice(len(docs), size=2, replace=False)
            if values[i] != values[j]:
                pairs.append(MarginPair(query_id, docs[i], docs[j], float(values[i] - values[j])))
    return pairs


def margin_mse_loss(first: torch.Tensor, second: torch.Tensor, teacher_margin: torch.Tensor) -> torch.Tensor:
    """Mean of ((first - second) - teacher_margin)^2 (Hofstaetter et al. 2020, eq. 1)."""
    return torch.mean(((first.float() - second.float()) - teacher_margin.float()) ** 2)


def distill(
    model: CrossEncoder,
    queries: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    scores: pl.DataFrame,
    config: DistillConfig,
    checkpoint_dir: str | os.PathLike[str],
) -> Distilled:
    """Train `model` in place to match the teacher's margins in `scores` (teacher in cosine units)."""
    epochs = [
        margin_pairs(scores, config.pairs_per_query, np.random.default_rng([config.train.seed, e]))
        for e in range(config.train.epochs)
    ]
    if not epochs[0]:
        raise ValueError("distill: no pair of candidates with different teacher scores")
    query_text = dict(zip(queries["query_id"], queries["text"], strict=True))
    doc_ids = scores["doc_id"].unique()
    docs = corpus.lazy().join(doc_ids.to_frame("doc_id").lazy(), on="doc_id", how="semi")
    text = (
        pl.concat_str([pl.col("title"), pl.col("text")], separator=" ").str.strip_chars()
        if "title" in docs.collect_schema()
        else pl.col("text")
    )
    frame = docs.select("doc_id", text=text).collect()
    doc_tokens = dict(zip(frame["doc_id"], model.tokenize(frame["text"].to_list()), strict=True))
    wanted = sorted({p.query_id for p in epochs[0]})
    missing = [q for q in wanted if q not in query_text]
    if missing:
        raise ValueError(f"distill: {len(missing)} queries of the teacher scores have no text, e.g. {missing[:5]}")
    query_tokens = dict(zip(wanted, model.tokenize([query_text[q] for q in wanted]), strict=True))

    def loss_of(wrapped: torch.nn.Module, batch: Sequence[MarginPair]) -> torch.Tensor:
        bare = unwrap(wrapped)
        encoded = [
            bare.encode_pair(query_tokens[p.query_id], doc_tokens[d]) for p in batch for d in (p.first, p.second)
        ]
        out = wrapped(**bare.collate(encoded)).view(len(batch), 2)
        margin = torch.tensor([p.margin * config.teacher_scale for p in batch], device=out.device)
        return margin_mse_loss(out[:, 0], out[:, 1], margin)

    def mean_loss(pairs: Sequence[MarginPair]) -> float:
        was_training = model.training
        model.eval()
        with torch.inference_mode():
            total = sum(
                float(loss_of(model, pairs[s : s + 64])) * len(pairs[s : s + 64]) for s in range(0, len(pairs), 64)
            )
        model.train(was_training)
        return total / len(pairs)

    before = mean_loss(epochs[0])
    result = train(
        model,
        lambda e, rng: shuffled_batches(epochs[e % len(epochs)], config.train.batch_size, rng),
        lambda m, b: (loss_of(m, b), {}),
        config.train,
        checkpoint_dir,
    )
    return Distilled(result, len(epochs[0]), len(wanted), before, mean_loss(epochs[0]))


def start_record(path: str | os.PathLike[str]) -> dict | None:
    """The warm start's record in `path` (`warm_start.json`), None when the folder has none."""
    file = Path(path) / START_FILE
    if not file.is_file():
        return None
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{file}: not valid JSON ({error})") from error


def warm_start(
    folder: str | os.PathLike[str],
    *,
    backbone: str,
    queries: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    scores: pl.DataFrame,
    config: DistillConfig,
    max_length: int = 512,
    max_query_length: int | None = None,
) -> Path:
    """Distil the backbone's cross-encoder into `folder` once (see the module docstring); reuse it after."""
    from dagster_ir.neural.backbone import backbone_path

    folder = Path(folder)
    frames = [queries.sort("query_id").hash_rows().sum(), scores.sort("query_id", "doc_id").hash_rows().sum()]
    key = hashlib.blake2b(
        json.dumps(
            [
                backbone_path(backbone),
                dataclasses.asdict(config),
                max_length,
                max_query_length,
                [int(v) for v in frames],
            ],
            sort_keys=True,
            default=str,
        ).encode(),
        digest_size=8,
    ).hexdigest()
    record = start_record(folder) if folder.is_dir() else None
    if record is not None and record.get("key") == key:
        return folder
    started = time.monotonic()
    model = CrossEncoder.from_pretrained(
        backbone, max_length=max_length, max_query_length=max_query_length, seed=config.train.seed
    )
    result = distill(model, queries, corpus, scores, config, folder.with_name(folder.name + ".checkpoints"))
    with atomic_path(folder, directory=True) as tmp:
        model.write_into(tmp)
        (Path(tmp) / START_FILE).write_text(
            json.dumps(
                {
                    "start": "margin-mse",
                    "teacher": "bi-encoder",
                    "backbone": backbone or "bundled",
                    "key": key,
                    "queries": result.queries,
                    "pairs": result.pairs,
                    "steps": result.train.steps,
                    "loss_before": result.loss_before,
                    "loss_after": result.loss_after,
                    "seconds": round(time.monotonic() - started, 1),
                    "config": dataclasses.asdict(config),
                },
                indent=1,
            ),
            encoding="utf-8",
        )
    return folder
