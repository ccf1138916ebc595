"""A forward index (document -> token counts) and collection statistics for one vocabulary.

Model 1 scores a document through its bag of tokens P(d|D), and smooths with the collection
probability P(q|C); BM25 over word pieces needs document frequencies. Both come from one streaming
pass over the corpus: memory holds the statistics (one vector per vocabulary) and the rows of the
documents asked for, never the corpus text.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dagster_ir.lazy import lazy_module
from dagster_ir.methods.model1.bitext import document_text
from dagster_ir.methods.model1.vocabulary import Ragged, Vocabulary

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = lazy_module("scipy.sparse")


@dataclass(frozen=True)
class CollectionStats:
    """Token statistics of a collection: collection frequency `term_counts`, document frequency."""

    term_counts: np.ndarray  # float64, per token id; the unknown token counts 0
    doc_freq: np.ndarray  # int64, per token id
    n_docs: int
    n_tokens: int  # every token, unknown ones included (the denominator of P(q|C))

    def collection_probs(self, unseen_prob: float) -> np.ndarray:
        """P(t|C) for every token id: count / n_tokens, or `unseen_prob` for a token never seen."""
        probs = self.term_counts / max(self.n_tokens, 1)
        return np.where(self.term_counts > 0, probs, unseen_prob)

    def idf(self) -> np.ndarray:
        """Lucene's BM25 idf for every token id: log(1 + (N - df + 0.5) / (df + 0.5))."""
        df = self.doc_freq.astype(np.float64)
        return np.log1p((self.n_docs - df + 0.5) / (df + 0.5))

    @property
    def mean_length(self) -> float:
        return self.n_tokens / max(self.n_docs, 1)


@dataclass(frozen=True)
class ForwardIndex:
    """Token counts of documents: row i of `counts` (float32) is document ``doc_ids[i]``."""

    doc_ids: pl.Series
    counts: sp.csr_matrix
    lengths: np.ndarray  # int64 tokens per document, unknown tokens included

    def rows_of(self, doc_ids: Sequence[str] | pl.Series) -> np.ndarray:
        """The row of every doc id; an id that is not indexed is an error naming it."""
        wanted = pl.DataFrame({"doc_id": pl.Series(doc_ids, dtype=pl.String)})
        known = pl.DataFrame({"doc_id": self.doc_ids, "row": np.arange(self.doc_ids.len(), dtype=np.int64)})
        rows = wanted.join(known, on="doc_id", how="left", maintain_order="left")["row"]
        if rows.null_count():
            missing = wanted.filter(rows.is_null())["doc_id"][0]
            raise KeyError(f"document {missing!r} is not in the forward index ({rows.null_count()} missing)")
        return rows.to_numpy()

    def probabilities(self, rows: np.ndarray) -> sp.csr_matrix:
        """P(d|D) = count / |D| for the documents at `rows` (an empty document has an empty row)."""
        probs = self.counts[rows]  # a copy: fancy indexing of a CSR matrix copies
        scale = (1.0 / np.maximum(self.lengths[rows], 1)).astype(np.float32)
        probs.data *= np.repeat(scale, np.diff(probs.indptr))
        return probs


def bag_of_tokens(tokens: Ragged, vocab_size: int) -> sp.csr_matrix:
    """Counts of every token id per row, as a (rows x vocab_size) float32 CSR matrix."""
    matrix = sp.csr_matrix(
        (np.ones(tokens.ids.size, dtype=np.float32), (tokens.row_index(), tokens.ids)),
        shape=(len(tokens), vocab_size),
    )
    matrix.sum_duplicates()
    return matrix


def index_collection(
    corpus: pl.DataFrame | pl.LazyFrame,
    vocabulary: Vocabulary,
    *,
    keep: pl.Series | None = None,
    batch_size: int = 10_000,
    max_length: int | None = None,
) -> tuple[ForwardIndex, CollectionStats]:
    """One pass over a CORPUS frame: statistics of every document, forward rows of `keep` (or all).

    `max_length` cuts the forward rows (not the statistics) to each document's first tokens: what a
    model that reads only those (the neural Model 1) sees, so that its export is scored on the same text.
    """
    if max_length is not None and max_length < 1:
        raise ValueError(f"index_collection: max_length must be >= 1 or None, got {max_length}")
    n = len(vocabulary)
    term_counts, doc_freq = np.zeros(n), np.zeros(n, dtype=np.int64)
    n_docs = n_tokens = 0
    ids, matrices, lengths = [], [], []
    for batch in _batches(corpus, batch_size):
        tokens = vocabulary.encode(batch["doc_text"].to_list())
        bag = bag_of_tokens(tokens, n)
        term_counts += np.asarray(bag.sum(axis=0)).ravel()
        doc_freq += np.bincount(bag.indices, minlength=n)
        n_docs += batch.height
        n_tokens += tokens.ids.size
        chosen = (
            np.arange(batch.height)
            if keep is None
            else np.flatnonzero(batch["doc_id"].is_in(keep.implode()).to_numpy())
        )
        ids.append(batch["doc_id"].gather(chosen))
        if max_length is None:
            matrices.append(bag[chosen])
            lengths.append(tokens.lengths[chosen])
        else:
            cut = tokens.take(chosen).truncate(max_length)
            matrices.append(bag_of_tokens(cut, n))
            lengths.append(cut.lengths)
    term_counts[vocabulary.unk_id] = 0.0
    stats = CollectionStats(term_counts, doc_freq, n_docs, n_tokens)
    if not matrices:
        raise ValueError("index_collection: the corpus has no documents")
    index = ForwardIndex(pl.concat(ids), sp.vstack(matrices, format="csr"), np.concatenate(lengths))
    return index, stats


def _batches(corpus: pl.DataFrame | pl.LazyFrame, batch_size: int) -> Iterator[pl.DataFrame]:
    texts = corpus.lazy().select("doc_id", doc_text=document_text())
    total = texts.select(pl.len()).collect().item()
    for start in range(0, total, batch_size):
        yield texts.slice(start, batch_size).collect()


def collection_stats(
    corpus: pl.DataFrame | pl.LazyFrame, vocabulary: Vocabulary, *, batch_size: int = 10_000
) -> CollectionStats:
    """Statistics of every document of a CORPUS frame, without keeping a forward index."""
    _, stats = index_collection(
        corpus, vocabulary, keep=pl.Series("doc_id", [], dtype=pl.String), batch_size=batch_size
    )
    return stats
