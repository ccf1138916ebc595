"""What the Dagster UI shows of a materialization: previews, column descriptions, report headlines.

The Parquet IO manager adds to every tabular asset its row count, a preview of its first rows and
its column schema with descriptions (`COLUMN_DOCS`, from the table schemas in `dagster_ir.schemas`).
A report's asset adds `report_headline(...)`: the main table of each section as Markdown (and its
recall figure where it fits), kept under
`HEADLINE_LIMIT` bytes (the event log keeps every materialization's metadata; the full report, with
its figures, stays a file whose path is beside it).
"""

from __future__ import annotations

import base64

import dagster as dg
import polars as pl

PREVIEW_ROWS = 5
PREVIEW_CHARS = 80  # longer strings are cut in the preview
HEADLINE_LIMIT = 64_000  # bytes of Markdown in one metadata entry

# Column descriptions by column name (the comments of dagster_ir.schemas, for the UI).
COLUMN_DOCS: dict[str, str] = {
    "article_id": "Wikipedia page id of the article",
    "title": "title (normalised for Wikipedia pages)",
    "segment_no": "segment of the article, 1 = the lead",
    "section": "heading path of the segment's first paragraph ('' for the lead)",
    "text": "plain text",
    "n_words": "words in the segment",
    "revision_id": "revision the article was read from (null if the dump has none)",
    "from_title": "redirect page title",
    "to_title": "title the redirect points to",
    "src_id": "article that holds the link",
    "src_segment": "segment of the source article that holds the link",
    "anchor_text": "the link's anchor text",
    "anchor_start": "character offset of the anchor in the segment text",
    "anchor_end": "character offset of the anchor's end in the segment text",
    "target_title": "title the link points to",
    "target_id": "article id of the link target after redirects (null: not in the corpus)",
    "dst_id": "linked article",
    "n_links": "links from src to dst in the kept text",
    "src_first_segment": "first segment of src that links to dst",
    "reciprocal": "dst links back to src",
    "back_segment": "Seg(a, d_i): segment of dst where its first link to src appears (null if none)",
    "linked_id": "d_i, the linked article",
    "group": "PHP group D1-D4",
    "doc_id": "document id",
    "query_id": "query id",
    "relevance": "graded relevance judgement",
    "score": "the ranker's score",
    "rank": "rank in the run (1 = best)",
    "run_name": "name of the run (one ranker's output)",
    "measure": "ir_measures measure name (nDCG@10, RR@10, ...)",
    "value": "the measure's value for the run and query",
    "mean": "mean over queries",
    "split": "train/fusion, train/model, dev or test",
    "fold": "cross-validation fold 0..k-1",
    "pos_doc_id": "a relevant document",
    "neg_doc_id": "a sampled negative document",
    "neg_rank": "rank of the negative in the run it was drawn from",
    "sample_no": "number of the negative for its (query, positive)",
    "src_token": "source token of the translation probability",
    "tgt_token": "target token",
    "prob": "T(tgt_token | src_token)",
    "stage": "PHP stage: hp, shp or mrds",
    "pos_id": "the positive linked article d_i",
    "neg_ids": "the stage's negatives for the same (d, s)",
    "with_replacement": "fewer negatives than asked: the list repeats some",
    "seed": "seed offset of the training unit (null: not trained per seed)",
    "partition": "the asset partition the row belongs to",
}


def column_schema(columns: dict[str, str]) -> dg.TableSchema:
    """The `dagster/column_schema` of a table: names, dtypes and the descriptions we know."""
    return dg.TableSchema(columns=[dg.TableColumn(name, dtype, description=COLUMN_DOCS.get(name))
                                   for name, dtype in columns.items()])


def preview(frame: pl.DataFrame | pl.LazyFrame, rows: int = PREVIEW_ROWS) -> dg.MetadataValue:
    """The first `rows` rows as a UI table; long strings cut, nested values as text."""
    head = frame.head(rows)
    head = head.collect() if isinstance(head, pl.LazyFrame) else head
    columns = [dg.TableColumn(name, "string" if not dtype.is_numeric() and dtype != pl.Boolean else str(dtype).lower())
               for name, dtype in head.schema.items()]
    records = [dg.TableRecord({name: _cell(value) for name, value in row.items()}) for row in head.iter_rows(named=True)]
    return dg.MetadataValue.table(records=records, schema=dg.TableSchema(columns=columns))


def _cell(value):
    if value is None or isinstance(value, bool | int | float):
        return value
    text = str(value)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def report_headline(report, full_report: str, limit: int = HEADLINE_LIMIT) -> dg.MetadataValue:
    """Each section's main table (results with significance marks) as Markdown, under `limit` bytes.

    `report` is a `dagster_ir.evaluation.Report` or `ReportBook`; `full_report` (the HTML file's path)
    is named at the end, and where sections had to be left out to stay under the limit.
    """
    return dg.MetadataValue.md(headline_markdown(report, full_report, limit))


def headline_markdown(report, full_report: str, limit: int = HEADLINE_LIMIT) -> str:
    from dagster_ir.evaluation.report import _markdown_table

    sections = getattr(report, "sections", None) or (report,)
    tail = f"\n\nFull report (every table, figures and appendices): `{full_report}`\n"
    parts, size, left_out = [f"# {report.title}"], len(report.title.encode()) + len(tail.encode()) + 2, 0
    for section in sections:
        heading = f"## {section.title}" if len(sections) > 1 else ""
        text = "\n\n".join(p for p in (heading, _markdown_table(section.tables()[0], 1)) if p)
        if size + len(text.encode()) + 2 > limit - 200:
            left_out += 1
            continue
        parts.append(text)
        size += len(text.encode()) + 2
    if left_out:
        parts.append(f"*{left_out} section(s) left out here to keep this entry under {limit // 1000} KB.*")
    figure = _headline_figure(report)
    if figure is not None:
        image = f"![{figure.caption}](data:image/png;base64,{base64.b64encode(figure.png).decode()})"
        if size + len(image) + 2 <= limit - 200:
            parts.append(image)
    return "\n\n".join(parts) + tail


def _headline_figure(report):
    """The report's recall-by-depth figure (the first-stage picture), if it has one."""
    figures = getattr(report, "figures", ())
    return next((f for f in figures if f.name == "recall" or f.name.endswith("_recall")), None)
