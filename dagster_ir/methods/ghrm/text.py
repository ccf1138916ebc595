"""GHRM's text preprocessing (paper section 4.1.3): lower-cased words, stop words out, lemmatised.

The paper white-space tokenises, lower-cases and lemmatises every document and query with WordNet;
the authors' code also removes NLTK's English stop words first, then lemmatises each remaining
word as a noun (`WordNetLemmatizer().lemmatize(word)`, whose part of speech defaults to noun).
Here, in the same order:

1. `words`: the lower-cased maximal runs of Unicode letters and digits (the authors keep ASCII
   letters and digits and strip digits from word ends; we keep non-English names and numbers);
2. stop words out: NLTK's English list (179 words, the one the authors load), as the `bm25s`
   package ships it, so nothing is downloaded at run time;
3. each word replaced by its noun lemma from `lemminflect`'s lookup table (a pinned PyPI package
   whose tables are in the wheel; no network, no model): "cars" -> "car", "geese" -> "goose".
   Words the table does not know as nouns ("went", unknown names) stay as they are, as WordNet
   leaves them; lemminflect's out-of-vocabulary model is not used.

Both the word2vec vectors and GHRM's graphs read text through `tokens`, with the same `TextConfig`
(`ghrm_runs` refuses vectors trained on other settings), so every lemma of a graph has its vector.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class TextConfig:
    """What is done to a text's words before counting, embedding or graphing them (paper: both on)."""

    remove_stopwords: bool = True  # NLTK's English stop words
    lemmatize: bool = True  # noun lemmas (WordNet's default part of speech)


RAW = TextConfig(remove_stopwords=False, lemmatize=False)


def words(text: str) -> list[str]:
    """The lower-cased words of `text`: maximal runs of Unicode letters and digits."""
    return _WORD.findall(text.lower())


@lru_cache(maxsize=1)
def stopwords() -> frozenset[str]:
    """NLTK's English stop words (179), from the copy the pinned `bm25s` package ships."""
    from bm25s.stopwords import STOPWORDS_EN_PLUS

    return frozenset(STOPWORDS_EN_PLUS)


@lru_cache(maxsize=500_000)
def lemma(word: str) -> str:
    """The noun lemma of a lower-cased word, or the word itself when the lookup table has none."""
    from lemminflect import getLemma

    found = getLemma(word, upos="NOUN", lemmatize_oov=False)
    return found[0] if found else word


def tokens(text: str, config: TextConfig) -> list[str]:
    """The words of `text` after stop-word removal and lemmatisation, as `config` says."""
    out = words(text)
    if config.remove_stopwords:
        stop = stopwords()
        out = [w for w in out if w not in stop]
    if config.lemmatize:
        out = [lemma(w) for w in out]
    return out
