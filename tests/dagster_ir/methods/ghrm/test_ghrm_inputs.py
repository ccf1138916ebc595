"""GHRM inputs: window co-occurrence counts, adjacency normalisation, vocabulary, padded batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gensim.models import KeyedVectors

from dagster_ir.methods.ghrm.inputs import (
    DocGraph,
    GraphStore,
    InputConfig,
    Vocabulary,
    build_graph,
    build_vocabulary,
    collate,
    normalise_adjacency,
    window_counts,
)
from dagster_ir.methods.ghrm.text import RAW, TextConfig


def _counts_by_enumerating_windows(ids: list[int], window: int) -> dict[tuple[int, int], int]:
    """TextING's definition, spelled out: every window, every pair of positions with different words."""
    windows = [ids] if len(ids) <= window else [ids[s : s + window] for s in range(len(ids) - window + 1)]
    counts: dict[tuple[int, int], int] = {}
    for span in windows:
        for p in range(len(span)):
            for q in range(p + 1, len(span)):
                if span[p] != span[q]:
                    for key in ((span[p], span[q]), (span[q], span[p])):
                        counts[key] = counts.get(key, 0) + 1
    return counts


def test_window_counts_by_hand():
    # words a=1 b=2 c=3 in "a b c a", window 3: windows (a b c), (b c a)
    # (a,b): 1 + 1 (b with the second a) = 2; (a,c): 1 + 1 = 2; (b,c): 1 + 1 = 2; a with a: never
    nodes, counts = window_counts(np.array([1, 2, 3, 1]), window=3)
    assert nodes.tolist() == [1, 2, 3]
    np.testing.assert_array_equal(counts, [[0, 2, 2], [2, 0, 2], [2, 2, 0]])
    # "a b c d" window 2: only neighbours, once each
    _, counts = window_counts(np.array([1, 2, 3, 4]), window=2)
    np.testing.assert_array_equal(counts, [[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 1, 0]])


@pytest.mark.parametrize("window", [2, 3, 5, 20])
def test_window_counts_match_enumerated_windows(window):
    ids = np.random.default_rng(window).integers(1, 7, size=17).tolist()
    nodes, counts = window_counts(np.array(ids), window)
    expected = _counts_by_enumerating_windows(ids, window)
    position = {node: i for i, node in enumerate(nodes.tolist())}
    got = {
        (a, b): counts[position[a], position[b]]
        for a in nodes.tolist()
        for b in nodes.tolist()
        if counts[position[a], position[b]]
    }
    assert got == expected


def test_window_counts_of_tiny_documents():
    nodes, counts = window_counts(np.array([4]), window=5)
    assert nodes.tolist() == [4] and counts.tolist() == [[0.0]]
    nodes, counts = window_counts(np.array([], dtype=np.int64), window=5)
    assert nodes.shape == (0,) and counts.shape == (0, 0)


def test_normalise_adjacency_by_hand():
    # path a - b - c with weights 2 and 1, no self-loops (the default): degrees 2, 3, 1
    counts = np.array([[0.0, 2.0, 0.0], [2.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    expected = np.array([[0.0, 2 / np.sqrt(6), 0.0], [2 / np.sqrt(6), 0.0, 1 / np.sqrt(3)], [0.0, 1 / np.sqrt(3), 0.0]])
    np.testing.assert_allclose(normalise_adjacency(counts, self_loop=InputConfig().self_loop), expected, rtol=1e-6)
    assert np.all(np.diag(build_graph(np.array([1, 2, 1, 3]), InputConfig()).adjacency) == 0.0)
    # with self-loops 1: A = [[1,2,0],[2,1,1],[0,1,1]], degrees 3, 4, 2
    counts = np.array([[0.0, 2.0, 0.0], [2.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    expected = np.array(
        [
            [1 / 3, 2 / np.sqrt(12), 0.0],
            [2 / np.sqrt(12), 1 / 4, 1 / np.sqrt(8)],
            [0.0, 1 / np.sqrt(8), 1 / 2],
        ]
    )
    np.testing.assert_allclose(normalise_adjacency(counts, self_loop=1.0), expected, rtol=1e-6)
    # without self-loops an isolated node has degree 0 and stays a zero row
    isolated = normalise_adjacency(np.zeros((2, 2)), self_loop=0.0)
    assert np.all(isolated == 0.0)


def test_self_loop_and_window_change_the_graph():
    ids = np.array([1, 2, 3, 4, 1, 5])
    base = build_graph(ids, InputConfig(window=2))
    assert not np.allclose(base.adjacency, build_graph(ids, InputConfig(window=4)).adjacency)
    assert not np.allclose(base.adjacency, build_graph(ids, InputConfig(window=2, self_loop=1.0)).adjacency)


def _vectors(words: list[str], rows: list[list[float]]) -> KeyedVectors:
    vectors = KeyedVectors(vector_size=len(rows[0]))
    vectors.add_vectors(words, np.asarray(rows, dtype=np.float32))
    return vectors


def test_vocabulary_min_count_idf_stopwords_and_unit_vectors():
    texts = ["Cat dog cat", "dog the bird", "the cat"]
    vectors = _vectors(["cat", "dog", "the", "bird"], [[3, 4], [1, 0], [0, 2], [5, 5]])
    vocabulary = build_vocabulary(texts, vectors, InputConfig(min_count=2, text=RAW))
    assert vocabulary.words == ("cat", "dog", "the")  # bird is seen once
    np.testing.assert_allclose(vocabulary.idf, [0.0, np.log(3 / 2), np.log(3 / 2), np.log(3 / 2)], rtol=1e-6)
    np.testing.assert_allclose(vocabulary.vectors[1], [0.6, 0.8], rtol=1e-6)
    assert vocabulary.encode("The bird saw a CAT, a dog", max_words=2).tolist() == [3, 1]
    without_stopwords = build_vocabulary(texts, vectors, InputConfig(min_count=2))
    assert without_stopwords.words == ("cat", "dog")
    assert without_stopwords.encode("The bird saw a CAT, a dog", max_words=2).tolist() == [1, 2]
    # lemmas are counted together: "cats" and "cat" make one word seen twice
    lemmatised = build_vocabulary(["cats dog", "cat"], vectors, InputConfig(min_count=2))
    assert lemmatised.words == ("cat",)
    assert build_vocabulary(
        ["cats dog", "cat", "dog"], vectors, InputConfig(min_count=2, text=TextConfig(lemmatize=False))
    ).words == ("dog",)


def test_vocabulary_needs_a_known_word():
    with pytest.raises(ValueError, match="no word occurs"):
        build_vocabulary(["rare words only"], _vectors(["x"], [[1.0]]), InputConfig(min_count=2))


def _tiny_vocabulary() -> Vocabulary:
    unit = np.array([[0, 0], [1, 0], [0, 1], [0.6, 0.8]], dtype=np.float32)
    return Vocabulary(("a", "b", "c"), np.array([0, 1.0, 2.0, 3.0], dtype=np.float32), unit, RAW)


def test_collate_pads_graphs_and_queries():
    vocabulary = _tiny_vocabulary()
    small = DocGraph(np.array([1]), np.ones((1, 1), dtype=np.float32))
    large = DocGraph(np.array([1, 2, 3]), np.full((3, 3), 0.5, dtype=np.float32))
    batch = collate([small, large], [np.array([3]), np.array([2, 1])], vocabulary, query_words=3)
    assert batch.similarity.shape == (2, 3, 3) and batch.adjacency.shape == (2, 3, 3)
    assert batch.node_mask.tolist() == [[True, False, False], [True, True, True]]
    assert batch.query_mask.tolist() == [[True, False, False], [True, True, False]]
    torch.testing.assert_close(batch.query_idf, torch.tensor([[3.0, 0.0, 0.0], [2.0, 1.0, 0.0]]))
    # node a against query term c: cos = 0.6; padded rows and columns are 0
    torch.testing.assert_close(batch.similarity[0], torch.tensor([[0.6, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    torch.testing.assert_close(batch.similarity[1, :, :2], torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.8, 0.6]]))
    assert batch.adjacency[0].sum() == 1.0


def test_graph_store_truncates_documents_and_names_missing_ones():
    vocabulary = _tiny_vocabulary()
    store = GraphStore({"d1": "a b c a b c"}, vocabulary, InputConfig(doc_words=2))
    assert store["d1"].nodes.tolist() == [1, 2]
    with pytest.raises(KeyError, match="d9"):
        store["d9"]
