"""word2vec for GHRM: tokenisation, deterministic CBOW training, word2vec-format files."""

from __future__ import annotations

import numpy as np
import pytest

from dagster_ir.methods.ghrm.text import RAW, words
from dagster_ir.methods.ghrm.word2vec import Word2VecConfig, load_vectors, save_vectors, train_word2vec

TEXTS = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"] * 20
SMALL = Word2VecConfig(dim=8, epochs=2, min_count=5, seed=3, text=RAW)


def test_words_lowercases_and_splits_on_non_alphanumerics():
    assert words("Übermensch's 2 CATS, e-mail_x!") == ["übermensch", "s", "2", "cats", "e", "mail", "x"]


def test_training_is_deterministic_and_respects_min_count():
    first, second = train_word2vec(TEXTS, SMALL), train_word2vec(TEXTS, SMALL)
    assert first.vector_size == 8
    assert sorted(first.key_to_index) == sorted(["the", "cat", "sat", "on", "mat", "dog", "log", "a", "and"])
    np.testing.assert_array_equal(first.vectors, second.vectors)
    assert "mat" not in train_word2vec(TEXTS, Word2VecConfig(dim=8, epochs=1, min_count=21, text=RAW))
    other_seed = train_word2vec(TEXTS, Word2VecConfig(dim=8, epochs=2, min_count=5, seed=4, text=RAW))
    assert not np.array_equal(first["cat"], other_seed["cat"])


def test_vectors_are_trained_on_the_preprocessed_text():
    """The default text settings (the paper's): no stop words, noun lemmas ("cats" and "cat" are one word)."""
    texts = ["the cats sat on the mats", "a cat and a mat"] * 10
    vectors = train_word2vec(texts, Word2VecConfig(dim=8, epochs=1, min_count=5))
    assert sorted(vectors.key_to_index) == ["cat", "mat", "sat"]


def test_training_accepts_a_stream_factory():
    calls = []

    def stream():
        calls.append(1)
        return iter(TEXTS)

    vectors = train_word2vec(stream, SMALL)
    assert len(calls) == 1 + SMALL.epochs  # one pass for the vocabulary, one per epoch
    np.testing.assert_array_equal(vectors.vectors, train_word2vec(TEXTS, SMALL).vectors)


def test_training_without_frequent_words_fails_clearly():
    with pytest.raises(ValueError, match="no word occurs at least 100 times"):
        train_word2vec(["a b c"], Word2VecConfig(dim=4, epochs=1, min_count=100))


def test_vectors_round_trip_in_binary_and_text(tmp_path):
    vectors = train_word2vec(TEXTS, SMALL)
    path = save_vectors(vectors, tmp_path / "w2v.bin")
    loaded = load_vectors(path)
    assert loaded.index_to_key == vectors.index_to_key
    np.testing.assert_array_equal(loaded.vectors, vectors.vectors)
    vectors.save_word2vec_format(str(tmp_path / "w2v.txt"), binary=False)
    np.testing.assert_allclose(load_vectors(tmp_path / "w2v.txt").vectors, vectors.vectors, atol=1e-6)


def test_load_vectors_names_the_bad_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        load_vectors(tmp_path / "missing.bin")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"not a header\n\x00\x01")
    with pytest.raises(ValueError, match="bad.bin"):
        load_vectors(bad)


def test_config_validation():
    with pytest.raises(ValueError, match="dim"):
        Word2VecConfig(dim=0)


def test_glove_text_and_word2vec_binary_files_written_here_round_trip(tmp_path):
    vectors = {"alpha": [0.5, -1.0, 2.0], "beta": [1.5, 0.0, -0.25], "gamma": [0.0, 3.0, 1.0]}
    glove = tmp_path / "glove.6B.3d.txt"  # GloVe: no header line, a word and its numbers per line
    glove.write_text("".join(f"{w} {' '.join(str(x) for x in v)}\n" for w, v in vectors.items()), encoding="utf-8")
    loaded = load_vectors(glove)
    assert sorted(loaded.index_to_key) == sorted(vectors) and loaded.vector_size == 3
    for word, values in vectors.items():
        np.testing.assert_allclose(loaded[word], values)
    binary = save_vectors(loaded, tmp_path / "vectors.bin")  # word2vec binary, as GoogleNews' file
    again = load_vectors(binary)
    assert again.index_to_key == loaded.index_to_key
    np.testing.assert_array_equal(again.vectors, loaded.vectors)


def test_collection_words_count_the_preprocessed_text():
    from dagster_ir.methods.ghrm.word2vec import collection_words

    texts = ["The cars and the car", "a car", "geese goose"]
    assert collection_words(texts, Word2VecConfig(min_count=2)) == ["car", "goose"]  # lemmas; "the", "a" are stop words
    with pytest.raises(ValueError, match="at least 9 times"):
        collection_words(texts, Word2VecConfig(min_count=9))
