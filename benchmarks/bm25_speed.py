"""Speed of BM25 top-k search: ours (`lucene.search`) against `bm25s`.

Ours runs two ways: from precomputed impacts (the default for an index that fits in memory, see
`dagster_ir/retrieval/impact.py`) and with Lucene's searcher (`impact_max_postings=0`, the path
of larger indexes); both give the same run, which is checked here on every collection.

Two collections, each searched by all three in this process with the same k1, b, k and threads:
Cranfield (1,400 abstracts, 225 queries; skipped when its folder is absent) and a seeded synthetic
one (100k documents of 50-200 words drawn from a Zipfian vocabulary, 500 queries of 2-6 words).
Search speed is queries per second, end to end: query text in, RUN frame out. Each side first
runs `--warmup` untimed searches (ours: the JVM's compiler warms up and `search` opens the index,
which then stays open in the process, and the impacts path computes its impacts and writes them
beside the index; bm25s: nothing to warm, but it gets the same rounds), whose first time is
printed as "cold"; then each is timed `--repeat` times, taking turns at going first, and the best
time is kept (the machine is shared). Index time is reported separately: `build_index` (JSON
collection + Anserini, `--threads`) and the impacts (read from the index, computed, written)
against bm25s's tokenizer plus `BM25.index`.

Each collection also prints where Lucene's searcher spends a one-thread search, stage by stage (query
building, Lucene's top-n search, the hits' crossing into Python, the tie adjustment, the run
frame), beside bm25s's whole search: what bounds the ratio.

The two are not the same BM25 to the last digit, so the effectiveness of both on Cranfield is
printed too. Same: the formula (bm25s `method="lucene"`: Lucene's idf, no (k1 + 1) factor), k1,
b, the 33 English stop words. Different: Lucene's analyzer keeps one-character tokens and applies
Porter stemming; bm25s's regex tokenizer drops one-character tokens and stems only with PyStemmer
(Snowball English), used when installed (the line "bm25s stemmer" says which ran). Lucene stores
document lengths in one byte (lossy above ~40 tokens) and Anserini rounds scores to 4 decimals.
bm25s always returns k documents; those scoring 0 (no query term) are dropped, as Lucene never
returns them. The synthetic vocabulary is built so that stemming changes none of its words, so on
it both systems see the same terms.

    .venv/bin/python benchmarks/bm25_speed.py [--docs 100000] [--queries 500] [--k 1000]
        [--threads 2] [--repeat 3] [--warmup 2] [--cranfield ../shared/data/cranfield]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import polars as pl
from ratios import GOALS, print_ratio  # benchmarks/ratios.py: the line format make bench reads

from dagster_ir.collections.cranfield import read_cranfield
from dagster_ir.evaluation import aggregate, evaluate_run
from dagster_ir.retrieval.lucene import Bm25Config, build_index, search
from dagster_ir.schemas import CORPUS, QUERIES, RUN

DEFAULT_CRANFIELD = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cranfield"
MEASURES = ["nDCG@10", "R@1000", "AP"]

# --- a synthetic collection ---------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticConfig:
    """Shape of the synthetic collection: Zipf's law over a vocabulary of made-up words."""

    n_docs: int = 100_000
    n_queries: int = 500
    vocabulary: int = 200_000
    zipf_exponent: float = 1.0
    median_doc_words: int = 100  # log-normal lengths, clipped to doc_words
    doc_words: tuple[int, int] = (50, 200)
    query_words: tuple[int, int] = (2, 6)
    query_skip_top: int = 50  # the most frequent words (the function words) never occur in queries
    seed: int = 0


_CONSONANTS = list("bdfgklmnprstvz")
_VOWELS = list("aeiou")
_FINAL_VOWELS = list("ao")  # no Porter rule removes or rewrites a final "a" or "o" after a consonant


def synthetic_vocabulary(size: int, rng: np.random.Generator) -> pl.Series:
    """`size` distinct consonant-vowel words of 2-4 syllables, shortest first (frequent = short).

    They end in "a" or "o", so Porter stemming leaves them as they are, and none is a stop word.
    """
    words: dict[str, None] = {}
    while len(words) < size:
        batch = 2 * (size - len(words))
        n_syllables = rng.choice([2, 3, 4], size=batch, p=[0.02, 0.38, 0.6])
        consonants = rng.choice(_CONSONANTS, (batch, 4))
        vowels = rng.choice(_VOWELS, (batch, 4))
        vowels[np.arange(batch), n_syllables - 1] = rng.choice(_FINAL_VOWELS, batch)
        for c, v, n in zip(consonants.tolist(), vowels.tolist(), n_syllables.tolist()):
            words.setdefault("".join(a + b for a, b in zip(c[:n], v[:n])))
    vocabulary = sorted(list(words)[:size], key=len)
    return pl.Series("word", vocabulary, dtype=pl.String)


def zipf_ranks(n: int, vocabulary: int, exponent: float, rng: np.random.Generator, skip: int = 0) -> np.ndarray:
    """`n` word ranks (0 = most frequent) drawn with P(r) proportional to 1 / (r + 1)^exponent, r >= skip."""
    weights = 1.0 / np.arange(skip + 1, vocabulary + 1, dtype=np.float64) ** exponent
    cdf = np.cumsum(weights)
    ranks = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    return np.minimum(ranks, vocabulary - skip - 1) + skip


def _join_words(vocabulary: pl.Series, ranks: np.ndarray, lengths: np.ndarray) -> pl.Series:
    """Texts of `lengths[i]` consecutive words each, the words being `vocabulary[ranks]`."""
    owner = np.repeat(np.arange(len(lengths)), lengths)
    words = pl.DataFrame({"owner": owner, "word": vocabulary.gather(ranks)})
    texts = words.group_by("owner", maintain_order=True).agg(pl.col("word").str.join(" "))
    return texts["word"]


def synthetic_collection(config: SyntheticConfig) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(CORPUS, QUERIES) frames: doc ids d0.., query ids q0.., empty titles."""
    rng = np.random.default_rng(config.seed)
    vocabulary = synthetic_vocabulary(config.vocabulary, rng)
    low, high = config.doc_words
    doc_lengths = rng.lognormal(np.log(config.median_doc_words), 0.35, config.n_docs)
    doc_lengths = np.clip(doc_lengths, low, high).astype(np.int64)
    doc_ranks = zipf_ranks(int(doc_lengths.sum()), config.vocabulary, config.zipf_exponent, rng)
    query_lengths = rng.integers(config.query_words[0], config.query_words[1] + 1, config.n_queries)
    query_ranks = zipf_ranks(
        int(query_lengths.sum()), config.vocabulary, config.zipf_exponent, rng, skip=config.query_skip_top
    )
    corpus = pl.DataFrame(
        {
            "doc_id": [f"d{i}" for i in range(config.n_docs)],
            "title": [""] * config.n_docs,
            "text": _join_words(vocabulary, doc_ranks, doc_lengths),
        },
        schema=CORPUS,
    )
    queries = pl.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(config.n_queries)],
            "text": _join_words(vocabulary, query_ranks, query_lengths),
        },
        schema=QUERIES,
    )
    return corpus, queries


# --- bm25s, set up as close to our Lucene BM25 as it goes ---------------------------------------


@dataclass(frozen=True)
class Bm25sIndex:
    """A bm25s retriever, the doc id of each of its rows, and the stemmer its tokens went through."""

    retriever: Any
    doc_ids: np.ndarray
    stemmer: Any


def pystemmer_or_none() -> Any:
    """PyStemmer's English (Snowball) stemmer, bm25s's recommended one, or None when not installed."""
    try:
        import Stemmer
    except ImportError:
        return None
    return Stemmer.Stemmer("english")


def _contents(corpus: pl.DataFrame) -> list[str]:
    """What ours indexes for each document: title + newline + text."""
    parts = [pl.col("title").fill_null(""), pl.col("text").fill_null("")]
    return corpus.select(pl.concat_str(parts, separator="\n").alias("contents"))["contents"].to_list()


def bm25s_index(corpus: pl.DataFrame, model: Bm25Config, stemmer: Any) -> Bm25sIndex:
    """Tokenise (English stop words, `stemmer`) and index `corpus` with bm25s's Lucene BM25."""
    tokens = bm25s.tokenize(_contents(corpus), stopwords="en", stemmer=stemmer, show_progress=False)
    retriever = bm25s.BM25(method="lucene", k1=model.k1, b=model.b)
    retriever.index(tokens, show_progress=False)
    return Bm25sIndex(retriever, corpus["doc_id"].to_numpy(), stemmer)


def bm25s_search(index: Bm25sIndex, queries: pl.DataFrame, *, k: int, threads: int, run_name: str) -> pl.DataFrame:
    """Top-`k` documents of every query as a RUN frame; documents scoring 0 are left out."""
    texts = queries["text"].to_list()
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=index.stemmer, return_ids=False, show_progress=False)
    rows, scores = index.retriever.retrieve(tokens, k=k, n_threads=threads, show_progress=False)
    kept = scores.reshape(-1) > 0  # sorted per query, so the kept rows are ranks 1..n
    n_queries = len(queries)
    return pl.DataFrame(
        {
            "query_id": np.repeat(queries["query_id"].to_numpy(), k)[kept],
            "doc_id": index.doc_ids[rows.reshape(-1)[kept]],
            "score": scores.reshape(-1)[kept].astype(np.float64),
            "rank": np.tile(np.arange(1, k + 1, dtype=np.int32), n_queries)[kept],
            "run_name": run_name,
        },
        schema=RUN,
    )


# --- timing -------------------------------------------------------------------------------------


def timed(function: Callable[[], object]) -> tuple[float, object]:
    """Wall time of one call and its result."""
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def best_of_rotating(functions: list[Callable[[], object]], repeat: int, warmup: int = 0) -> tuple[Any, ...]:
    """Best time (and last result) of each function over `repeat` rounds, each round starting with
    the next one, after `warmup` untimed rounds of each; then the times of their first (cold) calls."""
    n = len(functions)
    best: list[tuple[float, object]] = [(float("inf"), None)] * n
    cold = [float("nan")] * n
    for round_no in range(warmup):
        for which in range(n):
            seconds, _ = timed(functions[which])
            if round_no == 0:
                cold[which] = seconds
    for round_no in range(repeat):
        for step in range(n):
            which = (round_no + step) % n
            seconds, result = timed(functions[which])
            best[which] = (min(best[which][0], seconds), result)
    return (*best, tuple(cold))


@dataclass(frozen=True)
class Comparison:
    """Index and search times of both systems on one collection, and their runs."""

    name: str
    n_docs: int
    ours_indexed: int  # Anserini leaves out documents whose contents are only white space
    n_queries: int
    ours_index_s: float
    bm25s_index_s: float
    ours_search_s: float
    bm25s_search_s: float
    lucene_search_s: float  # ours with Lucene's searcher
    ours_cold_s: float
    bm25s_cold_s: float
    lucene_cold_s: float
    impacts_s: float  # reading the postings and computing and writing the impacts
    same_run: bool  # the impacts' run equals Lucene's searcher's, scores and order
    ours_run: pl.DataFrame
    bm25s_run: pl.DataFrame
    ours_stages: dict[str, float]  # `stages`: one thread of ours, by stage
    threads: int


def compare(
    name: str, corpus: pl.DataFrame, queries: pl.DataFrame, args: argparse.Namespace, stemmer: Any
) -> Comparison:
    """Index `corpus` with both systems, then time both searches of `queries`."""
    model = Bm25Config(k1=0.9, b=0.4)
    with tempfile.TemporaryDirectory(prefix="bm25_speed.") as tmp:
        index_dir = Path(tmp) / "index"
        ours_index_s, stats = timed(lambda: build_index(corpus, index_dir, threads=args.threads))
        bm25s_index_s, index = timed(lambda: bm25s_index(corpus, model, stemmer))
        impacts_s, _ = timed(lambda: search(index_dir, queries.head(1), k=1, model=model, run_name="ours"))
        (ours_s, ours_run), (theirs_s, theirs_run), (lucene_s, lucene_run), cold = best_of_rotating(
            [
                lambda: search(index_dir, queries, k=args.k, model=model, threads=args.threads, run_name="ours"),
                lambda: bm25s_search(index, queries, k=args.k, threads=args.threads, run_name="bm25s"),
                lambda: search(
                    index_dir,
                    queries,
                    k=args.k,
                    model=model,
                    threads=args.threads,
                    run_name="ours",
                    impact_max_postings=0,
                ),
            ],
            args.repeat,
            args.warmup,
        )
        spent = stages(index_dir, queries, args.k, model, args.repeat)
    return Comparison(
        name,
        corpus.height,
        stats.documents,
        queries.height,
        ours_index_s,
        bm25s_index_s,
        ours_s,
        theirs_s,
        lucene_s,
        *cold,
        impacts_s,
        ours_run.equals(lucene_run),
        ours_run,
        theirs_run,
        spent,
        args.threads,
    )


def stages(index_dir: Path, queries: pl.DataFrame, k: int, model: Bm25Config, repeat: int) -> dict[str, float]:
    """Where one thread of ours with Lucene's searcher spends its search time, per stage over every query (best of `repeat`):
    Anserini's query building, Lucene's `IndexSearcher.search` (top-n collection in Java), the hits'
    copy into arrays and their crossing into Python, Anserini's tie adjustment, and the run frame.
    Uses `lucene`'s private searcher: a breakdown for this benchmark, not an API."""
    from dagster_ir.retrieval import lucene

    texts = queries["text"].to_list()
    best = dict.fromkeys(["query", "search", "hits", "ties", "frame"], float("inf"))
    with lucene._open_index(index_dir) as index:
        searcher = index.searcher(model)
        n = k + max(k // 4, 10)
        for _ in range(repeat):
            spent = dict.fromkeys(best, 0.0)
            hits = []
            for text in texts:
                t0 = time.perf_counter()
                query = searcher._generator.buildQuery(lucene._CONTENTS_FIELD, searcher._analyzer, text)
                t1 = time.perf_counter()
                top_docs = searcher._searcher.search(query, n)
                t2 = time.perf_counter()
                top = searcher._scored_docs.fromTopDocs(top_docs, searcher._hits_searcher)
                docids, raw = np.asarray(top.lucene_docids, dtype=np.int32), np.asarray(top.scores, dtype=np.float32)
                t3 = time.perf_counter()
                adjusted = np.asarray(searcher._ties.rerank(top, None).scores, dtype=np.float32)
                t4 = time.perf_counter()
                hits.append(lucene._Hits(docids, raw, adjusted))
                for name, seconds in zip(("query", "search", "hits", "ties"), (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                    spent[name] += seconds
            t5 = time.perf_counter()
            lucene._run_frame(queries["query_id"], hits, index, k, "ours")
            spent["frame"] = time.perf_counter() - t5
            best = {name: min(best[name], spent[name]) for name in best}
    return best


def print_stages(name: str, spent: dict[str, float], bm25s_s: float, threads: int) -> None:
    total = sum(spent.values())
    cells = ", ".join(f"{stage} {seconds:.3f} s ({seconds / total:.0%})" for stage, seconds in spent.items())
    print(
        f"  ours on one thread, by stage ({name}): {cells}; total {total:.3f} s; "
        f"bm25s on {threads} threads: {bm25s_s:.3f} s"
    )


def print_comparison(c: Comparison) -> None:
    ours_qps, theirs_qps = c.n_queries / c.ours_search_s, c.n_queries / c.bm25s_search_s
    lucene_qps = c.n_queries / c.lucene_search_s
    goal = GOALS.get(f"BM25 q/s, ours / bm25s, {c.name}")
    goal_text = f" (goal {goal[0]} {goal[1]:g})" if goal else ""
    print(f"{c.name}: {c.n_docs:,} docs ({c.ours_indexed:,} indexed by ours), {c.n_queries} queries")
    print(f"  index   ours {c.ours_index_s:8.2f} s + impacts {c.impacts_s:.2f} s   bm25s {c.bm25s_index_s:8.2f} s")
    print(
        f"  search  ours (impacts) {ours_qps:8.1f} q/s ({c.ours_search_s:.3f} s)   "
        f"ours (Lucene) {lucene_qps:8.1f} q/s ({c.lucene_search_s:.3f} s)   "
        f"bm25s {theirs_qps:8.1f} q/s ({c.bm25s_search_s:.3f} s)"
    )
    print(
        f"  ratios  impacts/bm25s = {ours_qps / theirs_qps:.2f}{goal_text}   "
        f"Lucene/bm25s = {lucene_qps / theirs_qps:.2f}   impacts/Lucene = {ours_qps / lucene_qps:.2f}"
    )
    print(f"  same run (impacts vs Lucene's searcher: documents, order, scores): {c.same_run}")
    print(
        f"  cold    ours (impacts) {c.ours_cold_s:8.2f} s   ours (Lucene) {c.lucene_cold_s:8.2f} s   "
        f"bm25s {c.bm25s_cold_s:8.2f} s (first search)"
    )
    print(
        f"  hits    ours {c.ours_run.height:,}   bm25s {c.bm25s_run.height:,} (score > 0)   "
        f"top-10 overlap {top_overlap(c.ours_run, c.bm25s_run, 10):.3f}"
    )
    print_stages(c.name, c.ours_stages, c.bm25s_search_s, c.threads)


def top_overlap(run: pl.DataFrame, other: pl.DataFrame, depth: int) -> float:
    """Mean over the queries of `run` of the share of its top `depth` also in `other`'s top `depth`."""
    tops = [r.filter(pl.col("rank") <= depth).select("query_id", "doc_id") for r in (run, other)]
    shared = tops[0].join(tops[1], on=["query_id", "doc_id"]).group_by("query_id").len()
    per_query = tops[0].group_by("query_id").len().join(shared, on="query_id", how="left", suffix="_shared")
    return per_query.select((pl.col("len_shared").fill_null(0) / pl.col("len")).mean()).item()


def print_effectiveness(c: Comparison, qrels: pl.DataFrame) -> None:
    means = aggregate(evaluate_run(pl.concat([c.ours_run, c.bm25s_run]), qrels, MEASURES))
    table = {(run, measure): mean for run, measure, mean in means.iter_rows()}
    cells = "   ".join(f"{m} ours {table['ours', m]:.4f} bm25s {table['bm25s', m]:.4f}" for m in MEASURES)
    print(f"  effectiveness  {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="report the best of this many searches")
    parser.add_argument("--warmup", type=int, default=2, help="untimed searches of each side first")
    parser.add_argument("--cranfield", type=Path, default=DEFAULT_CRANFIELD)
    args = parser.parse_args()

    stemmer = pystemmer_or_none()
    print(f"BM25 k1=0.9 b=0.4, top {args.k}, {args.threads} threads, best of {args.repeat} after {args.warmup} untimed")
    print(
        "bm25s stemmer: "
        + ("PyStemmer (Snowball English)" if stemmer else "none (PyStemmer not installed); ours: Porter")
    )
    comparisons = []
    if args.cranfield.is_dir():
        corpus, queries, qrels = read_cranfield(args.cranfield)
        comparisons.append(compare("cranfield", corpus, queries, args, stemmer))
        print_comparison(comparisons[-1])
        print_effectiveness(comparisons[-1], qrels)
    else:
        print(f"cranfield: skipped, no folder {args.cranfield}")
    config = SyntheticConfig(n_docs=args.docs, n_queries=args.queries)
    made_s, (corpus, queries) = timed(lambda: synthetic_collection(config))
    print(f"synthetic collection made in {made_s:.1f} s (seed {config.seed})")
    comparisons.append(compare("synthetic", corpus, queries, args, stemmer))
    print_comparison(comparisons[-1])
    for c in comparisons:
        print_ratio(f"BM25 q/s, ours / bm25s, {c.name}", c.bm25s_search_s / c.ours_search_s)
        print_ratio(f"BM25 q/s, ours with Lucene's searcher / bm25s, {c.name}", c.bm25s_search_s / c.lucene_search_s)


if __name__ == "__main__":
    main()
