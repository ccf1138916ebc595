"""Column names and dtypes of every table that crosses an asset boundary.

One place fixes them so that readers, writers and assets agree. `validate` checks a frame against a
schema and raises `SchemaError` naming the table and the column that is wrong.
"""

from __future__ import annotations

import polars as pl
from polars.datatypes import DataTypeClass

Schema = dict[str, pl.DataType | DataTypeClass]  # pl.String (a class) or pl.List(pl.String)

# --- Wikipedia -------------------------------------------------------------------------------
# One row per kept article segment; segment_no 1 is the lead.
SEGMENTS: Schema = {
    "article_id": pl.String,
    "title": pl.String,
    "segment_no": pl.Int32,
    "section": pl.String,  # heading path of the first paragraph in the segment, "" for the lead
    "text": pl.String,
    "n_words": pl.Int32,
}
# The stored `wiki_articles` table: SEGMENTS plus the revision each article was read from (null if
# the dump has none), so that an article in several dumps is taken from its newest revision.
ARTICLES: Schema = {**SEGMENTS, "revision_id": pl.Int64}
# Redirect pages of the article namespace: from_title -> to_title (both normalised titles).
REDIRECTS: Schema = {
    "from_title": pl.String,
    "to_title": pl.String,
}
# Every link in the kept text; anchor_start/anchor_end are character offsets into the segment text.
RAW_LINKS: Schema = {
    "src_id": pl.String,
    "src_segment": pl.Int32,
    "anchor_text": pl.String,
    "anchor_start": pl.Int32,
    "anchor_end": pl.Int32,
    "target_title": pl.String,
}
LINKS: Schema = {**RAW_LINKS, "target_id": pl.String}
LINK_GRAPH: Schema = {
    "src_id": pl.String,
    "dst_id": pl.String,
    "n_links": pl.Int32,  # links from src to dst in the kept text
    "src_first_segment": pl.Int32,  # first segment of src that links to dst
    "reciprocal": pl.Boolean,  # dst links back to src
    "back_segment": pl.Int32,  # Seg(a, d_i): segment of dst where its first link to src appears; null if none
}
PHP_GROUPS: Schema = {
    "article_id": pl.String,  # d
    "segment_no": pl.Int32,  # s
    "linked_id": pl.String,  # d_i
    "group": pl.String,  # "D1" | "D2" | "D3" | "D4"
}

# --- Collections, runs, qrels -----------------------------------------------------------------
CORPUS: Schema = {"doc_id": pl.String, "title": pl.String, "text": pl.String}
QUERIES: Schema = {"query_id": pl.String, "text": pl.String}
QRELS: Schema = {"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32}
RUN: Schema = {
    "query_id": pl.String,
    "doc_id": pl.String,
    "score": pl.Float64,
    "rank": pl.Int32,
    "run_name": pl.String,
}


# --- Evaluation (added by the evaluation package) ---------------------------------------------
# One value per run, query and measure; measure is the canonical ir_measures name ("nDCG@10").
PER_QUERY_EVAL: Schema = {
    "run_name": pl.String,
    "query_id": pl.String,
    "measure": pl.String,
    "value": pl.Float64,
}
# Mean over queries per run and measure.
SUMMARY_EVAL: Schema = {"run_name": pl.String, "measure": pl.String, "mean": pl.Float64}
# Each run against a baseline run, per measure (dagster_ir.evaluation.significance).
COMPARISON_EVAL: Schema = {
    "run_name": pl.String,
    "measure": pl.String,
    "n_queries": pl.Int64,  # queries of the run
    "mean": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "n_common": pl.Int64,  # queries shared with the baseline; what the test and delta use
    "delta": pl.Float64,  # mean of (run - baseline) over the common queries
    "delta_ci_low": pl.Float64,
    "delta_ci_high": pl.Float64,
    "t_statistic": pl.Float64,
    "p_value": pl.Float64,  # two-sided, uncorrected
    "p_adjusted": pl.Float64,  # after `correction`; equals p_value when it is "none"
    "significant": pl.Boolean,  # p_adjusted < alpha
}


# --- Query splits (added by the collections package) -----------------------------------------
# split: "train/fusion" | "train/model" | "dev" | "test"; fold: 0..k-1 for cross-validation rotation.
QUERY_SPLITS: Schema = {"query_id": pl.String, "split": pl.String, "fold": pl.Int32}


# --- Negatives (added by the negatives package) ----------------------------------------------
# Training triples: per (query, positive), sample_no 0..n-1 numbers its sampled negatives;
# neg_rank is the negative's rank in the candidate run it was drawn from.
NEGATIVES: Schema = {
    "query_id": pl.String,
    "pos_doc_id": pl.String,
    "neg_doc_id": pl.String,
    "neg_rank": pl.Int32,
    "sample_no": pl.Int32,
}


# --- Model 1 translation tables (added by the Model 1 package) -------------------------------
# One row per retained translation probability T(tgt_token | src_token); for every src_token the
# probabilities sum to 1 (EM tables; a neural export is a similarity table and need not).
MODEL1_TABLE: Schema = {"src_token": pl.String, "tgt_token": pl.String, "prob": pl.Float32}

# --- PHP pre-training examples (added by the PHP package, dagster_ir.methods.php) ----------------
# One example per (article d, segment s, positive linked article): the stage's negatives of the same
# (d, s); with_replacement: fewer negatives than asked for, so the list repeats some.
PHP_EXAMPLES: Schema = {
    "stage": pl.String,  # "hp" | "shp" | "mrds"
    "article_id": pl.String,  # d
    "segment_no": pl.Int32,  # s, the query
    "pos_id": pl.String,  # the positive d_i
    "neg_ids": pl.List(pl.String),  # n negatives
    "with_replacement": pl.Boolean,
}


# --- Pooling-bias lab (added by the CET package: dagster_ir.negatives.pooling) ------------------
# Per retriever (run_name) and candidate depth: negatives sampled uniformly from the top `depth`
# minus the simulated (sparse) labels, and how many of them the dense judgments call relevant.
FALSE_NEGATIVES: Schema = {
    "run_name": pl.String,
    "depth": pl.Int32,
    "queries": pl.Int64,  # queries with a sparse label and at least one candidate
    "negatives": pl.Int64,  # sampled negative rows
    "false_negative_share": pl.Float64,  # sampled negatives judged relevant by the dense qrels
    "expected_share": pl.Float64,  # the same share's expectation over the sampling (no sampling noise)
    "recall": pl.Float64,  # recall@depth of the run against the dense qrels, on the same queries
}


class SchemaError(ValueError):
    """A table does not have the columns or dtypes its schema fixes."""


def validate(frame: pl.DataFrame | pl.LazyFrame, schema: Schema, table: str) -> None:
    """Raise SchemaError unless `frame` has every column of `schema` with its dtype."""
    actual = frame.collect_schema() if isinstance(frame, pl.LazyFrame) else frame.schema
    for column, dtype in schema.items():
        if column not in actual:
            raise SchemaError(f"{table}: missing column {column!r} (has {list(actual)})")
        if actual[column] != dtype:
            raise SchemaError(f"{table}: column {column!r} is {actual[column]}, expected {dtype}")


def empty(schema: Schema) -> pl.DataFrame:
    """An empty frame with exactly the columns and dtypes of `schema`."""
    return pl.DataFrame(schema=schema)
