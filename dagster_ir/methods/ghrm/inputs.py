"""GHRM's inputs: from texts to padded batches of query-document graphs.

Text. Words are `text.tokens` under `InputConfig.text`: lower-cased, NLTK's stop words removed,
each word replaced by its noun lemma (the paper's preprocessing, section 4.1.3; see `text`). The
vocabulary holds the collection's words seen at least `min_count` times (paper: 10) that have a
vector; other words are dropped before truncation, so a document keeps its first `doc_words` (N)
known words and a query its first `query_words` (M). IDF is log(n_docs / df) over the collection.
The paper fixes M and N per collection (4 and 300 on Robust04's titles); the `ghrm_runs` asset reads
them off each collection instead (`dagster_ir.collections.lengths`: the 90th percentile of its
query and document lengths in these words), since a constant made for titles cuts longer queries.

Graph (paper section 3.2). The nodes of a document's graph are its n unique words. Edge weights
count co-occurrences in a sliding window: every window of `window` consecutive words (the whole
document when it is shorter) adds 1 for each pair of positions in it holding different words, so
two positions d < window apart count (window - d) times away from the ends. The diagonal is 0
(eq. 2: A_ij = count(i, j) if i != j, 0 otherwise; the authors' code adds no self-loops either)
and the adjacency is normalised as D^-1/2 A D^-1/2 with D the row sums; a node without neighbours
keeps a zero row. `self_loop` > 0 puts that weight on the diagonal first (Kipf and Welling's
renormalisation, which the paper cites), as an option.

Node features depend on the query: S[i, j] = cos(e(node i), e(query term j)), an n x M matrix. The
graph itself does not, so `GraphStore` builds each document's graph once and `collate` pads a
batch to its largest graph (zero rows and columns, a node mask) and to M query terms (a term mask).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from dagster_ir.lazy import lazy_module
from dagster_ir.methods.ghrm.text import TextConfig, tokens

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

if TYPE_CHECKING:
    from gensim.models import KeyedVectors


@dataclass(frozen=True)
class InputConfig:
    """Truncation, vocabulary and graph settings (paper: N=300, M=4 on Robust04; 500, 5 on ClueWeb09-B)."""

    doc_words: int = 300  # N: a document's first N known words
    query_words: int = 4  # M: a query's first M known words
    min_count: int = 10  # words seen fewer times in the collection are dropped
    window: int = 5  # sliding co-occurrence window (not given in the paper; the authors' code uses 5)
    self_loop: float = 0.0  # weight on A's diagonal before normalising (eq. 2 and the authors: none)
    text: TextConfig = TextConfig()  # stop words and lemmas; must match the word2vec vectors' settings

    def __post_init__(self) -> None:
        for name in ("doc_words", "query_words", "min_count"):
            if getattr(self, name) < 1:
                raise ValueError(f"InputConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.window < 2:
            raise ValueError(f"InputConfig.window must be >= 2, got {self.window}")
        if self.self_loop < 0:
            raise ValueError(f"InputConfig.self_loop must be >= 0, got {self.self_loop}")


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """Word ids 1..V (0 pads), their IDF and unit-length vectors (row 0 is zero); `text` says how texts are read."""

    words: tuple[str, ...]
    idf: np.ndarray  # float32 (V + 1,)
    vectors: np.ndarray  # float32 (V + 1, dim)
    text: TextConfig
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {word: i + 1 for i, word in enumerate(self.words)})
        if self.idf.shape != (len(self.words) + 1,) or self.vectors.shape[0] != len(self.words) + 1:
            raise ValueError("Vocabulary: idf and vectors need one row per word plus the padding row 0")

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, text: str, max_words: int) -> np.ndarray:
        """Ids of the first `max_words` in-vocabulary words of `text` (int64, unpadded)."""
        ids = [i for i in map(self.index.get, tokens(text, self.text)) if i is not None]
        return np.asarray(ids[:max_words], dtype=np.int64)


def build_vocabulary(texts: Iterable[str], vectors: KeyedVectors, config: InputConfig) -> Vocabulary:
    """The collection's words with count >= min_count and a vector, sorted, with IDF from `texts`."""
    counts: Counter[str] = Counter()
    document_frequency: Counter[str] = Counter()
    n_docs = 0
    for text in texts:
        seen = tokens(text, config.text)
        counts.update(seen)
        document_frequency.update(set(seen))
        n_docs += 1
    kept = sorted(w for w, c in counts.items() if c >= config.min_count and w in vectors.key_to_index)
    if not kept:
        raise ValueError(f"build_vocabulary: no word occurs {config.min_count}+ times and has a vector")
    df = np.array([document_frequency[w] for w in kept], dtype=np.float64)
    idf = np.concatenate([[0.0], np.log(n_docs / df)]).astype(np.float32)
    matrix = np.stack([vectors[w] for w in kept]).astype(np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return Vocabulary(tuple(kept), idf, np.vstack([np.zeros((1, unit.shape[1]), np.float32), unit]), config.text)


# --- graphs -------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class DocGraph:
    """A document's graph: node word ids (sorted, unique) and the normalised n x n adjacency."""

    nodes: np.ndarray  # int64 (n,)
    adjacency: np.ndarray  # float32 (n, n)


def window_counts(ids: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """(unique ids, symmetric co-occurrence counts) of a word sequence; see the module docstring."""
    ids = np.asarray(ids, dtype=np.int64)
    nodes, node_of = np.unique(ids, return_inverse=True)
    counts = np.zeros((len(nodes), len(nodes)), dtype=np.float64)
    length = len(ids)
    span = min(window, length)  # a short document is one window
    for distance in range(1, span):
        first = np.arange(length - distance)
        # window starts s with s <= first and first + distance <= s + span - 1, s in 0..length - span
        windows = np.minimum(first, length - span) - np.maximum(0, first + distance - span + 1) + 1
        a, b = node_of[first], node_of[first + distance]
        differ = a != b
        np.add.at(counts, (a[differ], b[differ]), windows[differ])
        np.add.at(counts, (b[differ], a[differ]), windows[differ])
    return nodes, counts


def normalise_adjacency(counts: np.ndarray, self_loop: float) -> np.ndarray:
    """D^-1/2 (counts + self_loop I) D^-1/2, D the row sums; nodes without edges get zero rows."""
    adjacency = counts + self_loop * np.eye(len(counts))
    degree = adjacency.sum(axis=1)
    scale = np.divide(1.0, np.sqrt(degree), out=np.zeros_like(degree), where=degree > 0)
    return (scale[:, None] * adjacency * scale[None, :]).astype(np.float32)


def build_graph(ids: np.ndarray, config: InputConfig) -> DocGraph:
    """The graph of a document given as word ids (already truncated)."""
    nodes, counts = window_counts(ids, config.window)
    return DocGraph(nodes, normalise_adjacency(counts, config.self_loop))


class GraphStore:
    """Each document's graph, built on first use from its text and kept."""

    def __init__(self, texts: Mapping[str, str], vocabulary: Vocabulary, config: InputConfig) -> None:
        self._texts = texts
        self._vocabulary = vocabulary
        self._config = config
        self._graphs: dict[str, DocGraph] = {}

    def __getitem__(self, doc_id: str) -> DocGraph:
        graph = self._graphs.get(doc_id)
        if graph is None:
            if doc_id not in self._texts:
                raise KeyError(f"GraphStore: document {doc_id!r} is not in the corpus")
            ids = self._vocabulary.encode(self._texts[doc_id], self._config.doc_words)
            graph = self._graphs[doc_id] = build_graph(ids, self._config)
        return graph

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._texts


# --- batches ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphBatch:
    """B padded query-document graphs: what `GHRM.forward` reads."""

    similarity: torch.Tensor  # (B, n, M) cosine of node and query term; 0 where either is padding
    adjacency: torch.Tensor  # (B, n, n) normalised; 0 on padded rows and columns
    node_mask: torch.Tensor  # (B, n) bool, True for real nodes
    query_idf: torch.Tensor  # (B, M)
    query_mask: torch.Tensor  # (B, M) bool, True for real query terms

    def __len__(self) -> int:
        return self.similarity.shape[0]


def collate(
    graphs: Sequence[DocGraph], queries: Sequence[np.ndarray], vocabulary: Vocabulary, query_words: int
) -> GraphBatch:
    """Pad `graphs` (one per item) and their `queries` (word ids, at most `query_words`) into a batch."""
    if len(graphs) != len(queries):
        raise ValueError(f"collate: {len(graphs)} graphs for {len(queries)} queries")
    size = max([1, *(len(g.nodes) for g in graphs)])
    node_ids = np.zeros((len(graphs), size), dtype=np.int64)
    adjacency = np.zeros((len(graphs), size, size), dtype=np.float32)
    query_ids = np.zeros((len(graphs), query_words), dtype=np.int64)
    for row, (graph, query) in enumerate(zip(graphs, queries, strict=True)):
        n = len(graph.nodes)
        node_ids[row, :n] = graph.nodes
        adjacency[row, :n, :n] = graph.adjacency
        query_ids[row, : len(query)] = query[:query_words]
    vectors = torch.from_numpy(vocabulary.vectors)
    nodes, terms = torch.from_numpy(node_ids), torch.from_numpy(query_ids)
    similarity = torch.bmm(vectors[nodes], vectors[terms].transpose(1, 2))
    return GraphBatch(
        similarity=similarity,
        adjacency=torch.from_numpy(adjacency),
        node_mask=nodes > 0,
        query_idf=torch.from_numpy(vocabulary.idf)[terms],
        query_mask=terms > 0,
    )
