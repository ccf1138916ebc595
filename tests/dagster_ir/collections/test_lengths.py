"""Truncation lengths read off a collection: percentiles of its query and document lengths in a model's words."""

from __future__ import annotations

import pytest

from dagster_ir.collections.lengths import collection_lengths, length_percentile
from dagster_ir.methods.ghrm.text import TextConfig, tokens


def ghrm_words(text: str) -> list[str]:
    return tokens(text, TextConfig())


def test_lengths_are_percentiles_in_the_models_own_words() -> None:
    # in GHRM's words (stop words out): 1, 2, 3, ..., 10 words
    queries = [" ".join(["the"] + [f"w{i}"] * n) for n, i in zip(range(1, 11), range(10))]
    docs = ["alpha beta gamma delta of the", "alpha", "alpha beta"]
    found = collection_lengths(queries, docs, ghrm_words, percentile=90)
    # numpy's linear percentile of 1..10 at 90 is 9.1 -> 10 (rounded up); of 4, 1, 2 at 90 is 3.6 -> 4
    assert (found.query_words, found.doc_words, found.queries, found.docs) == (10, 4, 10, 3)
    assert collection_lengths(queries, docs, ghrm_words, percentile=50).query_words == 6  # 5.5 -> 6
    assert collection_lengths(queries, iter(docs), ghrm_words, max_docs=1).doc_words == 4  # the first document only


def test_a_collection_of_empty_texts_still_keeps_one_word_and_bad_input_is_refused() -> None:
    assert length_percentile(["the of", "a"], ghrm_words, 90) == (1, 2)
    with pytest.raises(ValueError, match="percentile must be in"):
        length_percentile(["x"], ghrm_words, 0)
    with pytest.raises(ValueError, match="no texts"):
        length_percentile([], ghrm_words, 90)
