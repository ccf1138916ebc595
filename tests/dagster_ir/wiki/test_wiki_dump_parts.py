"""A multistream dump in parts: split_ranges within a range, extraction of one part, chunks bounded by bytes."""

from pathlib import Path

import polars as pl
import pytest
from wiki_dumps import page, write_multistream

from dagster_ir.wiki.articles import ArticleConfig, extract_dump, iter_extract, write_extract_parts
from dagster_ir.wiki.dump import split_ranges

CONFIG = ArticleConfig(segment_max_words=12, min_words=3)
PAGES = [
    page(i, f"T{i}", f"Article {i} links [[T{(i + 1) % 12}]] and [[T{(i + 5) % 12}]] in its lead.")
    for i in range(1, 13)
]


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    path = tmp_path / "wiki-multistream.xml.bz2"
    write_multistream(path, PAGES, pages_per_stream=2, index=True)
    return path


def test_split_ranges_within_a_range_cover_it(dump: Path) -> None:
    parts = split_ranges(dump, 3)
    assert len(parts) == 3
    for part in parts:
        inner = split_ranges(dump, 2, within=part)
        assert inner[0][0] == part[0] and inner[-1][1] == part[1]
        assert all(a[1] == b[0] for a, b in zip(inner, inner[1:]))


@pytest.mark.parametrize("processes", [1, 2])
def test_parts_together_give_the_whole_dump(dump: Path, tmp_path: Path, processes: int) -> None:
    whole = extract_dump(dump, CONFIG)
    frames = []
    for number, part in enumerate(split_ranges(dump, 3)):
        out = tmp_path / f"part-{number}"
        counts = write_extract_parts(dump, out, CONFIG, processes=processes, byte_range=part)
        assert counts.pages > 0
        frames.append(pl.read_parquet(out / "segments" / "*.parquet"))
    parts = pl.concat(frames).sort("article_id", "segment_no")
    assert parts.equals(whole.segments.sort("article_id", "segment_no"))


def test_chunks_are_bounded_by_wikitext_bytes(dump: Path) -> None:
    one_page = len(PAGES[0].text.encode())
    chunks = list(iter_extract(dump, CONFIG, chunk_bytes=one_page))
    assert len(chunks) == len(PAGES)  # every page reaches the bound on its own
    assert len(list(iter_extract(dump, CONFIG, chunk_bytes=10 * one_page))) == 2
