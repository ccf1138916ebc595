"""Per-query score normalisation before linear fusion (as in the paper).

BM25 scores are divided by the sum of the query terms' IDF values, Model 1 log-scores by the query
length (`Model1Scorer` already returns log P(Q|D) / |Q|), so that one weight suits every query.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from dagster_ir.models.model1.index import CollectionStats
from dagster_ir.models.model1.vocabulary import Ragged


def query_idf_sums(query_tokens: Ragged, stats: CollectionStats) -> np.ndarray:
    """Sum of BM25 idf over each query's tokens (repeats count; tokens absent from the corpus don't)."""
    idf = np.where(stats.doc_freq > 0, stats.idf(), 0.0)
    return np.bincount(query_tokens.row_index(), weights=idf[query_tokens.ids], minlength=len(query_tokens))


def divide_by_query(run: pl.DataFrame, norms: pl.DataFrame, *, column: str = "score") -> pl.DataFrame:
    """`column` divided by the query's `norm` (query_id, norm); a norm <= 0 or missing leaves it as is."""
    joined = run.join(norms.select("query_id", "norm"), on="query_id", how="left", maintain_order="left")
    norm = pl.when(pl.col("norm") > 0).then(pl.col("norm")).otherwise(1.0)
    return joined.with_columns((pl.col(column) / norm).alias(column)).drop("norm")
