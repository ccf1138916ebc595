"""Collections served by ir_datasets, turned into CORPUS / QUERIES / QRELS frames.

`load_irds(dataset_id)` goes through `ir_datasets.load` (which downloads into $IR_DATASETS_HOME on
first use). Documents are streamed in batches; queries and qrels are small and read at once.

Document text is built the way the papers that use each collection index it; the text joins the
non-empty parts with single spaces:

    msmarco-document   url + title + body   (title also kept in `title`)
    msmarco-passage    text
    cranfield          title + text         (title also kept in `title`)
    antique            text
    anything else      title + text + body, of the fields the document type has; its
                       `default_text()` when it has neither `text` nor `body`

The rule is chosen by the dataset id's first component (`msmarco-document/dev` -> msmarco-document).
Query text is the query's `text` field, else its `title` (TREC topics), else `default_text()`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import polars as pl

from dagster_ir.schemas import CORPUS, QRELS, QUERIES

DEFAULT_BATCH_SIZE = 50_000
BODY_FIELDS = ("text", "body")

DocFields = tuple[str, str]  # (title, text)


class IrdsError(ValueError):
    """An ir_datasets dataset cannot be turned into a collection."""


def _join(*parts: str) -> str:
    return " ".join(part for part in parts if part)


def _msmarco_document(doc: Any) -> DocFields:
    return doc.title, _join(doc.url, doc.title, doc.body)


def _text_only(doc: Any) -> DocFields:
    return "", doc.text


def _title_and_text(doc: Any) -> DocFields:
    return doc.title, _join(doc.title, doc.text)


def generic_doc_fields(doc: Any) -> DocFields:
    """(title, text): title + text + body of the fields the type has, else its `default_text()`."""
    title = doc.title if "title" in doc._fields else ""
    bodies = [getattr(doc, field) for field in BODY_FIELDS if field in doc._fields]
    if bodies:
        return title, _join(title, *bodies)
    if hasattr(doc, "default_text"):
        return title, doc.default_text()
    raise IrdsError(f"no rule builds text for {type(doc).__name__} documents (fields {doc._fields})")


DOC_RULES: dict[str, Callable[[Any], DocFields]] = {
    "msmarco-document": _msmarco_document,
    "msmarco-passage": _text_only,
    "cranfield": _title_and_text,
    "antique": _text_only,
}


def doc_rule(dataset_id: str) -> Callable[[Any], DocFields]:
    """The (title, text) rule for the documents of `dataset_id`."""
    return DOC_RULES.get(dataset_id.split("/")[0], generic_doc_fields)


def query_text(query: Any) -> str:
    """A query's text: its `text` field, else `title`, else `default_text()`."""
    for field in ("text", "title"):
        if field in query._fields:
            return getattr(query, field)
    if hasattr(query, "default_text"):
        return query.default_text()
    raise IrdsError(f"no rule builds text for {type(query).__name__} queries (fields {query._fields})")


def load_irds(
    dataset_id: str, *, batch_size: int = DEFAULT_BATCH_SIZE
) -> tuple[Iterator[pl.DataFrame], pl.DataFrame, pl.DataFrame]:
    """(corpus batches, queries, qrels) of `dataset_id` through `ir_datasets.load`.

    The corpus is a one-shot iterator that reads documents as it is consumed; queries and qrels are
    read now. Fails unless the dataset has docs, queries and qrels.
    """
    import ir_datasets  # imported here: importing it creates $IR_DATASETS_HOME

    dataset = ir_datasets.load(dataset_id)
    for part in ("docs", "queries", "qrels"):
        if not getattr(dataset, f"has_{part}")():
            raise IrdsError(f"ir_datasets {dataset_id!r} has no {part}; a collection needs all three")
    corpus = iter_corpus_batches(dataset.docs_iter(), doc_rule(dataset_id), batch_size=batch_size)
    return corpus, queries_frame(dataset.queries_iter()), qrels_frame(dataset.qrels_iter())


def iter_corpus_batches(
    docs: Iterable[Any], rule: Callable[[Any], DocFields], *, batch_size: int = DEFAULT_BATCH_SIZE
) -> Iterator[pl.DataFrame]:
    """CORPUS frames of at most `batch_size` documents, text built by `rule`."""
    batch: list[tuple[str, str, str]] = []
    for doc in docs:
        batch.append((doc.doc_id, *rule(doc)))
        if len(batch) >= batch_size:
            yield pl.DataFrame(batch, schema=CORPUS, orient="row")
            batch = []
    if batch:
        yield pl.DataFrame(batch, schema=CORPUS, orient="row")


def queries_frame(queries: Iterable[Any]) -> pl.DataFrame:
    """QUERIES frame of ir_datasets query namedtuples."""
    return pl.DataFrame([(q.query_id, query_text(q)) for q in queries], schema=QUERIES, orient="row")


def qrels_frame(qrels: Iterable[Any]) -> pl.DataFrame:
    """QRELS frame of ir_datasets qrel namedtuples (query_id, doc_id, relevance, ...)."""
    return pl.DataFrame([(q.query_id, q.doc_id, q.relevance) for q in qrels], schema=QRELS, orient="row")
