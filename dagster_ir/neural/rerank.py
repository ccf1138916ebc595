"""Rerank the top of a candidate run with a pair scorer.

`rerank(run, queries, corpus, scorer, config) -> RUN` keeps the top `config.depth` documents of every
query (by rank), scores each (query text, document text) pair with `scorer.score_pairs` and ranks
them by that score (ties keep the candidate order, and tied scores are nudged down by a few float64
steps, `retrieval.runs.strictly_decreasing`, so an evaluator that re-sorts by score keeps it). Every candidate of the top `depth` appears
exactly once: reranking only reorders. Documents below `depth` are left out of the result.

`CrossEncoderScorer(model, batch_size, device, bf16, fast)` is the scorer for a `CrossEncoder`: every
distinct query and document is tokenised once (one fast-tokenizer call for all queries, one for all
documents), pairs are sorted by length and batched with dynamic padding (each batch padded to its
longest pair, so short pairs cost little), and scored under `torch.inference_mode` in eval mode,
scores returned in input order. On the CPU a BERT model runs through `retrieval.fast_bert.FastBert` (the same
arithmetic with kept buffers and, for the [CLS] head, a [CLS]-only last layer; the cosine head reads
every token's last-layer state; a gated cross-attention model's gates and position ids go with it:
scores equal the model's forward within 1e-5); `fast=False`, other architectures and GPUs run the
model's own forward. `bf16` (default off)
is opt-in bfloat16: on the CPU it needs native bf16 (AVX-512 BF16 or AMX; refused otherwise) and
moves scores by about 1e-3 - the reranking benchmark checks that nDCG@10 of a reranked Cranfield run
stays within 0.002 of fp32. Any object with `score_pairs(queries, docs) -> np.ndarray` can stand in
for the scorer (other methods' scorers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import polars as pl
import torch

from dagster_ir.neural.cross_encoder import CrossEncoder, Pair, pad_pairs
from dagster_ir.retrieval.fast_bert import FastBert, bf16_supported
from dagster_ir.retrieval.runs import strictly_decreasing, top_k
from dagster_ir.schemas import RUN, validate


class PairScorer(Protocol):
    """Anything that scores (query text, document text) pairs, higher = more relevant."""

    def score_pairs(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class RerankConfig:
    """How deep to rerank, and what the result is called."""

    depth: int = 100
    run_name: str = "reranked"
    use_title: bool = True  # document text = "title text" when the corpus has a title
    queries_per_chunk: int = 1000  # bounds the pairs held in memory at once

    def __post_init__(self) -> None:
        if self.depth < 1 or self.queries_per_chunk < 1:
            raise ValueError(
                f"RerankConfig: depth and queries_per_chunk must be >= 1, got {self.depth}, {self.queries_per_chunk}"
            )


def score_encoded(
    model: torch.nn.Module,
    pairs: Sequence[Pair],
    pad_id: int,
    *,
    batch_size: int = 64,
    device: str | torch.device = "cpu",
    bf16: bool = False,
    fast: bool = True,
) -> np.ndarray:
    """Scores of encoded pairs in input order: length-sorted batches, dynamic padding, inference mode.

    `fast`: run a CPU BERT model through `FastBert` (see the module docstring); `bf16`: bfloat16.
    """
    if batch_size < 1:
        raise ValueError(f"score_encoded: batch_size must be >= 1, got {batch_size}")
    scores = np.empty(len(pairs), dtype=np.float64)
    order = np.argsort([-len(p) for p in pairs], kind="stable")  # longest first: memory errors surface early
    was_training = model.training
    model.eval()
    device = torch.device(device)
    inner = model.model if type(model) is CrossEncoder else None  # exactly ours: a subclass may score differently
    use_fast = fast and inner is not None and device.type == "cpu"
    gates = model.gate_values() if inner is not None else None  # gated cross-attention's g per layer
    engine = FastBert.for_model(inner, bf16=bf16, gates=gates) if use_fast else None
    uses_token_types = getattr(model, "uses_token_types", True)
    try:
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16 and engine is None):
            for start in range(0, len(order), batch_size):
                chosen = order[start : start + batch_size]
                batch = pad_pairs([pairs[i] for i in chosen], pad_id, device)
                if engine is not None:
                    types = batch["token_type_ids"] if uses_token_types else None
                    positions = model.position_ids(batch["token_type_ids"])  # None: the model's own 0..L-1
                    if model.head == "cosine":  # every token's last-layer state, then the head
                        states = engine.hidden_states(
                            batch["input_ids"], batch["attention_mask"], types, batch["token_type_ids"], positions
                        )
                        out = model.score_states(states, batch["attention_mask"], batch["token_type_ids"])
                    else:
                        out = engine.scores(
                            batch["input_ids"], batch["attention_mask"], types, batch["token_type_ids"], positions
                        )
                else:
                    out = model(**batch)
                scores[chosen] = out.float().cpu().numpy()
    finally:
        model.train(was_training)
    return scores


class CrossEncoderScorer:
    """`PairScorer` for a CrossEncoder (tokenise each distinct text once, then `score_encoded`)."""

    def __init__(
        self, model: CrossEncoder, *, batch_size: int = 64, device: str = "cpu", bf16: bool = False, fast: bool = True
    ):
        check_bf16(bf16, device)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"CrossEncoderScorer: batch_size must be an int >= 1, got {batch_size!r}")
        self.model = model.to(device)
        self.batch_size = batch_size
        self.device = device
        self.bf16 = bf16
        self.fast = fast

    def encode(self, queries: Sequence[str], docs: Sequence[str]) -> list[Pair]:
        """The model's pair encoding of every (query, doc), tokenising each distinct text once."""
        query_ids = _tokenize_unique(self.model, queries)
        doc_ids = _tokenize_unique(self.model, docs)
        return [self.model.encode_pair(query_ids[q], doc_ids[d]) for q, d in zip(queries, docs, strict=True)]

    def score_pairs(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
        pairs = self.encode(queries, docs)
        return score_encoded(
            self.model,
            pairs,
            self.model.tokenizer.pad_token_id,
            batch_size=self.batch_size,
            device=self.device,
            bf16=self.bf16,
            fast=self.fast,
        )


def check_bf16(bf16: object, device: str | torch.device) -> None:
    """Raise unless `bf16` is a bool, and a CPU asked for bf16 has native bf16 arithmetic."""
    if not isinstance(bf16, bool):
        raise TypeError(f"bf16 must be True or False, got {bf16!r}")
    if bf16 and torch.device(device).type == "cpu" and not bf16_supported():
        raise ValueError(
            "bf16=True on the CPU needs AVX-512 BF16 or AMX, which this CPU lacks "
            "(emulated bf16 is slower than fp32); set bf16=False"
        )


def _tokenize_unique(model: CrossEncoder, texts: Sequence[str]) -> dict[str, list[int]]:
    unique = list(dict.fromkeys(texts))
    return dict(zip(unique, model.tokenize(unique), strict=True))


def rerank(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    scorer: PairScorer,
    config: RerankConfig = RerankConfig(),
) -> pl.DataFrame:
    """RUN rows: the top `depth` of `run` per query, reordered by `scorer` (see the module docstring)."""
    validate(run, RUN, "run")
    if run["run_name"].n_unique() > 1:
        raise ValueError(f"rerank: one candidate run at a time, got {run['run_name'].unique().sort().to_list()}")
    top = top_k(run, config.depth).select("query_id", "doc_id", candidate_rank="rank")
    texts = _pair_texts(top, queries, corpus, config)
    query_ids = texts["query_id"].unique(maintain_order=True)
    parts = []
    for start in range(0, len(query_ids), config.queries_per_chunk):
        chunk = texts.filter(pl.col("query_id").is_in(query_ids[start : start + config.queries_per_chunk].implode()))
        scores = np.asarray(scorer.score_pairs(chunk["query_text"].to_list(), chunk["doc_text"].to_list()))
        if scores.shape != (chunk.height,):
            raise ValueError(f"rerank: the scorer returned {scores.shape} scores for {chunk.height} pairs")
        parts.append(chunk.select("query_id", "doc_id", "candidate_rank", score=pl.Series(scores, dtype=pl.Float64)))
    scored = pl.concat(parts) if parts else top.with_columns(score=pl.lit(0.0))
    return _ranked(scored, config.run_name)


def _pair_texts(top: pl.DataFrame, queries: pl.DataFrame, corpus, config: RerankConfig) -> pl.DataFrame:
    """`top` with query_text and doc_text; an error names the first ids without text."""
    query_text = queries.select("query_id", query_text="text")
    docs = corpus.lazy().join(top.lazy().select("doc_id").unique(), on="doc_id", how="semi")
    has_title = config.use_title and "title" in docs.collect_schema()
    doc_text = (
        pl.concat_str([pl.col("title"), pl.col("text")], separator=" ").str.strip_chars()
        if has_title
        else pl.col("text")
    )
    doc_texts = docs.select("doc_id", doc_text=doc_text).unique("doc_id").collect()
    joined = top.join(query_text, on="query_id", how="left").join(doc_texts, on="doc_id", how="left")
    for column, key in [("query_text", "query_id"), ("doc_text", "doc_id")]:
        missing = joined.filter(pl.col(column).is_null())[key].unique().sort()
        if len(missing):
            raise ValueError(f"rerank: no text for {len(missing)} {key}s of the run, e.g. {missing.head(5).to_list()}")
    return joined


def _ranked(scored: pl.DataFrame, run_name: str) -> pl.DataFrame:
    ordered = scored.sort(["query_id", "score", "candidate_rank"], descending=[False, True, False])
    return strictly_decreasing(
        ordered.select(
            "query_id",
            "doc_id",
            "score",
            rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("query_id"),
            run_name=pl.lit(run_name, dtype=pl.String),
        ).select(list(RUN))
    ).sort(["query_id", "rank"])
