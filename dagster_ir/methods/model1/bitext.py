"""The parallel corpus Model 1 learns from: training queries paired with chunks of relevant documents.

Queries are one or two orders of magnitude shorter than documents, so (as in the paper) each relevant
document is split into contiguous chunks whose length is comparable to the query's, and every chunk
is paired with the query. The corpus is symmetrised (Jeon et al.): each pair appears in both
directions, so T(q|d) is learned from chunk -> query and query -> chunk alike.

A `Bitext` holds aligned source and target token rows; `iter_bitext` yields it in blocks of pairs, so
a corpus of any size passes through bounded memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import polars as pl

from dagster_ir.methods.model1.vocabulary import Ragged, Vocabulary, ragged_arange


@dataclass(frozen=True)
class BitextConfig:
    """How documents become chunks.

    chunk_ratio: chunk length = max(min_chunk, ceil(chunk_ratio * query length)) tokens.
    min_chunk: the shortest chunk length.
    symmetric: add every pair in the reverse direction too (the paper does).
    block_pairs: (query, document) pairs tokenised and chunked at a time.
    """

    chunk_ratio: float = 1.5
    min_chunk: int = 4
    symmetric: bool = True
    block_pairs: int = 20_000

    def __post_init__(self) -> None:
        if self.chunk_ratio <= 0 or self.min_chunk < 1 or self.block_pairs < 1:
            raise ValueError(f"BitextConfig: chunk_ratio > 0, min_chunk >= 1, block_pairs >= 1: {self}")


@dataclass(frozen=True)
class Bitext:
    """Aligned sentence pairs: ``source.row(i)`` translates into ``target.row(i)``."""

    source: Ragged
    target: Ragged

    def __post_init__(self) -> None:
        if len(self.source) != len(self.target):
            raise ValueError(f"Bitext: {len(self.source)} source rows, {len(self.target)} target rows")

    def __len__(self) -> int:
        return len(self.source)

    def without_empty(self) -> Bitext:
        keep = np.flatnonzero((self.source.lengths > 0) & (self.target.lengths > 0))
        return self if keep.size == len(self) else Bitext(self.source.take(keep), self.target.take(keep))


def chunk_pairs(query_tokens: Ragged, doc_tokens: Ragged, config: BitextConfig) -> Bitext:
    """Pair query i with every chunk of document i (row i of both arrays); source = chunk.

    Returns the chunk -> query direction only; `symmetrise` adds the other.
    """
    if len(query_tokens) != len(doc_tokens):
        raise ValueError(f"{len(query_tokens)} queries, {len(doc_tokens)} documents: need one each")
    chunk_len = np.maximum(config.min_chunk, np.ceil(config.chunk_ratio * query_tokens.lengths))
    chunk_len = chunk_len.astype(np.int64)
    lengths = doc_tokens.lengths
    pair_of = np.repeat(np.arange(len(doc_tokens)), lengths)
    local = ragged_arange(lengths)
    starts = np.flatnonzero(local % chunk_len[pair_of] == 0)  # first position of every chunk
    chunk_lengths = np.diff(np.append(starts, local.size))
    source = Ragged.from_lengths(doc_tokens.ids, chunk_lengths)
    target = query_tokens.take(pair_of[starts])
    return Bitext(source, target)


def symmetrise(bitext: Bitext) -> Bitext:
    """Every pair in both directions: the original rows, then the reversed ones."""
    source = _concat(bitext.source, bitext.target)
    target = _concat(bitext.target, bitext.source)
    return Bitext(source, target)


def _concat(a: Ragged, b: Ragged) -> Ragged:
    return Ragged.from_lengths(np.concatenate([a.ids, b.ids]), np.concatenate([a.lengths, b.lengths]))


def training_pairs(queries: pl.DataFrame, qrels: pl.DataFrame, query_ids: pl.Series) -> pl.DataFrame:
    """(query_id, doc_id) for every relevant document (relevance > 0) of the given queries."""
    chosen = query_ids.unique().implode()
    relevant = qrels.filter((pl.col("relevance") > 0) & pl.col("query_id").is_in(chosen))
    known = relevant.join(queries.select("query_id"), on="query_id", how="semi")
    return known.select("query_id", "doc_id").unique().sort("query_id", "doc_id")


def iter_bitext(
    pairs: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    vocabulary: Vocabulary,
    config: BitextConfig,
) -> Iterator[Bitext]:
    """Blocks of the (symmetrised) parallel corpus for `pairs` (query_id, doc_id).

    Texts come from `queries` (query_id, text) and `corpus` (doc_id, title, text); unknown tokens
    are dropped from the bitext (Model 1 must not learn translations of ``[UNK]``).
    """
    texts = _pair_texts(pairs, queries, corpus)
    for start in range(0, texts.height, config.block_pairs):
        block = texts.slice(start, config.block_pairs)
        query_tokens = _known(vocabulary.encode(block["query_text"].to_list()), vocabulary.unk_id)
        doc_tokens = _known(vocabulary.encode(block["doc_text"].to_list()), vocabulary.unk_id)
        bitext = chunk_pairs(query_tokens, doc_tokens, config)
        if config.symmetric:
            bitext = symmetrise(bitext)
        bitext = bitext.without_empty()
        if len(bitext):
            yield bitext


def _pair_texts(pairs: pl.DataFrame, queries: pl.DataFrame, corpus: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """pairs + query_text + doc_text (title and text); a pair whose document is missing is an error."""
    docs = (
        corpus.lazy()
        .join(pairs.lazy().select("doc_id").unique(), on="doc_id", how="semi")
        .select("doc_id", doc_text=document_text())
        .collect()
    )
    texts = pairs.join(queries.select("query_id", query_text="text"), on="query_id", how="left")
    texts = texts.join(docs, on="doc_id", how="left", maintain_order="left")
    missing = texts.filter(pl.col("doc_text").is_null())
    if missing.height:
        raise ValueError(
            f"parallel corpus: relevant document {missing['doc_id'][0]!r} is not in the corpus ({missing.height} pairs)"
        )
    return texts


def document_text() -> pl.Expr:
    """A corpus row's text as the index sees it: title, newline, text."""
    return pl.concat_str([pl.col("title").fill_null(""), pl.col("text").fill_null("")], separator="\n")


def _known(tokens: Ragged, unk_id: int) -> Ragged:
    keep = tokens.ids != unk_id
    if keep.all():
        return tokens
    lengths = np.bincount(tokens.row_index()[keep], minlength=len(tokens))
    return Ragged.from_lengths(tokens.ids[keep], lengths)
