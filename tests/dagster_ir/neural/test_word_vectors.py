"""Word vectors read off the bundled MiniLM's input embeddings, offline."""

from __future__ import annotations

import numpy as np
import pytest

from dagster_ir.neural.word_vectors import embedding_vectors, input_embeddings


def test_the_bundled_models_embeddings_load_offline_and_pool_word_pieces():
    matrix = input_embeddings()
    assert matrix.shape == (30522, 384) and matrix.dtype == np.float32
    vectors = embedding_vectors(["car", "aerodynamically", "car", ""])
    assert vectors.index_to_key == ["car", "aerodynamically"] and vectors.vector_size == 384
    from transformers import AutoTokenizer

    from dagster_ir.neural.backbone import backbone_path

    pieces = AutoTokenizer.from_pretrained(backbone_path())("aerodynamically", add_special_tokens=False)["input_ids"]
    assert len(pieces) > 1  # a word of several pieces: their mean
    np.testing.assert_allclose(vectors["aerodynamically"], matrix[pieces].mean(axis=0), rtol=1e-6)


@pytest.mark.parametrize(
    ("word", "similar", "unrelated"),
    [
        ("car", "automobile", "banana"),
        ("aircraft", "airplane", "fruit"),
        ("velocity", "speed", "music"),
        ("pressure", "stress", "banana"),
        ("wing", "aircraft", "music"),
    ],
)
def test_similar_words_are_closer_than_unrelated_ones(word, similar, unrelated):
    vectors = embedding_vectors([word, similar, unrelated])
    assert vectors.similarity(word, similar) > vectors.similarity(word, unrelated) + 0.2
