"""BM25 over any Model 1 vocabulary (word pieces, words), vectorised over a query's candidates.

Lucene's BM25 (no (k1 + 1) factor), the scorer Anserini uses:
    sum over query tokens q of idf(q) * tf / (tf + k1 * (1 - b + b * |D| / avgdl)).
It is the paper's "BM25 (bwps)" fusion baseline: BM25 on BERT word pieces, reranking the candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from dagster_ir.methods.model1.index import CollectionStats, ForwardIndex
from dagster_ir.methods.model1.vocabulary import Ragged, Vocabulary
from dagster_ir.retrieval.trec import rank_run
from dagster_ir.schemas import RUN


@dataclass(frozen=True)
class TokenBm25Config:
    """Anserini's defaults."""

    k1: float = 0.9
    b: float = 0.4


def query_idf_sums(query_tokens: Ragged, stats: CollectionStats) -> np.ndarray:
    """Sum of BM25 idf over each query's tokens (repeats count; tokens absent from the corpus don't)."""
    idf = np.where(stats.doc_freq > 0, stats.idf(), 0.0)
    return np.bincount(query_tokens.row_index(), weights=idf[query_tokens.ids], minlength=len(query_tokens))


def bm25_scores(
    query: np.ndarray,
    rows: np.ndarray,
    index: ForwardIndex,
    stats: CollectionStats,
    config: TokenBm25Config = TokenBm25Config(),
) -> np.ndarray:
    """BM25 of the documents at `rows` of the index for the query token ids `query`."""
    if query.size == 0:
        return np.zeros(rows.size)
    tokens, multiplicity = np.unique(query, return_counts=True)
    tf = index.counts[rows][:, tokens].toarray()
    norm = config.k1 * (1 - config.b + config.b * index.lengths[rows] / stats.mean_length)
    idf = np.where(stats.doc_freq[tokens] > 0, stats.idf()[tokens], 0.0)
    return (tf / (tf + norm[:, None])) @ (idf * multiplicity)


def bm25_rerank(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    vocabulary: Vocabulary,
    index: ForwardIndex,
    stats: CollectionStats,
    run_name: str,
    config: TokenBm25Config = TokenBm25Config(),
) -> pl.DataFrame:
    """BM25 over `vocabulary` for every (query, doc) of `run`; a RUN frame named `run_name`."""
    pairs = run.select("query_id", "doc_id").unique(maintain_order=True).sort("query_id", maintain_order=True)
    texts = (
        pairs.select("query_id")
        .unique(maintain_order=True)
        .join(queries, on="query_id", how="left", maintain_order="left")
    )
    tokens = vocabulary.encode(texts["text"].fill_null("").to_list())
    rows = index.rows_of(pairs["doc_id"])
    bounds = np.append(np.flatnonzero(np.diff(pairs["query_id"].rle_id().to_numpy(), prepend=-1)), pairs.height)
    scores = (
        np.concatenate(
            [
                bm25_scores(tokens.row(i), rows[a:b], index, stats, config)
                for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))
            ]
        )
        if pairs.height
        else np.zeros(0)
    )
    scored = pairs.with_columns(score=pl.Series(scores, dtype=pl.Float64), run_name=pl.lit(run_name))
    return rank_run(scored).select(list(RUN)).cast(RUN)
