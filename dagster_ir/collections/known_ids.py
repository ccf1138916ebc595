"""Qrels and runs must name queries of the topics and documents of the corpus.

A judgment or a run row for an unknown query or document is an error by default, naming the file,
the line and the id: a typo or a qrels file of another collection would otherwise count as extra
judged queries and change every measure quietly. A collection whose files are filtered on purpose
sets `on_unknown: drop` in the collections YAML: those rows are dropped and counted.

The corpus may be large: document ids are checked by an anti-join against the corpus's `doc_id`
column (lazy frames stream), and the file is read again for a line number only on the error path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl

ON_UNKNOWN = ("error", "drop")


class UnknownIdError(ValueError):
    """A qrels or run row names a query or document the collection does not have."""


@dataclass(frozen=True)
class UnknownIds:
    """What `check_known_ids` found: rows dropped and the distinct unknown ids."""

    rows_dropped: int = 0
    unknown_queries: int = 0
    unknown_documents: int = 0


def check_known_ids(
    frame: pl.DataFrame,
    *,
    query_ids: pl.Series | None,
    doc_ids: pl.Series | pl.LazyFrame | None,
    source: str | os.PathLike[str],
    what: str,
    on_unknown: str = "error",
    collection: str = "",
) -> tuple[pl.DataFrame, UnknownIds]:
    """`frame` (QRELS or RUN rows) without rows of unknown queries or documents.

    `query_ids` / `doc_ids` are the known ids (None: not checked; a LazyFrame with a `doc_id`
    column is joined lazily). With `on_unknown="error"` raises UnknownIdError
    `<source>:<line>: <what> names unknown query id 'x' ...`.
    """
    if on_unknown not in ON_UNKNOWN:
        raise ValueError(f"on_unknown must be one of {ON_UNKNOWN}, got {on_unknown!r}")
    unknown_query = pl.lit(False)
    if query_ids is not None:
        unknown_query = ~pl.col("query_id").is_in(query_ids.cast(pl.String).unique().implode())
    marked = frame.with_columns(_unknown_query=unknown_query)
    if doc_ids is not None:
        known_docs = (
            doc_ids.select("doc_id") if isinstance(doc_ids, pl.LazyFrame) else doc_ids.to_frame("doc_id").lazy()
        )
        present = (
            frame.lazy()
            .select("doc_id")
            .unique()
            .join(known_docs.select(pl.col("doc_id").cast(pl.String)).unique(), on="doc_id", how="semi")
        )
        marked = marked.with_columns(_unknown_doc=~pl.col("doc_id").is_in(present.collect()["doc_id"].implode()))
    else:
        marked = marked.with_columns(_unknown_doc=pl.lit(False))
    bad = marked.select(pl.col("_unknown_query") | pl.col("_unknown_doc")).to_series()
    if not bad.any():
        return frame, UnknownIds()
    found = UnknownIds(
        rows_dropped=int(bad.sum()),
        unknown_queries=marked.filter("_unknown_query")["query_id"].n_unique(),
        unknown_documents=marked.filter("_unknown_doc")["doc_id"].n_unique(),
    )
    if on_unknown == "drop":
        return frame.filter(~bad), found
    first = marked.filter(bad).row(0, named=True)
    kind, value = ("query", first["query_id"]) if first["_unknown_query"] else ("document", first["doc_id"])
    where = "the topics" if kind == "query" else "the corpus"
    line = _line_of(source, first["query_id"], first["doc_id"])
    at = f"{source}:{line}" if line else str(source)
    also = f" ({found.rows_dropped} rows name unknown ids)" if found.rows_dropped > 1 else ""
    hint = f"; `on_unknown: drop` under collections.{collection} drops them" if collection else ""
    raise UnknownIdError(f"{at}: {what} names unknown {kind} id {value!r}, not in {where}{also}{hint}")


def _line_of(source: str | os.PathLike[str], query_id: str, doc_id: str) -> int | None:
    """The first line of the file `source` whose first field is `query_id` and which holds `doc_id`."""
    path = Path(source)
    if not path.is_file():
        return None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if fields and fields[0] == query_id and doc_id in fields[1:]:
                return number
    return None
