"""Collections kept in local files: a corpus (JSONL or TSV), topics (TREC, TSV or JSONL), qrels.

The layouts users have on disk, each recognised from the file itself (`detect_layout` says which
one it found; the `collection` asset shows it):
* corpus, JSONL, one document per line (the first non-blank line starts with `{`, or the name ends
  in `.jsonl`, `.ndjson`, `.json`; `.gz` is read compressed): Pyserini's `{"id", "contents"}`,
  BEIR's `{"_id", "title", "text"}`, or any mix of the id keys `doc_id`, `docno`, `_id`, `id` (the
  first present; a string or an integer) and the text keys `text`, `contents`, `body`, with an
  optional `title` (absent or null: ""). Other keys (BEIR's `metadata`) are ignored.
* corpus, TSV without a header: `doc_id<TAB>text` or `doc_id<TAB>title<TAB>text`; the first line
  fixes the column count for the whole file.
* topics: a TREC topic file (`<top> <num> Number: 301 <title> ... <desc> Description: ... <narr>
  Narrative: ... </top>`), a TSV `qid<TAB>text`, or JSONL (BEIR's `queries.jsonl`: the id from
  `_id`, `id`, `query_id` or `qid`, the text from `text`, `query` or `title`).
  `read_topics` takes one field of a TREC topic (`title` by default; any tag such as `desc` or
  `narr`), drops the `Number:`/`Topic:`/`Description:`/`Narrative:` labels and closing tags like
  `</title>`, and collapses whitespace.
* qrels: TREC qrels (`qid iter docid rel`, read by `dagster_ir.retrieval.trec.read_qrels`) or
  BEIR's TSV (`query-id<TAB>corpus-id<TAB>score`, with or without that header line).
Blank lines are skipped, and a trailing `\\r` and a leading byte order mark are stripped; anything
else that does not fit raises `CollectionFormatError` naming the file and the 1-based line, and so
does a document id seen before (naming the line of its first use too). The corpus is streamed in
batches of CORPUS frames (`iter_corpus`), so a corpus never has to fit in memory: the ids seen are
kept as 64-bit hashes (8 bytes a document), and a repeated hash is confirmed by reading the file
again up to it, so a hash collision is never reported as a duplicate.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

import numpy as np
import polars as pl

from dagster_ir.retrieval.trec import read_qrels
from dagster_ir.schemas import CORPUS, QRELS, QUERIES

ID_KEYS = ("doc_id", "docno", "_id", "id")  # `id`: Pyserini, `_id`: BEIR
TEXT_KEYS = ("text", "contents", "body")
JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
DEFAULT_BATCH_SIZE = 50_000
_TAG = re.compile(r"<(/?)([A-Za-z]+)>")
_LABELS = {  # the label TREC puts after a tag, dropped from the field's text
    tag: re.compile(rf"^\s*{label}\s*:", re.IGNORECASE)
    for tag, label in {"num": "Number", "title": "Topic", "desc": "Description", "narr": "Narrative"}.items()
}
_CLOSING_TAG = re.compile(r"</[A-Za-z]+>")
_QUERY_ID_TAG = "num"

QUERY_ID_KEYS = ("_id", "id", "query_id", "qid")
QUERY_TEXT_KEYS = ("text", "query", "title")
BEIR_QRELS_HEADER = ("query-id", "corpus-id", "score")

TopicFormat = Literal["trec", "tsv", "jsonl"]
PathLike = str | os.PathLike[str]


class CollectionFormatError(ValueError):
    """A collection file does not have the expected format; the message names the file and line."""


def _fail(path: PathLike, line: int, message: str) -> CollectionFormatError:
    return CollectionFormatError(f"{path}:{line}: {message}")


# --- corpus -------------------------------------------------------------------------------------


def iter_corpus(path: PathLike, *, batch_size: int = DEFAULT_BATCH_SIZE) -> Iterator[pl.DataFrame]:
    """Stream a JSONL or TSV corpus as CORPUS frames of at most `batch_size` rows."""
    if batch_size < 1:
        raise ValueError(f"iter_corpus: batch_size must be positive, got {batch_size}")
    parse = _json_document if _is_json(path) else _TsvDocuments().parse
    seen = _SeenIds(path)
    batch: list[tuple[str, str, str]] = []
    lines: list[int] = []
    for number, line in _numbered_lines(path):
        batch.append(parse(line, path, number))
        lines.append(number)
        if len(batch) >= batch_size:
            yield seen.checked(pl.DataFrame(batch, schema=CORPUS, orient="row"), lines)
            batch, lines = [], []
    if batch:
        yield seen.checked(pl.DataFrame(batch, schema=CORPUS, orient="row"), lines)


class _SeenIds:
    """The document ids of a corpus file read so far, as a sorted array of 64-bit hashes."""

    def __init__(self, path: PathLike) -> None:
        self.path = path
        self.hashes = np.empty(0, dtype=np.uint64)

    def checked(self, batch: pl.DataFrame, lines: list[int]) -> pl.DataFrame:
        """`batch` once none of its ids repeats an earlier one; else CollectionFormatError."""
        hashes = batch["doc_id"].hash(seed=0).to_numpy()
        order = np.argsort(hashes, kind="stable")
        repeated = np.zeros(len(hashes), dtype=bool)
        repeated[order[1:][hashes[order][1:] == hashes[order][:-1]]] = True  # later ones in the batch
        if len(self.hashes):
            at = np.minimum(np.searchsorted(self.hashes, hashes), len(self.hashes) - 1)
            repeated |= self.hashes[at] == hashes
        for i in np.flatnonzero(repeated):  # in line order: the first real repetition is reported
            doc_id = batch["doc_id"][int(i)]
            first = self._first_line(doc_id, before=lines[i])
            if first is not None:
                raise _fail(self.path, lines[i], f"duplicate document id {doc_id!r}; first at line {first}")
        self.hashes = np.sort(np.concatenate([self.hashes, hashes[order]]), kind="stable")  # two sorted runs
        return batch

    def _first_line(self, doc_id: str, *, before: int) -> int | None:
        """The line before `before` where `doc_id` occurs (None: the hashes only collided)."""
        parse = _json_document if _is_json(self.path) else _TsvDocuments().parse
        for number, line in _numbered_lines(self.path):
            if number >= before:
                return None
            if parse(line, self.path, number)[0] == doc_id:
                return number
        return None


def read_corpus(path: PathLike) -> pl.DataFrame:
    """The whole corpus as one CORPUS frame (for small collections; see `iter_corpus`)."""
    return pl.concat([pl.DataFrame(schema=CORPUS), *iter_corpus(path)])


def _is_json(path: PathLike) -> bool:
    """JSONL by name, or by content: the first non-blank line starts with `{`."""
    if Path(str(path).removesuffix(".gz")).suffix.lower() in JSON_SUFFIXES:
        return True
    first = _first_line(path)
    return first is not None and first.lstrip().startswith("{")


def _first_line(path: PathLike) -> str | None:
    for _, line in _numbered_lines(path):
        return line
    return None


def _open_binary(path: PathLike) -> IO[bytes]:
    return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")


def _numbered_lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers, split on `\\n` only, decoded as UTF-8 line by line.

    A trailing `\\r` is dropped; a stray `\\r` inside a line stays in its text.
    """
    with _open_binary(path) as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise _fail(path, number, f"not valid UTF-8 ({error.reason})") from None
            line = line.removesuffix("\n").removesuffix("\r")
            if number == 1:
                line = line.removeprefix("\ufeff")
            if line.strip():
                yield number, line


def _json_object(line: str, path: PathLike, number: int) -> dict:
    """One JSONL line as a JSON object, or an error naming the file and line."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise _fail(path, number, f"invalid JSON at column {error.colno}: {error.msg}") from None
    if not isinstance(record, dict):
        raise _fail(path, number, f"expected a JSON object, found {type(record).__name__}")
    return record


def _id_key(record: dict, keys, path: PathLike, number: int):
    """The record's id under the first of `keys` it has; an integer id becomes its string."""
    value = _first_key(record, keys, path, number)
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _json_document(line: str, path: PathLike, number: int) -> tuple[str, str, str]:
    record = _json_object(line, path, number)
    doc_id = _id_key(record, ID_KEYS, path, number)
    text = _first_key(record, TEXT_KEYS, path, number)
    title = record.get("title") or ""  # absent, null or empty
    for name, value in (("id", doc_id), ("text", text), ("title", title)):
        if not isinstance(value, str):
            raise _fail(path, number, f"document {name} must be a string, found {type(value).__name__}")
    if not doc_id:
        raise _fail(path, number, "empty document id")
    return doc_id, title, text


def _first_key(record: dict, keys: tuple[str, ...], path: PathLike, number: int) -> object:
    for key in keys:
        if key in record:
            return record[key]
    raise _fail(path, number, f"none of the keys {list(keys)} (has {sorted(record)[:10]})")


class _TsvDocuments:
    """Parses `doc_id<TAB>text` or `doc_id<TAB>title<TAB>text` lines; the first line fixes the layout."""

    def __init__(self) -> None:
        self.n_columns: int | None = None

    def parse(self, line: str, path: PathLike, number: int) -> tuple[str, str, str]:
        columns = line.split("\t")
        if self.n_columns is None:
            if len(columns) not in (2, 3):
                layouts = "`doc_id<TAB>text` or `doc_id<TAB>title<TAB>text`"
                raise _fail(path, number, f"expected {layouts}, found {len(columns)} columns")
            self.n_columns = len(columns)
        if len(columns) != self.n_columns:
            raise _fail(
                path,
                number,
                f"expected {self.n_columns} tab-separated columns (as on the first line), found {len(columns)}",
            )
        if not columns[0]:
            raise _fail(path, number, "empty document id")
        if self.n_columns == 2:
            return columns[0], "", columns[1]
        return columns[0], columns[1], columns[2]


# --- topics -------------------------------------------------------------------------------------


def read_topics(path: PathLike, *, field: str = "title", format: TopicFormat | None = None) -> pl.DataFrame:
    """QUERIES frame from a TREC topic file (taking `field`), a `qid<TAB>text` TSV or JSONL queries.

    `format` defaults to sniffing: a file whose first non-blank line starts with `<` is TREC, one
    that starts with `{` is JSONL. Fails on a duplicate query id, a topic without `<num>` or without
    `field`, or an unclosed `<top>`.
    """
    format = format or _sniff_topic_format(path)
    if format not in ("trec", "tsv", "jsonl"):
        raise ValueError(f"read_topics: format must be 'trec', 'tsv' or 'jsonl', got {format!r}")
    readers = {
        "trec": lambda: _trec_topics(path, field),
        "tsv": lambda: _tsv_topics(path),
        "jsonl": lambda: _jsonl_topics(path),
    }
    rows = readers[format]()
    seen: dict[str, int] = {}
    for query_id, _, number in rows:
        if query_id in seen:
            raise _fail(path, number, f"duplicate query id {query_id!r}; first at line {seen[query_id]}")
        seen[query_id] = number
    return pl.DataFrame([(q, text) for q, text, _ in rows], schema=QUERIES, orient="row")


def _sniff_topic_format(path: PathLike) -> TopicFormat:
    line = _first_line(path)
    if line is None:
        raise _fail(path, 1, "empty topics file")
    start = line.lstrip()[:1]
    return "trec" if start == "<" else "jsonl" if start == "{" else "tsv"


def _jsonl_topics(path: PathLike) -> list[tuple[str, str, int]]:
    rows = []
    for number, line in _numbered_lines(path):
        record = _json_object(line, path, number)
        query_id = _id_key(record, QUERY_ID_KEYS, path, number)
        text = _first_key(record, QUERY_TEXT_KEYS, path, number)
        if not isinstance(query_id, str) or not query_id:
            raise _fail(path, number, f"query id must be a non-empty string, found {query_id!r}")
        if not isinstance(text, str):
            raise _fail(path, number, f"query text must be a string, found {type(text).__name__}")
        rows.append((query_id, text, number))
    return rows


def _tsv_topics(path: PathLike) -> list[tuple[str, str, int]]:
    rows = []
    for number, line in _numbered_lines(path):
        columns = line.split("\t")
        if len(columns) != 2 or not columns[0]:
            raise _fail(path, number, f"expected `qid<TAB>text`, found {len(columns)} columns")
        rows.append((columns[0], columns[1], number))
    return rows


def _trec_topics(path: PathLike, field: str) -> list[tuple[str, str, int]]:
    """(query_id, text of `field`, line of `<top>`) for each topic of a TREC topic file."""
    rows = []
    topic: dict[str, str] | None = None
    start = 0
    tag: str | None = None
    for number, line in _numbered_lines(path):
        match = _TAG.match(line.lstrip())
        name = match.group(2).lower() if match else None
        if match and name == "top" and not match.group(1):
            if topic is not None:
                raise _fail(path, number, f"`<top>` inside the topic opened at line {start}")
            topic, start, tag = {}, number, None
        elif match and name == "top":
            if topic is None:
                raise _fail(path, number, "`</top>` without `<top>`")
            rows.append(_finish_topic(topic, field, path, start))
            topic = None
        elif topic is None:
            raise _fail(path, number, "text outside `<top>` ... `</top>`")
        elif match and not match.group(1):
            tag = name
            topic[tag] = topic.get(tag, "") + " " + line.lstrip()[match.end() :]
        elif tag is not None:
            topic[tag] += " " + line
        else:
            raise _fail(path, number, "text before the first tag of the topic")
    if topic is not None:
        raise _fail(path, start, "`<top>` is never closed")
    return rows


def _finish_topic(topic: dict[str, str], field: str, path: PathLike, start: int) -> tuple[str, str, int]:
    values = {tag: _clean_field(tag, text) for tag, text in topic.items()}
    query_id = values.get(_QUERY_ID_TAG, "")
    if not query_id:
        raise _fail(path, start, "topic without a `<num>`")
    if not values.get(field):
        raise _fail(path, start, f"topic {query_id} has no `<{field}>` text (has {sorted(values)})")
    return query_id, values[field], start


def _clean_field(tag: str, text: str) -> str:
    """Drop the tag's label and any closing tags, collapse whitespace."""
    if tag in _LABELS:
        text = _LABELS[tag].sub("", text)
    return " ".join(_CLOSING_TAG.sub(" ", text).split())


# --- qrels --------------------------------------------------------------------------------------


def read_local_qrels(path: PathLike) -> pl.DataFrame:
    """QRELS from a TREC qrels file or a BEIR qrels TSV (`query-id<TAB>corpus-id<TAB>score`)."""
    return _beir_qrels(path) if _qrels_format(path) == "beir" else read_qrels(path)


def _qrels_format(path: PathLike) -> Literal["trec", "beir"]:
    line = _first_line(path)
    if line is None:
        return "trec"  # read_qrels says what is wrong with an empty file
    return "beir" if len(line.split("\t")) == 3 else "trec"


def _beir_qrels(path: PathLike) -> pl.DataFrame:
    rows = []
    for index, (number, line) in enumerate(_numbered_lines(path)):
        columns = line.split("\t")
        if index == 0 and tuple(c.strip().lower() for c in columns) == BEIR_QRELS_HEADER:
            continue  # the header line, on the first non-blank line only
        if len(columns) != 3 or not columns[0] or not columns[1]:
            raise _fail(path, number, f"expected `query-id<TAB>corpus-id<TAB>score`, found {len(columns)} columns")
        try:
            relevance = int(columns[2])
        except ValueError:
            raise _fail(path, number, f"score {columns[2]!r} is not an integer") from None
        rows.append((columns[0], columns[1], relevance, number))
    seen: dict[tuple[str, str], int] = {}
    for query_id, doc_id, _, number in rows:
        if (query_id, doc_id) in seen:
            raise _fail(
                path, number, f"duplicate judgment ({query_id!r}, {doc_id!r}); first at line {seen[query_id, doc_id]}"
            )
        seen[query_id, doc_id] = number
    return pl.DataFrame([r[:3] for r in rows], schema=QRELS, orient="row")


# --- which layout -------------------------------------------------------------------------------


def corpus_layout(path: PathLike) -> str:
    """The corpus layout, from its first document: Pyserini JSONL, BEIR JSONL, other JSONL, or TSV."""
    line = _first_line(path)
    if line is None:
        return "empty"
    if _is_json(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            return "JSONL (first line not valid JSON)"
        keys = set(record) if isinstance(record, dict) else set()
        id_key = next((k for k in ID_KEYS if k in keys), None)
        text_key = next((k for k in TEXT_KEYS if k in keys), None)
        if (id_key, text_key) == ("id", "contents"):
            return "Pyserini JSONL (id, contents)"
        if (id_key, text_key) == ("_id", "text"):
            return "BEIR JSONL (_id, title, text)" if "title" in keys else "BEIR JSONL (_id, text)"
        title = ", title" if "title" in keys else ""
        return f"JSONL ({id_key}{title}, {text_key})"
    columns = len(line.split("\t"))
    return "TSV (doc_id, title, text)" if columns == 3 else "TSV (doc_id, text)" if columns == 2 else "TSV (?)"


def topics_layout(path: PathLike, field: str = "title") -> str:
    """The topics layout: TREC topics (with the field taken), TSV, or JSONL queries."""
    if _first_line(path) is None:
        return "empty"
    format = _sniff_topic_format(path)
    return {
        "trec": f"TREC topics (<{field}>)",
        "tsv": "TSV topics (qid, text)",
        "jsonl": "JSONL queries (BEIR: _id, text)",
    }[format]


def qrels_layout(path: PathLike) -> str:
    """The qrels layout: TREC qrels or BEIR's TSV."""
    if _qrels_format(path) == "beir":
        return "BEIR qrels TSV (query-id, corpus-id, score)"
    return "TREC qrels (qid iter docid rel)"


def detect_layout(corpus: PathLike, topics: PathLike, qrels: PathLike, *, topic_field: str = "title") -> str:
    """One line naming the layout found for each of the three files."""
    return (
        f"corpus: {corpus_layout(corpus)}; topics: {topics_layout(topics, topic_field)}; qrels: {qrels_layout(qrels)}"
    )


# --- the three together -------------------------------------------------------------------------


def load_local(
    corpus: PathLike,
    topics: PathLike,
    qrels: PathLike,
    *,
    topic_field: str = "title",
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> tuple[Iterator[pl.DataFrame], pl.DataFrame, pl.DataFrame]:
    """(corpus batches, queries, qrels) from local files; queries and qrels are read now."""
    queries = read_topics(topics, field=topic_field)
    return iter_corpus(corpus, batch_size=batch_size), queries, read_local_qrels(qrels)
