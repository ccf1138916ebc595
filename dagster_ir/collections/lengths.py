"""How long a collection's queries and documents are, in a model's own words: the truncation lengths
of the word-based rankers (GHRM's M and N, the interaction baselines' Lq and Ld).

The papers fix them for their collections (GHRM: 4 query words and 300 document words on Robust04's
titles; the baselines' papers 10 and 1000 or less). A collection with longer queries loses most of
each query to such a constant (Cranfield's queries hold 10.3 content words on average: with 4 words
kept, 97% of them are cut), so the lengths come from the collection: the `percentile` (default the
90th) of its query lengths and of its document lengths, counted with the model's tokenisation (stop
words out, lemmas: what it keeps of a text), rounded up, at least 1. Documents are counted over the
first `max_docs` (a bound on the time; their order is the corpus's). The asset configs'
`query_words` and `doc_words` override them, e.g. in a collection's `assets:` settings of the YAML.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TextLengths:
    """Truncation lengths read off a collection, and how they were read."""

    query_words: int
    doc_words: int
    percentile: float
    queries: int  # how many queries and documents were counted
    docs: int


def length_percentile(texts: Iterable[str], tokenize: Callable[[str], list[str]], percentile: float) -> tuple[int, int]:
    """(the `percentile` of the texts' token counts rounded up and at least 1, the number of texts)."""
    if not 0 < percentile <= 100:
        raise ValueError(f"length_percentile: percentile must be in (0, 100], got {percentile}")
    counts = np.array([len(tokenize(text)) for text in texts], dtype=np.float64)
    if counts.size == 0:
        raise ValueError("length_percentile: no texts to count")
    return max(1, math.ceil(float(np.percentile(counts, percentile, method="linear")) - 1e-9)), int(counts.size)


def collection_lengths(
    query_texts: Iterable[str],
    doc_texts: Iterable[str],
    tokenize: Callable[[str], list[str]],
    percentile: float = 90.0,
    max_docs: int = 20_000,
) -> TextLengths:
    """The query and document truncation lengths of a collection (see the module docstring)."""
    query_words, queries = length_percentile(query_texts, tokenize, percentile)
    doc_words, docs = length_percentile(itertools.islice(doc_texts, max_docs), tokenize, percentile)
    return TextLengths(query_words, doc_words, percentile, queries, docs)
