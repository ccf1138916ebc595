"""BM25 from precomputed impacts: Lucene's own BM25 scores, summed in numpy instead of in Lucene.

For an index that fits in memory, every (term, document) pair of a Lucene index gets its BM25
impact once, as Lucene's `BM25Similarity` computes it, and a query's score of a document is the
sum of its terms' impacts, as Lucene's boolean query sums them; the top k then come out of numpy.
The postings, the one-byte length norms and the idf of every term come from the index itself
(`lucene._read_postings`), and the arithmetic is Lucene's, float for float (Lucene 9.9,
`BM25Similarity` and `BM25Scorer`):

    avgdl      = (float) (sumTotalTermFreq / (double) docCount)
    cache[i]   = 1f / (k1 * ((1 - b) + b * LENGTH_TABLE[i] / avgdl))      (float, i = norm byte)
    weight     = boost * idf                                              (float)
    impact     = weight - weight / (1f + freq * cache[norm(doc)])         (float)
    score(doc) = (float) (sum over the query's terms of impact, in double)

`boost` is the query term's count (Anserini's bag-of-words query boosts each distinct term by
its count). Impacts of boost 1 are stored; a term repeated in a query has its impacts computed
at query time from the stored frequencies, since `c * idf - c * idf / t` is not, in float,
`c` times the impact of boost 1. numpy's float32 operations round as Java's float operations do,
one operation at a time, so the impacts are Lucene's bit for bit. The double sum of a query's
few float impacts is exact, so its order does not matter. Documents are then ranked as Lucene's
top-n collector ranks them (score descending, Lucene doc number ascending) and the ties with the
k-th are all kept, which is what `lucene._run_frame` expects of Lucene's hits; Anserini's tie
adjustment (`ScoreTiesAdjusterReranker`) is reproduced by `adjust_ties`.

The impacts are kept next to the index as one `.npz` file per (k1, b), tagged with the index's
commit (a hash of its `segments_N` file): a rebuilt index gets its impacts computed anew.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dagster_ir.storage.atomic import atomic_path

IMPACT_FORMAT = 1  # bump when the file's arrays change meaning


@dataclass(frozen=True)
class Postings:
    """What a Lucene index holds for BM25, read from it once (see `lucene._read_postings`).

    Term t's postings are `docs[indptr[t]:indptr[t + 1]]` (Lucene doc numbers, ascending) with
    their frequencies; `norms` is each document's encoded length (SmallFloat.intToByte4, 0 for a
    document without the field); `length_table[i]` is the length byte i decodes to
    (SmallFloat.byte4ToInt) and `idf` each term's idf as Lucene's `BM25Similarity.idf` computes it.
    """

    terms: list[str]
    indptr: np.ndarray  # int64, n_terms + 1
    docs: np.ndarray  # int32
    freqs: np.ndarray  # float32 (term frequencies, exact below 2**24)
    norms: np.ndarray  # uint8, max_doc
    length_table: np.ndarray  # float32, 256
    idf: np.ndarray  # float32, n_terms
    doc_count: int  # documents with at least one term in the field
    sum_total_term_freq: int


@dataclass(frozen=True)
class ImpactIndex:
    """Every (term, document) BM25 impact of one index for one (k1, b): see the module docstring."""

    key: str  # the index commit the impacts were computed from (see `index_commit`)
    k1: float
    b: float
    term_rows: dict[str, int]
    indptr: np.ndarray  # int64
    docs: np.ndarray  # int32
    impacts: np.ndarray  # float32, boost 1
    freqs: np.ndarray  # float32
    norms: np.ndarray  # uint8
    idf: np.ndarray  # float32
    cache: np.ndarray  # float32, 256: 1 / (k1 ((1 - b) + b dl / avgdl)) per norm byte

    @property
    def max_doc(self) -> int:
        return len(self.norms)


def index_commit(index_dir: str | os.PathLike[str]) -> str:
    """Names the index's current commit: its newest `segments_N` file and a hash of its bytes
    (which hold a random id per commit and per segment, so a rebuilt index gets a new one)."""
    segments = max(Path(index_dir).glob("segments_*"), key=lambda p: int(p.name.split("_")[1], 36))
    return f"{segments.name}:{hashlib.sha256(segments.read_bytes()).hexdigest()}"


def impact_path(index_dir: str | os.PathLike[str], k1: float, b: float) -> Path:
    """Where the impacts of `index_dir` for (k1, b) are kept: a file beside the index folder."""
    index_dir = Path(index_dir)
    return index_dir.parent / f"{index_dir.name}.bm25-k1={float(k1)!r}-b={float(b)!r}.impacts.npz"


def bm25_cache(k1: float, b: float, postings: Postings) -> np.ndarray:
    """Lucene's 256 inverse length norms, in float as `BM25Similarity.scorer` computes them."""
    f = np.float32
    k1, b = f(k1), f(b)
    avgdl = f(postings.sum_total_term_freq / float(postings.doc_count))
    return f(1) / (k1 * ((f(1) - b) + b * postings.length_table.astype(f) / avgdl))


def term_impacts(weight: np.float32, freqs: np.ndarray, norm_inverse: np.ndarray) -> np.ndarray:
    """`weight - weight / (1f + freq * normInverse)` in float, as Lucene's `BM25Scorer.score`."""
    return weight - weight / (np.float32(1) + freqs * norm_inverse)


def build_impacts(postings: Postings, k1: float, b: float, key: str) -> ImpactIndex:
    """The boost-1 impact of every posting, with what a repeated query term needs."""
    cache = bm25_cache(k1, b, postings)
    lengths = np.diff(postings.indptr)
    weights = np.repeat(postings.idf, lengths)  # boost 1: weight = idf
    impacts = term_impacts(weights, postings.freqs, cache[postings.norms[postings.docs]])
    return ImpactIndex(
        key=key, k1=float(k1), b=float(b), term_rows={t: i for i, t in enumerate(postings.terms)},
        indptr=postings.indptr, docs=postings.docs, impacts=impacts.astype(np.float32), freqs=postings.freqs,
        norms=postings.norms, idf=postings.idf, cache=cache,
    )


# --- the file -----------------------------------------------------------------------------------

_ARRAYS = {  # name: dtype, in the file
    "indptr": np.int64, "docs": np.int32, "impacts": np.float32, "freqs": np.float32,
    "norms": np.uint8, "idf": np.float32, "cache": np.float32,
}


def save_impacts(impacts: ImpactIndex, path: str | os.PathLike[str]) -> Path:
    """Write `impacts` to `path` (uncompressed .npz, written beside it and moved in)."""
    terms = "\n".join(impacts.term_rows).encode("utf-8")
    header = np.array([IMPACT_FORMAT], dtype=np.int64)
    params = np.array([impacts.k1, impacts.b], dtype=np.float64)
    with atomic_path(path) as tmp, open(tmp, "wb") as out:
        np.savez(out, format=header, params=params, key=np.frombuffer(impacts.key.encode(), dtype=np.uint8),
                 terms=np.frombuffer(terms, dtype=np.uint8),
                 **{name: getattr(impacts, name) for name in _ARRAYS})
    return Path(path)


def load_impacts(path: str | os.PathLike[str]) -> ImpactIndex:
    """Read an impacts file; a file that is not one, or is damaged, raises ValueError naming it."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in ("format", "params", "key", "terms", *_ARRAYS)}
    except FileNotFoundError:
        raise
    except (KeyError, ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"{path}: not a readable BM25 impacts file ({type(error).__name__}: {error})") from None
    if arrays["format"].tolist() != [IMPACT_FORMAT]:
        raise ValueError(f"{path}: impacts format {arrays['format'].tolist()}, expected [{IMPACT_FORMAT}]")
    for name, dtype in _ARRAYS.items():
        if arrays[name].dtype != dtype or arrays[name].ndim != 1:
            raise ValueError(f"{path}: array '{name}' is {arrays[name].dtype}{list(arrays[name].shape)}, "
                             f"expected a vector of {np.dtype(dtype)}")
    terms = bytes(arrays["terms"]).decode("utf-8").split("\n") if arrays["terms"].size else []
    indptr, docs = arrays["indptr"], arrays["docs"]
    n_postings = len(docs)
    if (len(indptr) != len(terms) + 1 or indptr[0] != 0 or indptr[-1] != n_postings
            or np.any(np.diff(indptr) < 0) or len(arrays["idf"]) != len(terms) or len(arrays["cache"]) != 256
            or len(arrays["impacts"]) != n_postings or len(arrays["freqs"]) != n_postings
            or (n_postings and (docs.min() < 0 or docs.max() >= len(arrays["norms"])))):
        raise ValueError(f"{path}: impacts arrays do not fit together (terms, postings, documents)")
    k1, b = arrays["params"].tolist()
    return ImpactIndex(
        key=bytes(arrays["key"]).decode("utf-8"), k1=k1, b=b, term_rows={t: i for i, t in enumerate(terms)},
        **{name: arrays[name] for name in _ARRAYS},
    )


# --- scoring ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryHits:
    """One query's top k and every document tied with the k-th, in Lucene's order."""

    docs: np.ndarray  # int32, Lucene doc numbers
    scores: np.ndarray  # float32


def score_query(impacts: ImpactIndex, terms: list[str], k: int) -> QueryHits:
    """Lucene's BM25 top `k` of one analyzed query (its terms, repeated as often as they occur)."""
    counts: dict[int, int] = {}
    for term in terms:
        row = impacts.term_rows.get(term)
        if row is not None:
            counts[row] = counts.get(row, 0) + 1
    if not counts:
        return QueryHits(np.empty(0, np.int32), np.empty(0, np.float32))
    parts_docs, parts_values = [], []
    for row, count in counts.items():
        start, end = impacts.indptr[row], impacts.indptr[row + 1]
        docs = impacts.docs[start:end]
        if count == 1:
            values = impacts.impacts[start:end]
        else:
            weight = np.float32(count) * impacts.idf[row]
            values = term_impacts(weight, impacts.freqs[start:end], impacts.cache[impacts.norms[docs]])
        parts_docs.append(docs)
        parts_values.append(values)
    if len(parts_docs) == 1:
        matched, scores = parts_docs[0], parts_values[0]
    else:
        summed = np.bincount(np.concatenate(parts_docs), weights=np.concatenate(parts_values).astype(np.float64),
                             minlength=impacts.max_doc)
        matched = np.flatnonzero(summed).astype(np.int32)  # every impact is > 0
        scores = summed[matched].astype(np.float32)
    return _top(matched, scores, k)


def _top(docs: np.ndarray, scores: np.ndarray, k: int) -> QueryHits:
    """Score descending, doc number ascending; the first k and every document tied with the k-th."""
    if len(scores) > k:
        kth = -np.partition(-scores, k - 1)[k - 1]
        keep = scores >= kth
        docs, scores = docs[keep], scores[keep]
    order = np.lexsort((docs, -scores))
    return QueryHits(docs[order], scores[order])


def adjust_ties(scores: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Anserini's `ScoreTiesAdjusterReranker` over many queries' hits at once, in float.

    Within a query (hits from `starts[q]`, score descending): each score is rounded to 4 decimals
    in double (Anserini 1.7's rounding; 0.94285f, which is 0.9428499..., becomes 0.9428), then, going down the list, a score that is not more than
    1e-4 below the previous adjusted score is lowered by 1e-6 times its place in that run of ties.
    Each adjusted score depends on the one before it; the runs are found by iterating to the fixed
    point, which the sequential rule determines uniquely (each pass fixes at least the first wrong
    place and leaves those before it right).
    """
    f = np.float32
    # (float) (Math.round(score * 1e4) / 1e4), in double; Math.round(x) is floor(x + 0.5), exact here
    rounded = (np.floor(scores.astype(np.float64) * 1e4 + 0.5) / 1e4).astype(f)
    n = len(rounded)
    first = np.zeros(n, dtype=bool)
    first[starts[starts < n]] = True
    tied = np.zeros(n, dtype=bool)
    adjusted = rounded
    place = np.arange(n)
    while True:
        # dup: how many tied places since the last untied one
        last_untied = np.maximum.accumulate(np.where(~tied, place, 0))
        dup = place - last_untied
        adjusted = np.where(tied, rounded - f(1e-6) * dup.astype(f), rounded).astype(f)
        new_tied = np.zeros(n, dtype=bool)
        new_tied[1:] = ~((adjusted[:-1] - rounded[1:]) > f(1e-4))
        new_tied &= ~first
        if np.array_equal(new_tied, tied):
            return adjusted
        tied = new_tied
