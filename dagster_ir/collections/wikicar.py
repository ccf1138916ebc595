"""The built-in `wiki-car` collection: TREC CAR style queries and qrels from Wikipedia segments.

As in TREC CAR (Dietz et al., 2017), a query is an article's title with one of its section headings
and the relevant documents are the passages of that section; here the passages are our segments.

* Documents: every segment; doc_id `"{article_id}/{segment_no}"`, the segment text, an empty title
  (TREC CAR paragraphs carry no title, so indexing title + text does not leak the query's title).
* Queries: one per (article, top-level section) with at least one segment. A segment belongs to
  the top-level heading of its `section` path ("History / Early life" -> "History"); the lead
  (section "") and boilerplate sections (See also, References, External links, ... compared
  case-insensitively) give no query. Query text is `"{title} {heading}"`; query_id is
  `"{article_id}/{heading}"` with the heading percent-encoded (`urllib.parse.quote`, nothing safe),
  so it is stable across runs and the heading part holds no "/". Sections of one article that share a
  heading are one query. The queries frame carries an extra `article_id` column so that splits can
  keep an article's queries together (`SplitConfig(group_by="article_id")`).
* Qrels: every segment under the query's section, relevance 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

import polars as pl

from dagster_ir.schemas import CORPUS, QRELS, QUERIES, SEGMENTS, validate

SECTION_SEPARATOR = " / "  # dagster_ir.wiki joins the heading path with it
DEFAULT_SKIP_HEADINGS: tuple[str, ...] = (
    "see also", "references", "external links", "notes", "further reading", "bibliography",
    "sources", "citations", "footnotes", "notes and references", "references and notes",
    "works cited", "external links and references", "further reading and external links",
)  # fmt: skip
GROUP_COLUMN = "article_id"


@dataclass(frozen=True)
class WikiCarConfig:
    """Which top-level headings give no query (lower case), and how section paths are joined."""

    skip_headings: tuple[str, ...] = DEFAULT_SKIP_HEADINGS
    section_separator: str = SECTION_SEPARATOR


def build_wiki_car(
    segments: pl.DataFrame | pl.LazyFrame, config: WikiCarConfig = WikiCarConfig()
) -> tuple[pl.DataFrame | pl.LazyFrame, pl.DataFrame, pl.DataFrame]:
    """(corpus, queries, qrels) from a SEGMENTS frame; see the module docstring for the rules.

    A LazyFrame of segments (a full dump's Parquet parts) gives a lazy corpus, to be streamed to
    disk: only the segments' ids, titles and sections, never their text, are collected for the
    queries and qrels.
    """
    validate(segments, SEGMENTS, "segments")
    corpus = segments.sort("article_id", "segment_no").select(
        _doc_id().alias("doc_id"), pl.lit("", dtype=pl.String).alias("title"), "text"
    )
    if isinstance(segments, pl.LazyFrame):
        segments = segments.select("article_id", "title", "segment_no", "section").collect()
    judged = _judged_segments(segments, config)
    queries = _queries(judged)
    section_query = queries.select(GROUP_COLUMN, "heading", "query_id")
    qrels = judged.join(section_query, on=[GROUP_COLUMN, "heading"]).select(
        "query_id", _doc_id().alias("doc_id"), pl.lit(1, dtype=pl.Int32).alias("relevance")
    )
    queries = queries.select(*QUERIES, GROUP_COLUMN)
    return corpus.select(*CORPUS), queries, qrels.sort("query_id", "doc_id").select(*QRELS)


def top_heading(config: WikiCarConfig = WikiCarConfig()) -> pl.Expr:
    """The top-level heading of the `section` path, stripped ("" for the lead)."""
    return pl.col("section").str.split(config.section_separator).list.first().str.strip_chars()


def _doc_id() -> pl.Expr:
    return pl.concat_str([pl.col("article_id"), pl.lit("/"), pl.col("segment_no").cast(pl.String)])


def _judged_segments(segments: pl.DataFrame, config: WikiCarConfig) -> pl.DataFrame:
    """Segments under a section that makes a query, with that section's `heading`."""
    skip = pl.Series([heading.lower() for heading in config.skip_headings], dtype=pl.String)
    headed = segments.with_columns(top_heading(config).alias("heading"))
    keep = (pl.col("heading") != "") & ~pl.col("heading").str.to_lowercase().is_in(skip.implode())
    return headed.filter(keep)


def _queries(judged: pl.DataFrame) -> pl.DataFrame:
    """One row per (article, heading): query_id, text, article_id, heading; in article order."""
    sections = (
        judged.group_by(GROUP_COLUMN, "heading")
        .agg(pl.col("title").first(), pl.col("segment_no").min().alias("first_segment"))
        .sort(GROUP_COLUMN, "first_segment")
    )
    quoted = pl.Series([quote(h, safe="") for h in sections["heading"]], dtype=pl.String)
    return sections.with_columns(
        pl.concat_str([pl.col(GROUP_COLUMN), pl.lit("/"), pl.lit(quoted)]).alias("query_id"),
        pl.concat_str([pl.col("title"), pl.col("heading")], separator=" ").alias("text"),
    ).select("query_id", "text", GROUP_COLUMN, "heading")
