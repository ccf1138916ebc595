"""Per-query score normalisation before linear fusion: a run's scores divided by a per-query norm.

What the norm is belongs to the caller (Model 1's fusion divides BM25 by the query's idf sum, see
`dagster_ir.methods.model1.bm25.query_idf_sums`), so that one weight suits every query.
"""

from __future__ import annotations

import polars as pl


def divide_by_query(run: pl.DataFrame, norms: pl.DataFrame, *, column: str = "score") -> pl.DataFrame:
    """`column` divided by the query's `norm` (query_id, norm); a norm <= 0 or missing leaves it as is."""
    joined = run.join(norms.select("query_id", "norm"), on="query_id", how="left", maintain_order="left")
    norm = pl.when(pl.col("norm") > 0).then(pl.col("norm")).otherwise(1.0)
    return joined.with_columns((pl.col(column) / norm).alias(column)).drop("norm")
