"""The pooling-bias lab: sparse training labels simulated from dense judgments, and false negatives.

Large training sets are labelled inside a pool (Cai et al., CIKM 2022, section 3.2): a basic
retriever, the *pooling system*, returns its top `pool_depth` documents for a query, annotators
judge only those, and at most a few relevant ones get a label (MS MARCO keeps about one per query,
from Bing's top 10). Everything else is *unlabelled*; sampled as a negative, an unlabelled relevant
document is a *false negative*, and a stronger retriever ranks more of them near the top.

A collection with dense judgments (every relevant document known: Cranfield, wiki-car, TREC DL)
makes this measurable:

* `simulate_sparse_labels` plays the labelling: for each query, the relevant documents (dense
  relevance > 0) inside the pooling run's top `pool_depth` are the candidates for a label, and at
  most `max_labels` of them are kept - chosen uniformly at random with a generator seeded by
  (seed, query id) (`selection="random"`), or the highest ranked (`selection="top"`, an annotator
  reading the pool in rank order). A query whose pool holds no relevant document gets no label (it
  cannot be used for training, as in MS MARCO, where such queries do not exist). Labels keep the
  dense relevance grade.
* `false_negative_analysis` samples negatives, as a trainer would, uniformly from each retriever's
  top `depth` minus the sparse labels, and reports per (retriever, depth) the share of them that
  the dense judgments call relevant (the paper's Figure 1 analysis), that share's expectation
  (no sampling noise), and the retriever's recall@depth.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import polars as pl

from dagster_ir.lazy import lazy_module
from dagster_ir.negatives.sampling import NegativeConfig, false_negative_share, sample_negatives
from dagster_ir.retrieval.runs import recall_at_k, top_k
from dagster_ir.schemas import FALSE_NEGATIVES, QRELS, RUN, validate

if TYPE_CHECKING:
    from matplotlib.figure import Figure

if TYPE_CHECKING:
    import matplotlib.figure as mpl_figure
else:
    mpl_figure = lazy_module("matplotlib.figure")

Selection = Literal["random", "top"]


@dataclass(frozen=True)
class PoolingConfig:
    """How the sparse labels are made: the pool's depth, labels kept per query, which ones.

    `pool_run` names the pooling system's run among the candidate runs (the asset picks it; the
    functions here take the run itself).
    """

    pool_run: str = "bm25"
    pool_depth: int = 10
    max_labels: int = 1
    selection: Selection = "random"
    seed: int = 42

    def __post_init__(self) -> None:
        if self.selection not in ("random", "top"):
            raise ValueError(f"PoolingConfig.selection: 'random' or 'top', not {self.selection!r}")
        for name in ("pool_depth", "max_labels"):
            if getattr(self, name) < 1:
                raise ValueError(f"PoolingConfig.{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class LabelCounts:
    """What the simulated labelling kept, over the requested queries."""

    queries: int  # requested queries
    labelled_queries: int  # queries that got at least one label
    labels: int  # rows of the sparse qrels
    relevant: int  # relevant (query, doc) pairs of the requested queries in the dense qrels
    pooled_relevant: int  # of those, inside the pool


@dataclass(frozen=True)
class SparseLabels:
    """A QRELS frame of simulated training labels and the counts that describe it."""

    qrels: pl.DataFrame
    counts: LabelCounts


def simulate_sparse_labels(
    pool_run: pl.DataFrame,
    dense_qrels: pl.DataFrame,
    query_ids: Iterable[str],
    config: PoolingConfig = PoolingConfig(),
) -> SparseLabels:
    """Sparse labels for `query_ids`: at most `max_labels` relevant documents of the pool each.

    Rows come sorted by (query_id, doc_id). See the module docstring for the rules.
    """
    validate(pool_run, RUN, "pool_run")
    validate(dense_qrels, QRELS, "dense_qrels")
    if pool_run["run_name"].n_unique() > 1:
        raise ValueError(
            f"simulate_sparse_labels: pool_run holds several runs "
            f"({pool_run['run_name'].unique().sort().to_list()}); pass one"
        )
    wanted = pl.Series("query_id", list(query_ids), pl.String).unique()
    is_wanted = pl.col("query_id").is_in(wanted.implode())
    relevant = dense_qrels.filter(is_wanted & (pl.col("relevance") > 0)).unique(["query_id", "doc_id"])
    pool = top_k(pool_run.filter(is_wanted), config.pool_depth).select("query_id", "doc_id", "rank")
    pooled = relevant.join(pool, on=["query_id", "doc_id"]).sort("query_id", "rank", "doc_id")
    kept = _choose_labels(pooled, config)
    qrels = kept.select(QRELS.keys()).sort("query_id", "doc_id")
    counts = LabelCounts(
        queries=wanted.len(),
        labelled_queries=qrels["query_id"].n_unique(),
        labels=qrels.height,
        relevant=relevant.height,
        pooled_relevant=pooled.height,
    )
    return SparseLabels(qrels, counts)


def _choose_labels(pooled: pl.DataFrame, config: PoolingConfig) -> pl.DataFrame:
    """At most `max_labels` rows per query of `pooled` (sorted by query, rank, doc_id)."""
    if config.selection == "top":
        return pooled.filter(pl.int_range(pl.len()).over("query_id") < config.max_labels)
    keep = np.zeros(pooled.height, dtype=bool)
    starts = np.flatnonzero(np.diff(pooled["query_id"].rle_id().to_numpy(), prepend=-1))
    ends = np.append(starts[1:], pooled.height)
    query_ids = pooled["query_id"].to_list()
    for start, end in zip(starts.tolist(), ends.tolist()):
        size = end - start
        if size <= config.max_labels:
            keep[start:end] = True
            continue
        rng = np.random.default_rng([config.seed, _stable_hash(query_ids[start])])
        keep[start + rng.choice(size, size=config.max_labels, replace=False)] = True
    return pooled.filter(pl.Series(keep))


def _stable_hash(text: str) -> int:
    """A 64-bit hash of `text` that is the same in every process (unlike `hash`)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def false_negative_analysis(
    runs: pl.DataFrame,
    sparse_qrels: pl.DataFrame,
    dense_qrels: pl.DataFrame,
    query_ids: Iterable[str],
    depths: Sequence[int],
    n_per_positive: int = 1,
    seed: int = 42,
) -> pl.DataFrame:
    """FALSE_NEGATIVES rows per (retriever, depth): how many sampled negatives are in fact relevant.

    For every run of `runs` and every depth, negatives are drawn as `sample_negatives` draws them
    (uniformly, `n_per_positive` per sparse label, from the top `depth` minus the labels) for the
    `query_ids` with a label; `false_negative_share` is the share of those rows that `dense_qrels`
    judges relevant and `expected_share` its expectation: per query the relevant share of the
    candidate pool, weighted by the query's number of labels. `recall` is recall@depth against
    `dense_qrels` on the same queries.
    """
    validate(runs, RUN, "runs")
    validate(sparse_qrels, QRELS, "sparse_qrels")
    validate(dense_qrels, QRELS, "dense_qrels")
    if not depths:
        raise ValueError("false_negative_analysis: no depths")
    labelled = sparse_qrels.filter(pl.col("relevance") > 0)
    wanted = pl.Series("query_id", list(query_ids), pl.String).unique()
    queries = labelled.filter(pl.col("query_id").is_in(wanted.implode()))["query_id"].unique().sort()
    if queries.len() == 0:
        raise ValueError("false_negative_analysis: none of the requested queries has a sparse label")
    rows = []
    for (name,), run in runs.partition_by("run_name", as_dict=True, maintain_order=True).items():
        for depth in sorted(set(depths)):
            rows.append(_analyse(name, run, labelled, dense_qrels, queries, depth, n_per_positive, seed))
    return pl.DataFrame(rows, schema=FALSE_NEGATIVES, orient="row")


def _analyse(
    name: str,
    run: pl.DataFrame,
    labelled: pl.DataFrame,
    dense_qrels: pl.DataFrame,
    queries: pl.Series,
    depth: int,
    n_per_positive: int,
    seed: int,
) -> tuple:
    config = NegativeConfig(strategy="random", depth=depth, n_per_positive=n_per_positive, seed=seed)
    sample = sample_negatives(run, labelled, queries, config)
    sampled = false_negative_share(sample.negatives, dense_qrels) if sample.negatives.height else float("nan")
    expected = _expected_share(run, labelled, dense_qrels, queries, depth)
    in_queries = pl.col("query_id").is_in(queries.implode())
    recall = recall_at_k(run.filter(in_queries), dense_qrels.filter(in_queries), depth)
    return (name, depth, sample.counts.queries, sample.negatives.height, sampled, expected, recall)


def _expected_share(
    run: pl.DataFrame, labelled: pl.DataFrame, dense_qrels: pl.DataFrame, queries: pl.Series, depth: int
) -> float:
    """Expected share of relevant sampled negatives: pool relevant shares weighted by labels per query."""
    relevant = dense_qrels.filter(pl.col("relevance") > 0).select("query_id", "doc_id", relevant=pl.lit(True))
    pools = (
        top_k(run.filter(pl.col("query_id").is_in(queries.implode())), depth)
        .join(labelled, on=["query_id", "doc_id"], how="anti")
        .join(relevant.unique(["query_id", "doc_id"]), on=["query_id", "doc_id"], how="left")
        .group_by("query_id")
        .agg(share=pl.col("relevant").fill_null(False).mean())
    )
    weights = labelled.group_by("query_id").agg(labels=pl.len())
    weighted = pools.join(weights, on="query_id")
    if weighted.height == 0:
        return float("nan")
    return float((weighted["share"] * weighted["labels"]).sum() / weighted["labels"].sum())


def false_negative_plot(analysis: pl.DataFrame, title: str = "False negatives by retriever and depth") -> Figure:
    """Two panels against depth (log scale), one line per retriever: the expected false-negative
    share of sampled negatives, and recall@depth against the dense judgments."""
    validate(analysis, FALSE_NEGATIVES, "false-negative analysis")
    fig = mpl_figure.Figure(figsize=(9, 3.6), layout="constrained")
    share_ax, recall_ax = fig.subplots(1, 2)
    for (name,), part in analysis.sort("depth").partition_by("run_name", as_dict=True, maintain_order=True).items():
        depth = part["depth"].to_numpy()
        share_ax.plot(depth, part["expected_share"].to_numpy(), marker="o", label=name)
        recall_ax.plot(depth, part["recall"].to_numpy(), marker="o", label=name)
    for ax, label in ((share_ax, "share of negatives that are relevant"), (recall_ax, "recall@depth (dense qrels)")):
        ax.set_xscale("log")
        ax.set_xlabel("negative sampling depth (top-k)")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
    if analysis.height:
        share_ax.legend(loc="upper right")
    fig.suptitle(title)
    return fig
