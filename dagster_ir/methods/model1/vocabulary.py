"""The two Model 1 vocabularies and token id sequences stored flat.

* ``words``: lower-cased words (runs of letters and digits), with scikit-learn's English stop word
  list removed. The vocabulary is built from the texts of a collection, most frequent first.
* ``wordpieces``: the backbone tokenizer's WordPiece ids, no stop words (as in the paper).

Every text becomes a row of a `Ragged` array. A token outside the vocabulary becomes the
vocabulary's `unk_id`, so that document lengths stay right; Model 1 never learns translations of it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import polars as pl

from dagster_ir.storage.atomic import atomic_path, write_text_atomic

WORDS = "words"
WORDPIECES = "wordpieces"
KINDS = (WORDS, WORDPIECES)
UNK_WORD = "[UNK]"
_WORD_PATTERN = r"[^\W_]+"  # letters and digits; punctuation and "_" separate words
_VOCAB_FILE = "vocabulary.json"
_TOKENS_FILE = "tokens.txt"


def stop_words() -> frozenset[str]:
    """scikit-learn's English stop word list (318 words)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


@dataclass(frozen=True)
class Ragged:
    """Token id sequences in one flat array: row i is ``ids[offsets[i]:offsets[i + 1]]``."""

    ids: np.ndarray  # int32
    offsets: np.ndarray  # int64, one more than the number of rows, offsets[0] == 0

    def __post_init__(self) -> None:
        if self.offsets.ndim != 1 or self.offsets.size == 0 or self.offsets[0] != 0:
            raise ValueError("Ragged: offsets must be a 1-d array starting at 0")
        if self.offsets[-1] != self.ids.size:
            raise ValueError(f"Ragged: offsets end at {self.offsets[-1]}, ids has {self.ids.size}")

    @classmethod
    def from_lists(cls, rows: Iterable[Sequence[int]]) -> Ragged:
        """Build from Python lists of ids (one per text)."""
        rows = list(rows)
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        ids = np.fromiter((i for r in rows for i in r), dtype=np.int32, count=int(lengths.sum()))
        return cls(ids, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))

    @classmethod
    def from_lengths(cls, ids: np.ndarray, lengths: np.ndarray) -> Ragged:
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(np.asarray(ids, dtype=np.int32), offsets)

    def __len__(self) -> int:
        return self.offsets.size - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def row_index(self) -> np.ndarray:
        """The row of every id in `ids`."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths)

    def take(self, rows: np.ndarray) -> Ragged:
        """The rows `rows` (any order, repeats allowed) as a new Ragged array."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[rows]
        positions = ragged_arange(lengths) + np.repeat(self.offsets[rows], lengths)
        return Ragged.from_lengths(self.ids[positions], lengths)

    def truncate(self, max_length: int) -> Ragged:
        """Every row cut to its first `max_length` ids."""
        lengths = np.minimum(self.lengths, max_length)
        positions = ragged_arange(lengths) + np.repeat(self.offsets[:-1], lengths)
        return Ragged.from_lengths(self.ids[positions], lengths)


def ragged_arange(lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(n)`` for every n in `lengths`, without a Python loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.arange(total, dtype=np.int64) - starts


@dataclass(frozen=True)
class Vocabulary:
    """A Model 1 vocabulary: ``tokens[i]`` is the token of id i; `unk_id` stands for unknown tokens.

    Build one with `word_vocabulary` or `wordpiece_vocabulary`; `encode` turns texts into ids.
    """

    kind: str
    tokens: tuple[str, ...]
    unk_id: int
    backbone: str = ""  # wordpieces: the tokenizer's backbone name ("" = bundled)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"vocabulary kind must be one of {KINDS}, got {self.kind!r}")

    def __len__(self) -> int:
        return len(self.tokens)

    @cached_property
    def token_frame(self) -> pl.DataFrame:
        """(token, id) for every token of the vocabulary."""
        return pl.DataFrame({"token": list(self.tokens), "id": np.arange(len(self.tokens), dtype=np.int32)})

    @cached_property
    def _tokenizer(self):
        from dagster_ir.neural.backbone import load_tokenizer

        return load_tokenizer(self.backbone)

    def encode(self, texts: Sequence[str]) -> Ragged:
        """Token ids of every text (unknown tokens as `unk_id`); a null text has no tokens."""
        if self.kind == WORDS:
            return self._encode_words(texts)
        ids = self._tokenizer(
            [t or "" for t in texts],
            add_special_tokens=False,
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,  # long documents are fine here: nothing feeds them to the model whole
        )["input_ids"]
        return Ragged.from_lists(ids)

    def _encode_words(self, texts: Sequence[str]) -> Ragged:
        tokens = _word_tokens(pl.Series("text", list(texts), dtype=pl.String))
        ids = tokens.join(self.token_frame, on="token", how="left", maintain_order="left")
        lengths = np.bincount(ids["row"].to_numpy(), minlength=len(texts))
        return Ragged.from_lengths(ids["id"].fill_null(self.unk_id).to_numpy(), lengths)

    def ids_of(self, tokens: Iterable[str]) -> np.ndarray:
        """The id of each token string (`unk_id` for unknown ones)."""
        lookup = {t: i for i, t in enumerate(self.tokens)}
        return np.array([lookup.get(t, self.unk_id) for t in tokens], dtype=np.int32)

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write the vocabulary to `directory` (a JSON header and, for words, one token a line)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        header = {"kind": self.kind, "unk_id": self.unk_id, "backbone": self.backbone, "size": len(self.tokens)}
        if self.kind == WORDS:
            with atomic_path(directory / _TOKENS_FILE) as tmp:
                tmp.write_text("\n".join(self.tokens) + "\n", encoding="utf-8")
        write_text_atomic(directory / _VOCAB_FILE, json.dumps(header, indent=2))
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Vocabulary:
        """Read a vocabulary written by `save`."""
        directory = Path(directory)
        header = json.loads((directory / _VOCAB_FILE).read_text(encoding="utf-8"))
        if header["kind"] == WORDPIECES:
            return wordpiece_vocabulary(header["backbone"])
        tokens = (directory / _TOKENS_FILE).read_text(encoding="utf-8").split("\n")[:-1]
        if len(tokens) != header["size"]:
            raise ValueError(f"{directory / _TOKENS_FILE}: {len(tokens)} tokens, header says {header['size']}")
        return cls(WORDS, tuple(tokens), int(header["unk_id"]))


def _word_tokens(texts: pl.Series) -> pl.DataFrame:
    """(row, token) for every non-stop word of every text, in text order."""
    stops = pl.Series(sorted(stop_words()), dtype=pl.String)
    return (
        pl.DataFrame({"text": texts})
        .with_row_index("row")
        .select("row", token=pl.col("text").str.to_lowercase().str.extract_all(_WORD_PATTERN))
        .explode("token")
        .filter(pl.col("token").is_not_null() & ~pl.col("token").is_in(stops.implode()))
    )


def word_vocabulary(texts: Iterable[Sequence[str]], *, min_count: int = 1) -> Vocabulary:
    """A words vocabulary from batches of texts: id 0 is ``[UNK]``, then by frequency, then A-Z."""
    counts: pl.DataFrame | None = None
    for batch in texts:
        batch_counts = _word_tokens(pl.Series(list(batch), dtype=pl.String)).group_by("token").len()
        counts = (
            batch_counts
            if counts is None
            else (pl.concat([counts, batch_counts]).group_by("token").agg(pl.col("len").sum()))
        )
    if counts is None or counts.height == 0:
        raise ValueError("word_vocabulary: no words in the texts")
    kept = counts.filter(pl.col("len") >= min_count).sort(["len", "token"], descending=[True, False])
    return Vocabulary(WORDS, (UNK_WORD, *kept["token"].to_list()), unk_id=0)


def wordpiece_vocabulary(backbone: str = "") -> Vocabulary:
    """The backbone tokenizer's WordPiece vocabulary (ids are the tokenizer's ids)."""
    from dagster_ir.neural.backbone import load_tokenizer

    tokenizer = load_tokenizer(backbone)
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    tokens = tuple(token for token, _ in by_id)
    if [i for _, i in by_id] != list(range(len(tokens))):
        raise ValueError(f"backbone {backbone!r}: tokenizer ids are not 0..{len(tokens) - 1}")
    return Vocabulary(WORDPIECES, tokens, unk_id=int(tokenizer.unk_token_id), backbone=backbone)


def build_vocabulary(kind: str, texts: Iterable[Sequence[str]], *, backbone: str = "") -> Vocabulary:
    """The vocabulary of `kind`: words are counted over `texts`; word pieces ignore them."""
    if kind == WORDS:
        return word_vocabulary(texts)
    if kind == WORDPIECES:
        return wordpiece_vocabulary(backbone)
    raise ValueError(f"vocabulary kind must be one of {KINDS}, got {kind!r}")
