"""The two Model 1 vocabularies and the flat token arrays."""

import numpy as np
import pytest

from dagster_ir.methods.model1 import Ragged, Vocabulary, stop_words, word_vocabulary, wordpiece_vocabulary


def test_words_are_lower_cased_without_stop_words_most_frequent_first():
    vocab = word_vocabulary([["The Cat sat on the mat.", "A cat, a dog!"], ["dog_house cat"]])
    assert vocab.tokens[0] == "[UNK]" and vocab.unk_id == 0
    assert vocab.tokens[1:4] == ("cat", "dog", "house")  # 3, 2, then alphabetical among 1s
    assert not {"the", "on", "a"} & set(vocab.tokens)
    encoded = vocab.encode(["The CAT and the zebra", "", None])
    assert encoded.lengths.tolist() == [2, 0, 0]
    assert encoded.row(0).tolist() == [1, 0]  # cat, [UNK] for zebra


def test_stop_words_come_from_scikit_learn():
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    assert stop_words() == ENGLISH_STOP_WORDS and "the" in stop_words()


def test_word_pieces_are_the_tokenizers_ids():
    vocab = wordpiece_vocabulary()
    assert len(vocab) == 30522 and vocab.tokens[vocab.unk_id] == "[UNK]"
    ids = vocab.encode(["Hyperlink prediction"]).row(0)
    assert [vocab.tokens[i] for i in ids] == ["hyper", "##link", "prediction"]


def test_vocabularies_round_trip(tmp_path):
    words = word_vocabulary([["alpha beta beta"]])
    assert Vocabulary.load(words.save(tmp_path / "w")) == words
    pieces = wordpiece_vocabulary()
    assert Vocabulary.load(pieces.save(tmp_path / "p")).tokens == pieces.tokens


def test_ragged_take_and_truncate():
    tokens = Ragged.from_lists([[1, 2, 3], [], [4, 5]])
    assert tokens.take(np.array([2, 0, 2])).ids.tolist() == [4, 5, 1, 2, 3, 4, 5]
    assert tokens.truncate(2).lengths.tolist() == [2, 0, 2]
    assert tokens.row_index().tolist() == [0, 0, 0, 2, 2]
    with pytest.raises(ValueError, match="offsets end"):
        Ragged(np.array([1, 2]), np.array([0, 3]))


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="kind"):
        Vocabulary("lemmas", ("[UNK]",), 0)
