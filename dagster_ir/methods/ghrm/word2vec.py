"""Word embeddings for GHRM and the interaction baselines: CBOW word2vec trained on the collection with
gensim, loaded from a file (word2vec binary or text, GloVe text), or read off the bundled MiniLM's
input embeddings (`dagster_ir.neural.word_vectors`; the `word2vec` asset's default source).

Words are what `text.tokens` returns under the config's `text` settings: lower-cased, stop words
out, noun lemmas (the paper's preprocessing; see `text`). GHRM must read its graphs with the same
settings, so that every lemma has a vector. Vectors are stored in the word2vec binary format (`KeyedVectors.save_word2vec_format`), never as a pickle,
so a file trained elsewhere (e.g. GoogleNews vectors) loads the same way.

Training is deterministic for a given input order and seed when `workers` is 1 (gensim's threads
otherwise interleave updates nondeterministically).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dagster_ir.lazy import lazy_module
from dagster_ir.methods.ghrm.text import TextConfig, tokens
from dagster_ir.storage.atomic import atomic_path

if TYPE_CHECKING:
    from gensim.models import KeyedVectors

if TYPE_CHECKING:
    import gensim.models as gensim_models
else:
    gensim_models = lazy_module("gensim.models")  # imports SciPy


@dataclass(frozen=True)
class Word2VecConfig:
    """gensim CBOW settings. The paper trains 300-d CBOW vectors on each collection."""

    dim: int = 300
    window: int = 5  # gensim's default; the paper does not give one
    min_count: int = 10  # the paper drops words seen fewer than ten times
    epochs: int = 5  # gensim's default
    negative: int = 5
    seed: int = 42
    workers: int = 1  # 1 keeps training deterministic
    text: TextConfig = TextConfig()  # stop words and lemmas; must match GHRM's `InputConfig.text`

    def __post_init__(self) -> None:
        for name in ("dim", "window", "min_count", "epochs", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"Word2VecConfig.{name} must be >= 1, got {getattr(self, name)}")


PROFILES: dict[str, Word2VecConfig] = {
    # a small corpus needs many passes: after 3 epochs over wiki-car's 0.44M words every pair of
    # vectors still has a cosine near 0.94; after 20 it averages about 0.3
    "demo": Word2VecConfig(dim=50, epochs=20, min_count=5),
    "paper": Word2VecConfig(),
}


class _Sentences:
    """A re-iterable stream of tokenised texts (gensim iterates once for the vocabulary, then per epoch)."""

    def __init__(self, texts: Callable[[], Iterable[str]], config: TextConfig) -> None:
        self._texts = texts
        self._config = config

    def __iter__(self) -> Iterator[list[str]]:
        for text in self._texts():
            yield tokens(text, self._config)


def train_word2vec(texts: Sequence[str] | Callable[[], Iterable[str]], config: Word2VecConfig) -> KeyedVectors:
    """CBOW vectors of every word seen at least `config.min_count` times in `texts`.

    `texts` is a sequence of documents or a function returning a fresh iterable of them (for
    corpora streamed from disk; it is called once per pass).
    """
    sentences = _Sentences(texts if callable(texts) else (lambda: texts), config.text)
    model = gensim_models.Word2Vec(
        vector_size=config.dim,
        window=config.window,
        min_count=config.min_count,
        sg=0,
        negative=config.negative,
        seed=config.seed,
        workers=config.workers,
    )
    model.build_vocab(sentences)
    if len(model.wv) == 0:
        raise ValueError(f"train_word2vec: no word occurs at least {config.min_count} times in the texts")
    model.train(sentences, total_examples=model.corpus_count, epochs=config.epochs)
    return model.wv


def collection_words(texts: Iterable[str], config: Word2VecConfig) -> list[str]:
    """The words (under `config.text`) seen at least `config.min_count` times in `texts`, most frequent first."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(tokens(text, config.text))
    words = [w for w, c in sorted(counts.items(), key=lambda item: (-item[1], item[0])) if c >= config.min_count]
    if not words:
        raise ValueError(f"collection_words: no word occurs at least {config.min_count} times in the texts")
    return words


def save_vectors(vectors: KeyedVectors, path: str | os.PathLike[str]) -> Path:
    """Write `vectors` atomically in the word2vec binary format; returns the path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        vectors.save_word2vec_format(str(tmp), binary=True)
    return path


def load_vectors(path: str | os.PathLike[str]) -> KeyedVectors:
    """Vectors from a file: word2vec binary, or text when the name ends in .txt or .vec: word2vec's
    (a first line "<words> <dim>") or GloVe's (no such line: every line is a word and its numbers)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"load_vectors: no word vector file at {path}")
    binary = path.suffix not in (".txt", ".vec")
    glove = not binary and not _has_word2vec_header(path)
    try:
        return gensim_models.KeyedVectors.load_word2vec_format(str(path), binary=binary, no_header=glove)
    except (ValueError, UnicodeDecodeError, EOFError) as error:
        kind = "binary" if binary else "GloVe text" if glove else "text"
        raise ValueError(f"load_vectors: {path} is not a word2vec {kind} file: {error}") from error


def _has_word2vec_header(path: Path) -> bool:
    """Whether a text vector file starts with word2vec's "<count> <dim>" line (GloVe's files do not)."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        first = handle.readline().split()
    return len(first) == 2 and all(part.isdigit() for part in first)
