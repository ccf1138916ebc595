"""Articles of a dump as plain-text segments, their links, and the redirects.

A segment is a run of whole paragraphs of at most `segment_max_words` words; 180 words is about 240
BERT word pieces, so a segment and the lead of a linked article (also one segment) fit together in
one 512-token input pair. Segment 1 is the lead (or its first part): a new segment always starts
after it. A paragraph longer than the limit is split at word boundaries, never inside an anchor.

`iter_extract` streams a dump and yields one `ExtractResult` per `chunk_pages` pages, so memory is
bounded by a chunk; `extract_dump` concatenates them; `extract_dump_parallel` parses the byte ranges
of a multistream dump in worker processes; `write_extract_parts` streams a dump to Parquet parts.

Several dumps may hold the same article (two snapshots, overlapping extracts). `latest_articles`
keeps each article id from one dump only, the one with its newest revision (the largest MediaWiki
revision id; a tie or no revision ids: the largest partition key), and counts the copies dropped;
`latest_links` keeps the links of those copies only.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import repeat
from multiprocessing import get_context
from pathlib import Path

import polars as pl

from dagster_ir.schemas import ARTICLES, RAW_LINKS, REDIRECTS
from dagster_ir.storage.atomic import atomic_path
from dagster_ir.storage.parquet import write_part
from dagster_ir.wiki.dump import DumpError, Page, iter_pages, split_ranges
from dagster_ir.wiki.titles import normalize_title
from dagster_ir.wiki.wikitext import (
    DEFAULT_DROP_SECTIONS,
    Link,
    Paragraph,
    parse_wikitext,
    word_count,
)

_REDIRECT = re.compile(r"\s*#REDIRECT\s*:?\s*\[\[([^\[\]|]*)", re.I)
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class ArticleConfig:
    """How articles are turned into segments.

    segment_max_words: at most this many words per segment (180 words ~ 240 word pieces, so that a
        segment and a linked article's lead fit one 512-token BERT pair).
    min_words: articles with fewer words of running text are dropped.
    skip_bad_pages: skip (and count) pages that cannot be read or parsed instead of raising.
    drop_sections: headings (any level, case-insensitive) whose sections are not running text.
    """

    segment_max_words: int = 180
    min_words: int = 100
    skip_bad_pages: bool = False
    drop_sections: tuple[str, ...] = DEFAULT_DROP_SECTIONS

    def __post_init__(self) -> None:
        if self.segment_max_words < 1:
            raise ValueError(f"segment_max_words must be positive, got {self.segment_max_words}")
        if self.min_words < 0:
            raise ValueError(f"min_words must not be negative, got {self.min_words}")


@dataclass(frozen=True)
class ExtractCounts:
    """What happened to the pages of a dump (or of one chunk of it)."""

    pages: int = 0
    articles: int = 0  # kept articles
    dropped_short: int = 0
    redirects: int = 0
    other_namespaces: int = 0
    bad_pages: int = 0
    wikitext_bytes: int = 0  # UTF-8 bytes of wikitext of the article namespace

    def __add__(self, other: ExtractCounts) -> ExtractCounts:
        return ExtractCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)))


@dataclass(frozen=True)
class ExtractResult:
    """Segments (ARTICLES: SEGMENTS and the revision id), redirects (REDIRECTS) and links (RAW_LINKS)."""

    segments: pl.DataFrame
    redirects: pl.DataFrame
    raw_links: pl.DataFrame
    counts: ExtractCounts


# --- segments ----------------------------------------------------------------------------------


def split_paragraph(paragraph: Paragraph, max_words: int) -> list[Paragraph]:
    """Split a paragraph longer than `max_words` into parts of about equal size at word boundaries.

    A cut that would fall inside a link anchor moves back to the anchor's start; a link that cannot
    be kept whole (an anchor longer than a part) is dropped.
    """
    if word_count(paragraph.text) <= max_words:
        return [paragraph]
    starts = [word.start() for word in _WORD.finditer(paragraph.text)]
    size = math.ceil(len(starts) / math.ceil(len(starts) / max_words))
    cuts, first = [0], 0
    while len(starts) - first > size:
        first = _word_before_links(starts, first + size, first, paragraph.links)
        cuts.append(starts[first])
    cuts.append(len(paragraph.text))
    return [_slice(paragraph, begin, end) for begin, end in zip(cuts[:-1], cuts[1:])]


def pack_segments(paragraphs: Iterable[Paragraph], max_words: int) -> list[Paragraph]:
    """Greedily pack paragraphs (split when too long) into segments of at most `max_words` words.

    The first paragraph after the lead always starts a new segment; a segment's section is that of
    its first paragraph; its text is its paragraphs joined by newlines, link offsets moved along.
    """
    groups: list[list[Paragraph]] = []
    words, in_lead = 0, True
    for paragraph in paragraphs:
        starts_body = in_lead and paragraph.section != ""
        in_lead = in_lead and not starts_body
        for part in split_paragraph(paragraph, max_words):
            n = word_count(part.text)
            if groups and not starts_body and words + n <= max_words:
                groups[-1].append(part)
                words += n
            else:
                groups.append([part])
                words = n
            starts_body = False
    return [_join(group) for group in groups]


def _word_before_links(starts: list[int], cut: int, first: int, links: tuple[Link, ...]) -> int:
    """Index of the word to cut before: `cut`, or earlier so that no anchor is split."""
    position = starts[cut]
    for link in links:
        if link.start < position < link.end:
            earlier = bisect_right(starts, link.start) - 1
            if earlier > first:
                return earlier
    return cut


def _slice(paragraph: Paragraph, begin: int, end: int) -> Paragraph:
    text = paragraph.text[begin:end].rstrip()
    links = tuple(
        Link(link.anchor, link.start - begin, link.end - begin, link.target)
        for link in paragraph.links
        if link.start >= begin and link.end <= begin + len(text)
    )
    return Paragraph(paragraph.section, text, links)


def _join(parts: list[Paragraph]) -> Paragraph:
    if len(parts) == 1:
        return parts[0]
    links: list[Link] = list(parts[0].links)  # the first part's offsets stay
    offset = len(parts[0].text) + 1
    for part in parts[1:]:
        links.extend(Link(x.anchor, x.start + offset, x.end + offset, x.target) for x in part.links)
        offset += len(part.text) + 1
    return Paragraph(parts[0].section, "\n".join(part.text for part in parts), tuple(links))


# --- pages -> rows ------------------------------------------------------------------------------


@dataclass
class _Chunk:
    """Rows of one chunk of pages, column by column, and its counters."""

    path: Path
    config: ArticleConfig
    segments: dict[str, list] = field(default_factory=lambda: {c: [] for c in ARTICLES})
    redirects: dict[str, list] = field(default_factory=lambda: {c: [] for c in REDIRECTS})
    links: dict[str, list] = field(default_factory=lambda: {c: [] for c in RAW_LINKS})
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_COUNT_FIELDS, 0))

    def add(self, page: Page) -> None:
        self.counts["pages"] += 1
        if page.namespace != 0:
            self.counts["other_namespaces"] += 1
            return
        self.counts["wikitext_bytes"] += len(page.text.encode())
        redirect = page.redirect if page.redirect is not None else _redirect_target(page.text)
        if redirect is not None:
            self._add_redirect(page, redirect)
            return
        try:
            paragraphs = parse_wikitext(page.text, drop_sections=self.config.drop_sections)
            if sum(word_count(p.text) for p in paragraphs) < self.config.min_words:
                self.counts["dropped_short"] += 1
                return
            segments = pack_segments(paragraphs, self.config.segment_max_words)
        except Exception as error:  # any failure is reported with the page that caused it
            problem = f"cannot parse its wikitext: {type(error).__name__}: {error}"
            where = f"{self.path}: page {page.title!r} (id {page.page_id})"
            self.bad_page(DumpError(f"{where}: {problem}"), cause=error)
            return
        self._add_article(page, segments)

    def bad_page(self, error: DumpError, cause: BaseException | None = None) -> None:
        if not self.config.skip_bad_pages:
            raise error from cause
        self.counts["bad_pages"] += 1

    def _add_redirect(self, page: Page, target: str) -> None:
        self.counts["redirects"] += 1
        to_title = normalize_title(target)
        if to_title:
            self.redirects["from_title"].append(normalize_title(page.title))
            self.redirects["to_title"].append(to_title)

    def _add_article(self, page: Page, segments: list[Paragraph]) -> None:
        self.counts["articles"] += 1
        title = normalize_title(page.title)
        rows, links = self.segments, self.links
        for number, segment in enumerate(segments, start=1):
            rows["article_id"].append(page.page_id)
            rows["title"].append(title)
            rows["segment_no"].append(number)
            rows["section"].append(segment.section)
            rows["text"].append(segment.text)
            rows["n_words"].append(word_count(segment.text))
            rows["revision_id"].append(page.revision_id)
            for link in segment.links:
                links["src_id"].append(page.page_id)
                links["src_segment"].append(number)
                links["anchor_text"].append(link.anchor)
                links["anchor_start"].append(link.start)
                links["anchor_end"].append(link.end)
                links["target_title"].append(link.target)

    def result(self) -> ExtractResult:
        return ExtractResult(
            segments=pl.DataFrame(self.segments, schema=ARTICLES),
            redirects=pl.DataFrame(self.redirects, schema=REDIRECTS),
            raw_links=pl.DataFrame(self.links, schema=RAW_LINKS),
            counts=ExtractCounts(**self.counts),
        )


_COUNT_FIELDS = tuple(f.name for f in dataclasses.fields(ExtractCounts))


def _redirect_target(text: str) -> str | None:
    """Target of a `#REDIRECT [[...]]` page when the dump has no `<redirect>` element."""
    match = _REDIRECT.match(text)
    return match.group(1) if match else None


# --- whole dumps ----------------------------------------------------------------------------------

CHUNK_BYTES = 8 << 20  # wikitext per chunk: a chunk's rows and frames stay under about 100 MB (32 MB: about 180)


def iter_extract(
    path: str | os.PathLike[str],
    config: ArticleConfig = ArticleConfig(),
    *,
    byte_range: tuple[int, int] | None = None,
    chunk_pages: int = 10_000,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[ExtractResult]:
    """Yield the segments, redirects and links of each run of `chunk_pages` pages (at least one),
    or fewer once their wikitext reaches `chunk_bytes` (so memory is bounded whatever the pages' size).

    A page that cannot be read or parsed raises DumpError naming the file and the page, unless
    `config.skip_bad_pages`, when it is skipped and counted in `counts.bad_pages`.
    """
    path = Path(path)
    chunk = _Chunk(path, config)
    yielded = False
    # The callback closes over `chunk` by name, so it counts into the current chunk.
    for page in iter_pages(path, byte_range=byte_range, on_bad_page=lambda e: chunk.bad_page(e)):  # noqa: B023
        chunk.add(page)
        if chunk.counts["pages"] >= chunk_pages or chunk.counts["wikitext_bytes"] >= chunk_bytes:
            yield chunk.result()
            yielded = True
            chunk = _Chunk(path, config)
    if not yielded or chunk.counts["pages"] or chunk.counts["bad_pages"]:
        yield chunk.result()


def extract_dump(
    path: str | os.PathLike[str],
    config: ArticleConfig = ArticleConfig(),
    *,
    byte_range: tuple[int, int] | None = None,
    chunk_pages: int = 10_000,
) -> ExtractResult:
    """Segments, redirects and links of a whole dump (or of the streams in `byte_range`)."""
    chunks = iter_extract(path, config, byte_range=byte_range, chunk_pages=chunk_pages)
    return concat_results(chunks)


def extract_dump_parallel(
    path: str | os.PathLike[str],
    config: ArticleConfig = ArticleConfig(),
    *,
    processes: int = 2,
    ranges_per_process: int = 4,
) -> ExtractResult:
    """Like `extract_dump`, parsing the byte ranges of a multistream dump in worker processes.

    Uses the spawn start method; rows come back in dump order. A dump that is not multistream is
    parsed in this process.
    """
    ranges = split_ranges(path, processes * ranges_per_process)
    if processes <= 1 or len(ranges) == 1:
        return extract_dump(path, config)
    with ProcessPoolExecutor(processes, mp_context=get_context("spawn")) as pool:
        parts = pool.map(_extract_range, repeat(Path(path)), repeat(config), ranges)
        return concat_results(list(parts))


def write_extract_parts(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    config: ArticleConfig = ArticleConfig(),
    *,
    processes: int = 1,
    chunk_pages: int = 10_000,
    byte_range: tuple[int, int] | None = None,
) -> ExtractCounts:
    """Stream a dump of any size into `out_dir/{segments,redirects,raw_links}/part-*.parquet`.

    `byte_range` (whole streams of a multistream dump, see `split_ranges`) reads that part only.
    Memory is bounded by one chunk per process. `out_dir` is replaced atomically once all parts
    are written. Read the parts back with `pl.scan_parquet(out_dir / "segments" / "*.parquet")`; each
    part is written in row groups of a few MB, so `dagster_ir.storage.parquet.write_parts` can store
    a table from them a row group at a time.
    """
    if processes > 1:
        ranges = split_ranges(path, max(1, processes) * 4, within=byte_range)
    else:
        ranges = [byte_range]
    with atomic_path(out_dir, directory=True) as tmp:
        for table in ("segments", "redirects", "raw_links"):
            (tmp / table).mkdir()
        jobs = (
            repeat(Path(path)), repeat(config), ranges, repeat(tmp), range(len(ranges)),
            repeat(chunk_pages),
        )  # fmt: skip
        if processes <= 1:
            counts = list(map(_write_range, *jobs))
        else:
            with ProcessPoolExecutor(processes, mp_context=get_context("spawn")) as pool:
                counts = list(pool.map(_write_range, *jobs))
    return sum(counts, ExtractCounts())


@dataclass(frozen=True)
class LatestArticles:
    """Segments of several dumps with each article taken from one dump only."""

    segments: pl.LazyFrame  # the input's rows of the winning dump of each article
    winners: pl.LazyFrame  # (article_id, partition): the dump each article is taken from
    superseded: int  # older copies dropped (an article in three dumps counts two)


def latest_articles(segments: pl.DataFrame | pl.LazyFrame) -> LatestArticles:
    """Keep each article from the dump with its newest revision (see the module docstring).

    `segments` holds the rows of one or more dumps, the dump in a `partition` column (without it,
    one dump: nothing to choose) and, where known, `revision_id`.
    """
    frame = segments.lazy()
    columns = frame.collect_schema()
    if "partition" not in columns:
        return LatestArticles(
            frame, frame.select("article_id").unique().with_columns(partition=pl.lit(None, pl.String)), 0
        )
    revision = pl.col("revision_id").max() if "revision_id" in columns else pl.lit(None, pl.Int64)
    per_dump = frame.group_by("article_id", "partition").agg(revision.fill_null(-1).alias("revision"))
    winners = (
        per_dump.sort("article_id", "revision", "partition", descending=[False, True, True])
        .group_by("article_id", maintain_order=True)
        .first()
        .select("article_id", "partition")
    )
    counts = pl.concat([per_dump.select(pl.len()), winners.select(pl.len())]).collect()["len"]
    kept = frame.join(winners, on=["article_id", "partition"], how="semi", maintain_order="left")
    return LatestArticles(kept, winners, int(counts[0] - counts[1]))


def latest_links(raw_links: pl.DataFrame | pl.LazyFrame, latest: LatestArticles) -> pl.LazyFrame:
    """The raw links of the article copies `latest` kept (all links when there is one dump)."""
    links = raw_links.lazy()
    if "partition" not in links.collect_schema():
        return links
    winners = latest.winners.rename({"article_id": "src_id"})
    return links.join(winners, on=["src_id", "partition"], how="semi", maintain_order="left")


def concat_results(results: Iterable[ExtractResult]) -> ExtractResult:
    """One ExtractResult from several, rows in order, counts added."""
    results = list(results)
    return ExtractResult(
        segments=pl.concat([r.segments for r in results], how="vertical"),
        redirects=pl.concat([r.redirects for r in results], how="vertical"),
        raw_links=pl.concat([r.raw_links for r in results], how="vertical"),
        counts=sum((r.counts for r in results), ExtractCounts()),
    )


def _extract_range(path: Path, config: ArticleConfig, byte_range: tuple[int, int]) -> ExtractResult:
    return extract_dump(path, config, byte_range=byte_range)


def _write_range(
    path: Path,
    config: ArticleConfig,
    byte_range: tuple[int, int] | None,
    out_dir: Path,
    range_no: int,
    chunk_pages: int,
) -> ExtractCounts:
    counts = ExtractCounts()
    chunks = iter_extract(path, config, byte_range=byte_range, chunk_pages=chunk_pages)
    for chunk_no, result in enumerate(chunks):
        name = f"part-{range_no:05d}-{chunk_no:05d}.parquet"
        write_part(result.segments, out_dir / "segments" / name)  # in row groups: stored a row group at a time
        write_part(result.redirects, out_dir / "redirects" / name)
        write_part(result.raw_links, out_dir / "raw_links" / name)
        counts += result.counts
    return counts
