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
few float impacts is exact, so its order does not matter. Documents are then ranked as Anserini
ranks Lucene's hits (score descending, tied documents by doc id in byte order, cut at k) and
their scores adjusted as Anserini's `ScoreTiesAdjusterReranker` does (`adjust_ties`).

Where this deviates: nothing in the run, which `tests/dagster_ir/retrieval/test_impact.py` checks
against Lucene's searcher (and the Cranfield regression against Pyserini's command line). The
impacts take memory (about 16 bytes a posting), hence the threshold in `lucene.search`.

The impacts are kept next to the index as one `.npz` file per (k1, b), tagged with the index's
commit (a hash of its `segments_N` file): a rebuilt index gets its impacts computed anew. Each
file also holds the postings they came from, so another (k1, b) is computed without Lucene.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dagster_ir.storage.atomic import atomic_path

IMPACT_FORMAT = 1  # bump when the file's arrays change meaning
_FILE_GLOB = ".bm25-*.impacts.npz"  # after the index folder's name


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
    length_table: np.ndarray  # float32, 256 (see `Postings`)
    doc_count: int
    sum_total_term_freq: int
    # Set by `with_id_order` (not stored): each posting's document as its rank in the order of
    # the doc ids, and the documents in that order.
    doc_ranks: np.ndarray | None = None  # int32, one per posting
    docs_by_rank: np.ndarray | None = None  # int32, max_doc

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


def sibling_impacts(index_dir: str | os.PathLike[str], key: str) -> ImpactIndex | None:
    """Impacts of `index_dir` for any (k1, b), computed from commit `key`, if a readable file has them."""
    index_dir = Path(index_dir)
    for path in sorted(index_dir.parent.glob(index_dir.name + _FILE_GLOB)):
        try:
            found = load_impacts(path)
        except (ValueError, OSError):
            continue  # that one is reported when its own (k1, b) is searched
        if found.key == key:
            return found
    return None


def bm25_cache(k1: float, b: float, postings: Postings) -> np.ndarray:
    """Lucene's 256 inverse length norms, in float as `BM25Similarity.scorer` computes them."""
    f = np.float32
    k1, b = f(k1), f(b)
    avgdl = f(postings.sum_total_term_freq / float(postings.doc_count))
    with np.errstate(divide="ignore"):  # k1 = 0: 1f / 0f is infinity in Java too
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
        key=key,
        k1=float(k1),
        b=float(b),
        term_rows={t: i for i, t in enumerate(postings.terms)},
        indptr=postings.indptr,
        docs=postings.docs,
        impacts=impacts.astype(np.float32),
        freqs=postings.freqs,
        norms=postings.norms,
        idf=postings.idf,
        cache=cache,
        length_table=postings.length_table,
        doc_count=postings.doc_count,
        sum_total_term_freq=postings.sum_total_term_freq,
    )


def postings_of(impacts: ImpactIndex) -> Postings:
    """The index's postings that `impacts` were computed from: for other (k1, b) without Lucene."""
    terms = sorted(impacts.term_rows, key=impacts.term_rows.__getitem__)
    return Postings(
        terms=terms,
        indptr=impacts.indptr,
        docs=impacts.docs,
        freqs=impacts.freqs,
        norms=impacts.norms,
        length_table=impacts.length_table,
        idf=impacts.idf,
        doc_count=impacts.doc_count,
        sum_total_term_freq=impacts.sum_total_term_freq,
    )


def with_id_order(impacts: ImpactIndex, id_order: np.ndarray) -> ImpactIndex:
    """`impacts` ready for `search_impacts`: `id_order[d]` ranks document d's id in byte order
    (Anserini's order of tied documents)."""
    if len(id_order) != impacts.max_doc:
        raise ValueError(f"{len(id_order)} document ranks for {impacts.max_doc} documents")
    return replace(
        impacts, doc_ranks=id_order[impacts.docs].astype(np.int32), docs_by_rank=np.argsort(id_order).astype(np.int32)
    )


# --- the file -----------------------------------------------------------------------------------

_ARRAYS = {  # name: dtype, in the file
    "indptr": np.int64,
    "docs": np.int32,
    "impacts": np.float32,
    "freqs": np.float32,
    "norms": np.uint8,
    "idf": np.float32,
    "cache": np.float32,
    "length_table": np.float32,
}


def save_impacts(impacts: ImpactIndex, path: str | os.PathLike[str]) -> Path:
    """Write `impacts` to `path` (uncompressed .npz, written beside it and moved in)."""
    terms = "\n".join(impacts.term_rows).encode("utf-8")
    header = np.array([IMPACT_FORMAT], dtype=np.int64)
    params = np.array([impacts.k1, impacts.b], dtype=np.float64)
    counts = np.array([impacts.doc_count, impacts.sum_total_term_freq], dtype=np.int64)
    with atomic_path(path) as tmp, open(tmp, "wb") as out:
        np.savez(
            out,
            format=header,
            params=params,
            counts=counts,
            key=np.frombuffer(impacts.key.encode(), dtype=np.uint8),
            terms=np.frombuffer(terms, dtype=np.uint8),
            **{name: getattr(impacts, name) for name in _ARRAYS},
        )
    return Path(path)


def load_impacts(path: str | os.PathLike[str]) -> ImpactIndex:
    """Read an impacts file; a file that is not one, or is damaged, raises ValueError naming it."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in ("format", "params", "counts", "key", "terms", *_ARRAYS)}
    except FileNotFoundError:
        raise
    except (KeyError, ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"{path}: not a readable BM25 impacts file ({type(error).__name__}: {error})") from None
    if arrays["format"].tolist() != [IMPACT_FORMAT]:
        raise ValueError(f"{path}: impacts format {arrays['format'].tolist()}, expected [{IMPACT_FORMAT}]")
    for name, dtype in _ARRAYS.items():
        if arrays[name].dtype != dtype or arrays[name].ndim != 1:
            raise ValueError(
                f"{path}: array '{name}' is {arrays[name].dtype}{list(arrays[name].shape)}, "
                f"expected a vector of {np.dtype(dtype)}"
            )
    terms = bytes(arrays["terms"]).decode("utf-8").split("\n") if arrays["terms"].size else []
    indptr, docs = arrays["indptr"], arrays["docs"]
    n_postings = len(docs)
    if (
        len(indptr) != len(terms) + 1
        or indptr[0] != 0
        or indptr[-1] != n_postings
        or np.any(np.diff(indptr) < 0)
        or len(arrays["idf"]) != len(terms)
        or len(arrays["cache"]) != 256
        or len(arrays["length_table"]) != 256
        or arrays["counts"].shape != (2,)
        or len(arrays["impacts"]) != n_postings
        or len(arrays["freqs"]) != n_postings
        or (n_postings and (docs.min() < 0 or docs.max() >= len(arrays["norms"])))
    ):
        raise ValueError(f"{path}: impacts arrays do not fit together (terms, postings, documents)")
    k1, b = arrays["params"].tolist()
    doc_count, sum_total_term_freq = arrays["counts"].tolist()
    return ImpactIndex(
        key=bytes(arrays["key"]).decode("utf-8"),
        k1=k1,
        b=b,
        term_rows={t: i for i, t in enumerate(terms)},
        doc_count=doc_count,
        sum_total_term_freq=sum_total_term_freq,
        **{name: arrays[name] for name in _ARRAYS},
    )


# --- scoring ------------------------------------------------------------------------------------

_BLOCK_CELLS = 1_000_000  # queries x documents scored at once (an int32 marker per cell, 4 MB);
# below 2**23, as `_score_block`'s sort keys need


@dataclass(frozen=True)
class ImpactRun:
    """Every query's top k, Anserini's run: rows by query, then rank; `query` indexes the queries."""

    query: np.ndarray  # int64
    docs: np.ndarray  # int32, Lucene doc numbers
    raw_scores: np.ndarray  # float32, Lucene's scores
    scores: np.ndarray  # float32, after Anserini's tie adjustment
    rank: np.ndarray  # int32, 1..n per query


def search_impacts(impacts: ImpactIndex, query_terms: list[list[str]], k: int, threads: int = 1) -> ImpactRun:
    """Lucene's BM25 top `k` of every analyzed query (its terms, repeated as often as they occur),
    ranked as Anserini ranks them: score descending, tied documents by doc id (byte order, see
    `with_id_order`), scores adjusted as `adjust_ties` says. Blocks of queries are scored
    `threads` at a time (numpy lets go of the GIL in its larger operations)."""
    if impacts.doc_ranks is None or impacts.docs_by_rank is None:
        raise ValueError("impacts without the order of their doc ids: see with_id_order")
    pair_query, pair_row, pair_count = _query_rows(impacts, query_terms)
    per_block = max(1, _BLOCK_CELLS // max(impacts.max_doc, 1))
    if threads > 1:
        per_block = max(1, min(per_block, -(-len(query_terms) // threads)))

    def block(first: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        last = min(first + per_block, len(query_terms))
        lo, hi = np.searchsorted(pair_query, [first, last])
        query, docs, scores = _score_block(
            impacts, pair_query[lo:hi] - first, pair_row[lo:hi], pair_count[lo:hi], last - first, k
        )
        return query + first, docs, scores

    firsts = range(0, len(query_terms), per_block)
    if threads > 1 and len(firsts) > 1:
        with ThreadPoolExecutor(min(threads, len(firsts))) as pool:
            parts = list(pool.map(block, firsts))
    else:
        parts = [block(first) for first in firsts]
    query = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, np.int64)
    docs = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, np.int32)
    raw = np.concatenate([p[2] for p in parts]) if parts else np.empty(0, np.float32)
    counts = np.bincount(query, minlength=len(query_terms))
    starts = np.cumsum(counts) - counts
    rank = np.arange(len(query), dtype=np.int64) - np.repeat(starts, counts) + 1
    scores = adjust_ties(raw, starts, rank - 1)
    top = rank <= k
    return ImpactRun(query[top], docs[top], raw[top], scores[top], rank[top].astype(np.int32))


def _query_rows(impacts: ImpactIndex, query_terms: list[list[str]]) -> tuple[np.ndarray, ...]:
    """(query, term row, count in the query) of every distinct indexed term of every query."""
    pair_query, pair_row, pair_count = [], [], []
    rows_of = impacts.term_rows
    for number, terms in enumerate(query_terms):
        counts: dict[int, int] = {}
        for term in terms:
            row = rows_of.get(term)
            if row is not None:
                counts[row] = counts.get(row, 0) + 1
        pair_query.extend([number] * len(counts))
        pair_row.extend(counts)
        pair_count.extend(counts.values())
    return (
        np.asarray(pair_query, dtype=np.int64),
        np.asarray(pair_row, dtype=np.int64),
        np.asarray(pair_count, dtype=np.int64),
    )


def _score_block(
    impacts: ImpactIndex,
    pair_query: np.ndarray,
    pair_row: np.ndarray,
    pair_count: np.ndarray,
    n_queries: int,
    k: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query, doc, raw score) of a block of queries: each query's documents scoring at least its
    k-th, score descending, then by doc id.

    Documents are numbered by their place in the order of their ids, which says where each goes
    among tied ones: one sort of (query, score, place) keys ranks them.
    """
    n_docs = impacts.max_doc
    starts = impacts.indptr[pair_row]
    lengths = impacts.indptr[pair_row + 1] - starts
    offsets = np.cumsum(lengths) - lengths
    postings = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - offsets, lengths)
    values = impacts.impacts[postings]
    repeated = np.repeat(pair_count > 1, lengths)
    if repeated.any():  # weight = count * idf, in float, then Lucene's formula
        weights = np.repeat(pair_count.astype(np.float32) * impacts.idf[pair_row], lengths)[repeated]
        values[repeated] = term_impacts(
            weights, impacts.freqs[postings[repeated]], impacts.cache[impacts.norms[impacts.docs[postings[repeated]]]]
        )
    # One cell per (query, document), numbered by the document's place in id order. A cell's
    # postings are summed without a (queries x documents) array of sums: `marker` (never
    # cleared: only cells written here are read) names one posting per cell, and the cells are
    # numbered in the order of those postings, so they stay grouped by query.
    cells = np.repeat(pair_query * n_docs, lengths) + impacts.doc_ranks[postings]
    here = np.arange(len(cells), dtype=np.int32 if len(cells) < 2**31 else np.int64)
    marker = np.empty(n_queries * n_docs, dtype=np.int32 if len(cells) < 2**31 else np.int64)
    marker[cells] = here
    named = marker[cells]
    first = named == here
    number = np.cumsum(first) - 1
    sums = np.bincount(number[named], weights=values, minlength=int(first.sum()))  # in double, as Lucene
    matched = cells[first]
    scores = sums.astype(np.float32)
    query, place = np.divmod(matched, n_docs)
    counts = np.bincount(query, minlength=n_queries)
    if counts.max(initial=0) > k:
        keep = np.ones(len(scores), dtype=bool)
        ends = np.cumsum(counts)
        for q in np.flatnonzero(counts > k):
            segment = scores[ends[q] - counts[q] : ends[q]]
            kth = -np.partition(-segment, k - 1)[k - 1]
            keep[ends[q] - counts[q] : ends[q]] = segment >= kth
        query, place, scores = query[keep], place[keep], scores[keep]
    # Positive float32 scores order as their bit patterns (31 bits) do; (query, -score, place) fit
    # in one int64, since queries x documents in a block is below 2**23: one plain sort.
    place_bits = max(int(n_docs - 1).bit_length(), 1)
    score_key = (0x7FFFFFFF - scores.view(np.int32)).astype(np.int64)
    keys = np.sort((query << (31 + place_bits)) | (score_key << place_bits) | place)
    query = keys >> (31 + place_bits)
    scores = (0x7FFFFFFF - ((keys >> place_bits) & 0x7FFFFFFF)).astype(np.int32).view(np.float32)
    return query, impacts.docs_by_rank[keys & ((1 << place_bits) - 1)], scores


def adjust_ties(scores: np.ndarray, starts: np.ndarray, since_first: np.ndarray | None = None) -> np.ndarray:
    """Anserini's `ScoreTiesAdjusterReranker` over many queries' hits at once, in float.

    Within a query (hits from `starts[q]`, score descending): each score is rounded to 4 decimals
    in double (Anserini 1.7's rounding; 0.94285f, which is 0.9428499..., becomes 0.9428), then,
    going down the list, a score that is not more than 1e-4 below the previous adjusted score is
    lowered by 1e-6 times its place in that run of ties. Each adjusted score depends on the one
    before it; the runs are found by iterating to the fixed point, which the sequential rule
    determines uniquely (each pass fixes at least the first wrong place and leaves those before
    it right), over the places that can be tied at all and the place before each.
    `since_first[i]` (optional) is place i's distance from its query's first place.
    """
    f = np.float32
    # (float) (Math.round(score * 1e4) / 1e4), in double; Math.round(x) is floor(x + 0.5), exact here
    rounded = (np.floor(scores.astype(np.float64) * 1e4 + 0.5) / 1e4).astype(f)
    n = len(rounded)
    first = np.zeros(n, dtype=bool)
    first[starts[starts < n]] = True
    if n < 2:
        return rounded
    # A place can be tied only if its score is within 1e-4 of the one before, lowered by at most
    # 1e-6 per place since its query's first (with room for float rounding).
    if since_first is None:
        place = np.arange(n)
        since_first = place - np.maximum.accumulate(np.where(first, place, 0))
    gap = rounded[:-1] - rounded[1:]  # float, off by at most an ulp of the scores: in the slack
    slack = f(1.2e-4) + f(1.02e-6) * since_first[1:].astype(f) + f(1e-6) * np.abs(rounded[:-1])
    maybe = np.zeros(n, dtype=bool)
    maybe[1:] = (gap <= slack) & ~first[1:]
    if not maybe.any():
        return rounded
    chosen = maybe.copy()
    chosen[:-1] |= maybe[1:]  # each with the place before it
    where = np.flatnonzero(chosen)
    adjusted = rounded.copy()
    adjusted[where] = _adjust_runs(rounded[where], ~maybe[where])
    return adjusted


def _adjust_runs(rounded: np.ndarray, untied: np.ndarray) -> np.ndarray:
    """The tie rule over consecutive places, the `untied` ones known to start anew."""
    f = np.float32
    n = len(rounded)
    place = np.arange(n)
    tied = np.zeros(n, dtype=bool)
    while True:
        dup = place - np.maximum.accumulate(np.where(tied, 0, place))  # tied places since the last untied
        adjusted = np.where(tied, rounded - f(1e-6) * dup.astype(f), rounded).astype(f)
        new_tied = np.zeros(n, dtype=bool)
        new_tied[1:] = ~((adjusted[:-1] - rounded[1:]) > f(1e-4))
        new_tied &= ~untied
        if np.array_equal(new_tied, tied):
            return adjusted
        tied = new_tied
