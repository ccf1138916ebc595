"""The Cranfield collection read from its original distribution files, exactly as ir_datasets reads it.

`read_cranfield(directory)` reads `cran.all.1400`, `cran.qry` and `cranqrel` and gives the same
documents, queries and qrels as `ir_datasets.load("cranfield")` (ir_datasets 0.6.3,
`ir_datasets/datasets/cranfield.py`), whose rules are not the obvious ones:

* A record starts at a line beginning `.I `; its id is the rest of that line. A later line that
  *begins* with `.T`, `.A`, `.B` or `.W` (documents) or `.W` (queries) switches the field being
  read; the rest of a marker line is discarded. Field lines are concatenated with their line breaks
  and the whole field is stripped, so a title or text keeps its inner newlines.
* Files are read as text with universal newlines (`cran.qry` ships with CRLF endings).
* Query ids are renumbered 1..225 in file order: the `.I` numbers of `cran.qry` skip values, while
  `cranqrel` uses the running number.
* `cranqrel` lines are `qid docid code`; the code is kept as is (ir_datasets does not map it):
  -1 no interest, 1 minimum interest, 2 useful background, 3 high relevance, 4 complete answer.

Documents become CORPUS rows with `title` = `.T` and `text` = `.W` (ir_datasets' `text` field; the
author `.A` and bibliography `.B` are dropped). Where ir_datasets would silently drop a record or
crash (text before the first `.I`, an `.I` with no lines after it, a duplicate id, a bad qrels line)
this reader raises `CranfieldFormatError` naming the file and line; on well-formed files the results
are identical.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from dagster_ir.collections.local import CollectionFormatError
from dagster_ir.schemas import CORPUS, QRELS, QUERIES

DOCS_FILE = "cran.all.1400"
QUERIES_FILE = "cran.qry"
QRELS_FILE = "cranqrel"
RECORD_START = ".I "
DOC_MARKERS = {".T": "title", ".A": "author", ".B": "bib", ".W": "text"}
QUERY_MARKERS = {".W": "text"}
ID_FIELD = "_id"


class CranfieldFormatError(CollectionFormatError):
    """A Cranfield distribution file does not follow the format."""


@dataclass(frozen=True)
class CranfieldRecord:
    """One `.I` record: its id, the line it starts on, and its stripped fields."""

    record_id: str
    line: int
    fields: dict[str, str]


def read_cranfield(directory: str | os.PathLike[str]) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Read (corpus, queries, qrels) from a folder holding the three Cranfield files."""
    directory = Path(directory)
    return (
        read_cranfield_docs(directory / DOCS_FILE),
        read_cranfield_queries(directory / QUERIES_FILE),
        read_cranfield_qrels(directory / QRELS_FILE),
    )


def read_cranfield_docs(path: str | os.PathLike[str]) -> pl.DataFrame:
    """CORPUS frame of `cran.all.1400`: doc_id = `.I`, title = `.T`, text = `.W`."""
    records = _unique_ids(path, parse_records(path, DOC_MARKERS))
    rows = [(r.record_id, r.fields["title"], r.fields["text"]) for r in records]
    return pl.DataFrame(rows, schema=CORPUS, orient="row")


def read_cranfield_queries(path: str | os.PathLike[str]) -> pl.DataFrame:
    """QUERIES frame of `cran.qry`, with query ids renumbered 1..n in file order."""
    records = _unique_ids(path, parse_records(path, QUERY_MARKERS))
    rows = [(str(number), r.fields["text"]) for number, r in enumerate(records, start=1)]
    return pl.DataFrame(rows, schema=QUERIES, orient="row")


def read_cranfield_qrels(path: str | os.PathLike[str]) -> pl.DataFrame:
    """QRELS frame of `cranqrel` (`qid docid code` per line; the code is the relevance)."""
    rows: list[tuple[str, str, int]] = []
    seen: dict[tuple[str, str], int] = {}
    for number, line in _numbered_lines(path):
        columns = line.split()
        if len(columns) != 3:
            raise _fail(path, number, f"expected 3 columns `qid docid code`, found {len(columns)}")
        query_id, doc_id, code = columns
        relevance = _integer(code, path, number)
        if (query_id, doc_id) in seen:
            first = seen[query_id, doc_id]
            raise _fail(path, number, f"duplicate judgment ({query_id}, {doc_id}); first at line {first}")
        seen[query_id, doc_id] = number
        rows.append((query_id, doc_id, relevance))
    return pl.DataFrame(rows, schema=QRELS, orient="row")


def parse_records(path: str | os.PathLike[str], markers: dict[str, str]) -> list[CranfieldRecord]:
    """Split a `.I`-record file into records whose fields are named by `markers` (see module doc)."""
    records: list[CranfieldRecord] = []
    current: _RecordBuilder | None = None
    for number, line in _numbered_lines(path, keep_ends=True):
        if line.startswith(RECORD_START):
            if current is not None:
                records.append(current.build(path))
            current = _RecordBuilder(line.replace(RECORD_START, ""), number, markers)
        elif current is None:
            raise _fail(path, number, "text before the first `.I` record")
        else:
            current.add(line)
    if current is not None:
        records.append(current.build(path))
    return records


class _RecordBuilder:
    """Accumulates the lines of one record; lines before the first marker extend the id, as in ir_datasets."""

    def __init__(self, id_line: str, line: int, markers: dict[str, str]) -> None:
        self.markers = markers
        self.line = line
        self.fields = {ID_FIELD: id_line, **dict.fromkeys(markers.values(), "")}
        self.field = ID_FIELD
        self.n_lines = 0

    def add(self, line: str) -> None:
        self.n_lines += 1
        marker = next((m for m in self.markers if line.startswith(m)), None)
        if marker is None:
            self.fields[self.field] += line
        else:
            self.field = self.markers[marker]

    def build(self, path: str | os.PathLike[str]) -> CranfieldRecord:
        if self.n_lines == 0:
            raise _fail(path, self.line, "`.I` record with no lines after it")
        fields = {name: text.strip() for name, text in self.fields.items()}
        return CranfieldRecord(fields.pop(ID_FIELD), self.line, fields)


def _unique_ids(path: str | os.PathLike[str], records: list[CranfieldRecord]) -> list[CranfieldRecord]:
    first: dict[str, int] = {}
    for record in records:
        if record.record_id in first:
            line = first[record.record_id]
            raise _fail(path, record.line, f"duplicate id {record.record_id!r}; first at line {line}")
        first[record.record_id] = record.line
    return records


def _numbered_lines(path: str | os.PathLike[str], *, keep_ends: bool = False) -> Iterator[tuple[int, str]]:
    """(1-based number, line) with universal newlines, as ir_datasets' text wrappers read them."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            yield number, (line if keep_ends else line.rstrip("\n"))


def _integer(text: str, path: str | os.PathLike[str], line: int) -> int:
    try:
        return int(text)
    except ValueError:
        raise _fail(path, line, f"relevance code {text!r} is not an integer") from None


def _fail(path: str | os.PathLike[str], line: int, message: str) -> CranfieldFormatError:
    return CranfieldFormatError(f"{path}:{line}: {message}")
