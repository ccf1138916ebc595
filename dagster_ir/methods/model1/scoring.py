"""Model 1 scoring, vectorised over all candidates of a query, and its explanation.

    log P(Q|D) = 1/|Q| * sum over query tokens q of log[(1 - lambda) * sum_d T(q|d) P(d|D) + lambda * P(q|C)]

P(d|D) and P(q|C) are maximum-likelihood estimates; a query token the collection never contains
gets P(q|C) = `unseen_prob`. For the candidates of one query the inner sums are one product,
``P(d|D) [docs x V, sparse] @ T[:, query tokens] [V x |q|, made dense]``; the log-terms are summed
with the multiplicity of each query token and divided by the query length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dagster_ir.lazy import lazy_module
from dagster_ir.methods.model1.index import CollectionStats, ForwardIndex, bag_of_tokens
from dagster_ir.methods.model1.table import TranslationTable
from dagster_ir.retrieval.trec import rank_run
from dagster_ir.schemas import QUERIES, RUN, validate

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = lazy_module("scipy.sparse")


@dataclass(frozen=True)
class ScoringConfig:
    """lam: weight of the collection model (lambda); unseen_prob: P(q|C) of a token never seen
    (the paper: "a small number, e.g. 10^-?"; default 1e-9)."""

    lam: float = 0.1
    unseen_prob: float = 1e-9

    def __post_init__(self) -> None:
        if not 0 < self.lam <= 1 or not 0 < self.unseen_prob < 1:
            raise ValueError(f"ScoringConfig: need 0 < lam <= 1 and 0 < unseen_prob < 1: {self}")


class Model1Scorer:
    """Scores documents of a forward index for queries with a translation table."""

    def __init__(
        self, table: TranslationTable, index: ForwardIndex, stats: CollectionStats, config: ScoringConfig
    ) -> None:
        if table.matrix.shape[1] != index.counts.shape[1]:
            raise ValueError(f"table has {table.matrix.shape[1]} tokens, index {index.counts.shape[1]}")
        self.table = table
        self.index = index
        self.config = config
        self.collection_probs = stats.collection_probs(config.unseen_prob)

    @property
    def vocabulary(self):
        return self.table.vocabulary

    def score_rows(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """log P(Q|D) / |Q| of the documents at `rows` of the index for the query token ids `query`.

        The counts of those rows times the query's table columns, then divided by each length: the
        same as P(d|D) @ T, without a scaled copy of the rows (equal to float32 rounding).
        """
        scale = (1.0 / np.maximum(self.index.lengths[rows], 1)).astype(np.float32)
        return self._score(query, self.index.counts[rows], scale)

    def score_probabilities(self, query: np.ndarray, doc_probs: sp.csr_matrix) -> np.ndarray:
        """log P(Q|D) / |Q| for documents given as P(d|D) rows; 0 for every document if Q is empty."""
        return self._score(query, doc_probs, None)

    def _score(self, query: np.ndarray, bags: sp.csr_matrix, scale: np.ndarray | None) -> np.ndarray:
        if query.size == 0:
            return np.zeros(bags.shape[0])
        tokens, multiplicity = np.unique(query, return_counts=True)
        # Sparse rows times a dense (vocabulary x query tokens) block: one pass over the rows'
        # non-zeros, where a sparse x sparse product also builds a sparse result.
        translated = bags @ self._dense_columns(tokens)
        if scale is not None:
            translated *= scale[:, None]
        lam = self.config.lam
        inner = (1.0 - lam) * translated + lam * self.collection_probs[tokens]
        return (np.log(inner) @ multiplicity) / query.size

    def _dense_columns(self, tokens: np.ndarray) -> np.ndarray:
        """T(q|.) of the query tokens `tokens` as a dense (vocabulary x len(tokens)) array."""
        columns = self.table.by_target[:, tokens]
        dense = np.zeros((columns.shape[0], tokens.size), dtype=columns.dtype)
        dense[columns.indices, np.repeat(np.arange(tokens.size), np.diff(columns.indptr))] = columns.data
        return dense

    def score_texts(self, query: str, documents: list[str]) -> np.ndarray:
        """Scores of documents given as text (tokenised here, not looked up in the index)."""
        tokens = self.vocabulary.encode(documents)
        bag = bag_of_tokens(tokens, len(self.vocabulary))
        scale = (1.0 / np.maximum(tokens.lengths, 1)).astype(np.float32)
        bag.data *= np.repeat(scale, np.diff(bag.indptr))
        return self.score_probabilities(self.vocabulary.encode([query]).row(0), bag)

    def rerank(self, run: pl.DataFrame, queries: pl.DataFrame, run_name: str) -> pl.DataFrame:
        """Score every (query, doc) of `run` and rank by it; a RUN frame named `run_name`."""
        validate(run, RUN, "run")
        validate(queries, QUERIES, "queries")
        pairs = run.select("query_id", "doc_id").unique(maintain_order=True).sort("query_id", maintain_order=True)
        known = queries.filter(pl.col("query_id").is_in(pairs["query_id"].unique().implode()))
        missing = pairs.join(known, on="query_id", how="anti")
        if missing.height:
            raise KeyError(f"rerank: query {missing['query_id'][0]!r} of the run has no text")
        query_tokens = self.vocabulary.encode(known["text"].to_list())
        position = {qid: i for i, qid in enumerate(known["query_id"].to_list())}
        rows = self.index.rows_of(pairs["doc_id"])
        scores = np.empty(pairs.height)
        for (qid,), start, end in _groups(pairs["query_id"]):
            scores[start:end] = self.score_rows(query_tokens.row(position[qid]), rows[start:end])
        scored = pairs.with_columns(score=pl.Series(scores), run_name=pl.lit(run_name))
        return rank_run(scored).select(list(RUN)).cast(RUN)

    def explain(self, query: str, document: str, *, top_k: int = 3) -> pl.DataFrame:
        """Each query token's contribution to log P(Q|D) / |Q| and its top document tokens.

        Columns: position, query_token, contribution (the contributions sum to the score),
        translation ((1 - lambda) * sum_d T(q|d) P(d|D)), smoothing (lambda * P(q|C)),
        doc_tokens and doc_weights (the `top_k` largest (1 - lambda) T(q|d) P(d|D), largest first).
        """
        query_ids = self.vocabulary.encode([query]).row(0)
        doc = self.vocabulary.encode([document])
        doc_ids, counts = np.unique(doc.ids, return_counts=True)
        doc_probs = counts / max(doc.ids.size, 1)
        lam = self.config.lam
        weights = (1.0 - lam) * self.table.matrix[doc_ids][:, query_ids].toarray().T * doc_probs
        translation = weights.sum(axis=1)
        smoothing = lam * self.collection_probs[query_ids]
        order = np.argsort(-weights, axis=1, kind="stable")[:, :top_k]
        tokens = self.vocabulary.tokens
        return pl.DataFrame(
            {
                "position": np.arange(query_ids.size, dtype=np.int32),
                "query_token": [tokens[i] for i in query_ids],
                "contribution": np.log(translation + smoothing) / max(query_ids.size, 1),
                "translation": translation,
                "smoothing": smoothing,
                "doc_tokens": [[tokens[doc_ids[j]] for j in row if w[j] > 0] for row, w in zip(order, weights)],
                "doc_weights": [[float(w[j]) for j in row if w[j] > 0] for row, w in zip(order, weights)],
            },
            schema_overrides={"doc_tokens": pl.List(pl.String), "doc_weights": pl.List(pl.Float64)},
        )


def _groups(sorted_keys: pl.Series):
    """((key,), start, end) for each run of equal values of an already grouped column."""
    if sorted_keys.len() == 0:
        return []
    change = sorted_keys.rle_id().to_numpy()
    starts = np.flatnonzero(np.diff(change, prepend=-1))
    ends = np.append(starts[1:], sorted_keys.len())
    values = sorted_keys.gather(starts).to_list()
    return [((v,), int(a), int(b)) for v, a, b in zip(values, starts, ends, strict=True)]


def explanation_markdown(query: str, document: str, explained: pl.DataFrame, *, doc_chars: int = 160) -> str:
    """A Markdown block for one explained pair: the query, the start of the document, one row per query token."""
    text = " ".join(document.split())
    lines = [
        f"**{query}** - {text[:doc_chars]}{'...' if len(text) > doc_chars else ''}",
        "",
        "| query token | contribution | top document tokens (weight) |",
        "|---|---:|---|",
    ]
    for row in explained.iter_rows(named=True):
        tops = ", ".join(f"{t} ({w:.2g})" for t, w in zip(row["doc_tokens"], row["doc_weights"], strict=True))
        lines.append(f"| {row['query_token']} | {row['contribution']:.3f} | {tops or '-'} |")
    total = explained["contribution"].sum()
    lines.append(f"| **log P(Q\\|D) / \\|Q\\|** | **{total:.3f}** | |")
    return "\n".join(lines)
