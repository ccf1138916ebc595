"""What the interaction baselines read: word ids padded to fixed lengths, IDF and word2vec vectors.

Text is read by a `tokenize` function the caller passes (the assets pass GHRM's `text.tokens` with
the word2vec asset's settings, so every word the vectors know is found). The vocabulary holds the
collection's words that have a vector, ids 1..V (0 pads); IDF is log(n_docs / df) over the
collection; vectors are scaled to unit length, so a dot product is a cosine and a padded position
(the zero row) has similarity 0 with everything.

A batch is a dict of tensors (what `dagster_ir.neural.training.train` slices): `query` (B, Lq) and
`doc` (B, Ld) word ids right-padded with 0 to the encoder's fixed lengths, `query_idf` (B, Lq).
Fixed lengths, because DUET's and PACRR's layers are sized by them (the papers fix them too).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

Tokenize = Callable[[str], list[str]]


@dataclass(frozen=True, eq=False)
class WordVocabulary:
    """Word ids 1..V (0 pads), their IDF and unit-length vectors (row 0 is zero)."""

    words: tuple[str, ...]
    idf: np.ndarray  # float32 (V + 1,)
    vectors: np.ndarray  # float32 (V + 1, dim)
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {word: i + 1 for i, word in enumerate(self.words)})
        if self.idf.shape != (len(self.words) + 1,) or self.vectors.shape[0] != len(self.words) + 1:
            raise ValueError("WordVocabulary: idf and vectors need one row per word plus the padding row 0")

    def __len__(self) -> int:
        return len(self.words)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])


def build_word_vocabulary(
    texts: Iterable[str], tokenize: Tokenize, vectors: Mapping[str, np.ndarray] | object, min_count: int = 1
) -> WordVocabulary:
    """The words of `texts` seen `min_count`+ times that `vectors` knows (`word in vectors`, `vectors[word]`)."""
    counts: Counter[str] = Counter()
    document_frequency: Counter[str] = Counter()
    n_docs = 0
    for text in texts:
        seen = tokenize(text)
        counts.update(seen)
        document_frequency.update(set(seen))
        n_docs += 1
    kept = sorted(w for w, c in counts.items() if c >= min_count and w in vectors)
    if not kept:
        raise ValueError(
            f"build_word_vocabulary: no word of the {n_docs} texts occurs {min_count}+ times and has a vector"
        )
    df = np.array([document_frequency[w] for w in kept], dtype=np.float64)
    idf = np.concatenate([[0.0], np.log(n_docs / df)]).astype(np.float32)
    matrix = np.stack([np.asarray(vectors[w], dtype=np.float32) for w in kept])
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return WordVocabulary(tuple(kept), idf, np.vstack([np.zeros((1, unit.shape[1]), np.float32), unit]))


class WordEncoder:
    """Turns (query_id, doc_id) pairs into padded batches; texts are encoded once and kept."""

    def __init__(self, vocabulary: WordVocabulary, tokenize: Tokenize, query_words: int, doc_words: int) -> None:
        if query_words < 1 or doc_words < 1:
            raise ValueError(f"WordEncoder: query_words and doc_words must be >= 1, got {query_words}, {doc_words}")
        self.vocabulary, self.tokenize = vocabulary, tokenize
        self.query_words, self.doc_words = query_words, doc_words
        self.queries: dict[str, np.ndarray] = {}
        self.docs: dict[str, np.ndarray] = {}

    def ids(self, text: str, limit: int) -> np.ndarray:
        """Ids of the first `limit` in-vocabulary words of `text` (unpadded)."""
        found = [i for i in map(self.vocabulary.index.get, self.tokenize(text)) if i is not None]
        return np.asarray(found[:limit], dtype=np.int64)

    def add_texts(self, queries: Mapping[str, str], docs: Mapping[str, str]) -> None:
        """Encode queries and documents (id -> text) for later batches."""
        self.queries.update({q: self.ids(t, self.query_words) for q, t in queries.items()})
        self.docs.update({d: self.ids(t, self.doc_words) for d, t in docs.items()})

    def batch(self, pairs: Sequence[tuple[str, str]]) -> dict[str, torch.Tensor]:
        """query (B, Lq), doc (B, Ld), query_idf (B, Lq) for (query_id, doc_id) pairs."""
        query = np.zeros((len(pairs), self.query_words), dtype=np.int64)
        doc = np.zeros((len(pairs), self.doc_words), dtype=np.int64)
        for row, (query_id, doc_id) in enumerate(pairs):
            if query_id not in self.queries or doc_id not in self.docs:
                missing = f"query {query_id!r}" if query_id not in self.queries else f"document {doc_id!r}"
                raise KeyError(f"WordEncoder: {missing} was not added (add_texts)")
            q, d = self.queries[query_id], self.docs[doc_id]
            query[row, : len(q)], doc[row, : len(d)] = q, d
        query_t = torch.from_numpy(query)
        return {
            "query": query_t,
            "doc": torch.from_numpy(doc),
            "query_idf": torch.from_numpy(self.vocabulary.idf)[query_t],
        }


def frozen_embedding(vectors: np.ndarray, trainable: bool = False) -> torch.nn.Embedding:
    """An embedding layer holding `vectors` (row 0 = padding), frozen unless `trainable`."""
    layer = torch.nn.Embedding.from_pretrained(
        torch.as_tensor(vectors, dtype=torch.float32), freeze=not trainable, padding_idx=0
    )
    return layer


def cosine_matrix(query: torch.Tensor, doc: torch.Tensor, embedding: torch.nn.Embedding) -> torch.Tensor:
    """cos(q_i, d_j) (B, Lq, Ld) of unit-length embeddings; 0 wherever either side is padding."""
    q = torch.nn.functional.normalize(embedding(query), dim=-1)
    d = torch.nn.functional.normalize(embedding(doc), dim=-1)
    return torch.bmm(q, d.transpose(1, 2))


def pair_mask(query: torch.Tensor, doc: torch.Tensor) -> torch.Tensor:
    """(B, Lq, Ld) float: 1 where both the query term and the document word are real."""
    return ((query > 0).unsqueeze(2) & (doc > 0).unsqueeze(1)).float()
