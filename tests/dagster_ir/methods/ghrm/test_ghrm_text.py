"""GHRM's text preprocessing: stop words out, noun lemmas, and the graph a short text becomes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from gensim.models import KeyedVectors

from dagster_ir.methods.ghrm.inputs import GraphStore, InputConfig, build_vocabulary
from dagster_ir.methods.ghrm.text import RAW, TextConfig, lemma, stopwords, tokens

TEN_WORDS = "The geese crossed the roads and the roads met Geese"


def test_tokens_remove_stop_words_then_lemmatise():
    assert tokens(TEN_WORDS, RAW) == ["the", "geese", "crossed", "the", "roads", "and", "the", "roads", "met", "geese"]
    assert tokens(TEN_WORDS, TextConfig(remove_stopwords=True, lemmatize=False)) == [
        "geese",
        "crossed",
        "roads",
        "roads",
        "met",
        "geese",
    ]
    assert tokens(TEN_WORDS, TextConfig(remove_stopwords=False, lemmatize=True)) == [
        "the",
        "goose",
        "crossed",
        "the",
        "road",
        "and",
        "the",
        "road",
        "met",
        "goose",
    ]
    assert tokens(TEN_WORDS, TextConfig()) == ["goose", "crossed", "road", "road", "met", "goose"]


def test_noun_lemmas_and_unknown_words():
    assert [lemma(w) for w in ("cars", "wolves", "mice", "analyses", "studies")] == [
        "car",
        "wolf",
        "mouse",
        "analysis",
        "study",
    ]
    # not a noun form in the table, or not in it at all: the word itself (as WordNet's lemmatizer does)
    assert [lemma(w) for w in ("went", "xyzzyqs", "2012")] == ["went", "xyzzyqs", "2012"]


def test_stop_words_are_nltks_english_list():
    stop = stopwords()
    assert len(stop) == 179
    assert {"the", "and", "of", "was", "t", "don", "shouldn"} <= stop
    assert not {"computer", "system", "fire"} & stop  # content words some other lists drop


def test_lemmatiser_needs_no_network():
    """The lemma table loads with sockets disabled and the hubs offline (it ships in the wheel)."""
    code = (
        "import socket\n"
        "def refuse(*a, **k):\n    raise OSError('network used')\n"
        "socket.socket.connect = refuse\nsocket.create_connection = refuse\n"
        "from dagster_ir.methods.ghrm.text import tokens, TextConfig\n"
        "print(' '.join(tokens('Wolves hunted the mice', TextConfig())))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["wolf", "hunted", "mouse"]


def _vectors(words: list[str]) -> KeyedVectors:
    vectors = KeyedVectors(vector_size=len(words))
    vectors.add_vectors(words, np.eye(len(words), dtype=np.float32))
    return vectors


def test_graph_of_a_ten_word_text_by_hand():
    """Ten words -> goose crossed road road met goose -> the window-3 graph, listed by hand.

    Windows of three: (goose crossed road), (crossed road road), (road road met), (road met goose).
    Each pair of positions with different words adds 1: crossed-goose 1, goose-road 1 + 1 = 2,
    crossed-road 1 + 2 = 3, met-road 2 + 1 = 3, goose-met 1. No self-loops; degrees: crossed 4,
    goose 4, met 4, road 8; the entry is count / sqrt(d_i d_j).
    """
    config = InputConfig(min_count=1, window=3, doc_words=50)
    vocabulary = build_vocabulary([TEN_WORDS], _vectors(["crossed", "goose", "met", "road", "the", "geese"]), config)
    assert vocabulary.words == ("crossed", "goose", "met", "road")  # stop words and inflected forms never seen
    graph = GraphStore({"d": TEN_WORDS}, vocabulary, config)["d"]
    assert [vocabulary.words[i - 1] for i in graph.nodes] == ["crossed", "goose", "met", "road"]
    s = 1 / np.sqrt(32)
    expected = np.array(
        [
            # crossed goose   met    road
            [0.0, 1 / 4, 0.0, 3 * s],  # crossed
            [1 / 4, 0.0, 1 / 4, 2 * s],  # goose
            [0.0, 1 / 4, 0.0, 3 * s],  # met
            [3 * s, 2 * s, 3 * s, 0.0],  # road
        ]
    )
    np.testing.assert_allclose(graph.adjacency, expected, rtol=1e-6)
    # the raw text gives another graph: "the" and the plural forms are nodes of their own
    raw = InputConfig(min_count=1, window=3, doc_words=50, text=RAW)
    raw_vocabulary = build_vocabulary([TEN_WORDS], _vectors(["crossed", "geese", "met", "roads", "the", "and"]), raw)
    assert len(GraphStore({"d": TEN_WORDS}, raw_vocabulary, raw)["d"].nodes) == 6


def test_vocabulary_reads_queries_as_documents():
    config = InputConfig(min_count=1)
    vocabulary = build_vocabulary([TEN_WORDS], _vectors(["crossed", "goose", "met", "road"]), config)
    assert vocabulary.encode("Roads of the geese", max_words=4).tolist() == [4, 2]


@pytest.mark.parametrize("field", ["remove_stopwords", "lemmatize"])
def test_each_text_setting_changes_the_tokens(field):
    on = TextConfig()
    off = TextConfig(**{field: False})
    assert tokens(TEN_WORDS, on) != tokens(TEN_WORDS, off)
