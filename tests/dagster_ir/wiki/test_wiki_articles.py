"""Articles -> segments, links and redirects: packing rules, offsets, counters, bad pages."""

from pathlib import Path

import polars as pl
import pytest
from wiki_dumps import page, write_dump, write_multistream

from dagster_ir.schemas import ARTICLES, RAW_LINKS, REDIRECTS, validate
from dagster_ir.wiki import articles
from dagster_ir.wiki.articles import (
    ArticleConfig,
    ExtractCounts,
    concat_results,
    extract_dump,
    extract_dump_parallel,
    iter_extract,
    latest_articles,
    latest_links,
    pack_segments,
    split_paragraph,
    write_extract_parts,
)
from dagster_ir.wiki.dump import DumpError
from dagster_ir.wiki.wikitext import Link, Paragraph, parse_wikitext


def words(n: int, stem: str = "w") -> str:
    return " ".join(f"{stem}{i}" for i in range(n))


def check_spans(paragraphs: list[Paragraph]) -> None:
    for p in paragraphs:
        for link in p.links:
            assert p.text[link.start : link.end] == link.anchor


def test_split_paragraph_in_equal_parts_without_cutting_anchors() -> None:
    text = words(8) + " Big Apple " + words(5, "v")  # 15 words, the anchor is words 9-10
    link = Link("Big Apple", text.index("Big"), text.index("Big") + 9, "New York City")
    parts = split_paragraph(Paragraph("S", text, (link,)), max_words=10)
    # 15 words / 2 parts -> 8 words each; word 9 starts the anchor, so the cut stays before it.
    assert [p.text for p in parts] == [words(8), "Big Apple " + words(5, "v")]
    assert parts[1].links == (Link("Big Apple", 0, 9, "New York City"),)
    assert all(p.section == "S" for p in parts)


def test_split_paragraph_moves_the_cut_back_to_an_anchor_start() -> None:
    text = words(7) + " Big Apple " + words(6, "v")  # the cut after 8 words falls in the anchor
    start = text.index("Big")
    parts = split_paragraph(Paragraph("", text, (Link("Big Apple", start, start + 9, "NYC"),)), 10)
    assert [p.text for p in parts] == [words(7), "Big Apple " + words(6, "v")]
    check_spans(parts)


def test_pack_segments_lead_first_then_greedy() -> None:
    paragraphs = [
        Paragraph("", words(3, "a"), ()),
        Paragraph("", words(3, "b"), ()),
        Paragraph("H", words(2, "c"), ()),  # fits after the lead but starts a new segment
        Paragraph("H", words(4, "d"), (Link("d1", 3, 5, "D"),)),
        Paragraph("H / I", words(5, "e"), ()),  # 2 + 4 + 5 > 10
        Paragraph("J", words(23, "f"), ()),  # split into 8 + 8 + 7
    ]
    segments = pack_segments(paragraphs, max_words=10)
    assert [(s.section, len(s.text.split())) for s in segments] == [
        ("", 6), ("H", 6), ("H / I", 5), ("J", 8), ("J", 8), ("J", 7)
    ]  # fmt: skip
    assert segments[0].text == words(3, "a") + "\n" + words(3, "b")
    assert segments[1].text == words(2, "c") + "\n" + words(4, "d")
    shift = len(words(2, "c")) + 1  # the d paragraph follows the c paragraph and a newline
    assert segments[1].links == (Link("d1", 3 + shift, 5 + shift, "D"),)
    check_spans(segments)


def test_segments_hold_every_word_once_and_respect_the_limit() -> None:
    text = (
        f"Lead {words(30)} [[Target one|anchor one]] {words(40)}.\n\n"
        f"== A ==\n{words(5)} [[two]]s {words(100)} [[Three|the three]] end.\n\n{words(3)}\n"
        f"=== B ===\n{words(250)} [[four]]"
    )
    paragraphs = parse_wikitext(text)
    segments = pack_segments(paragraphs, max_words=50)
    all_words = " ".join(p.text for p in paragraphs).split()
    assert " ".join(s.text for s in segments).split() == all_words
    assert all(len(s.text.split()) <= 50 for s in segments)
    # lead 74 words -> 2 parts; A: 109 words -> 3 parts, the 3-word paragraph joins the last;
    # B: 251 words -> 6 parts
    assert [s.section for s in segments] == ["", ""] + ["A"] * 3 + ["A / B"] * 6
    assert segments[4].text.endswith("end.\n" + words(3))
    check_spans(segments)
    targets = [link.target for s in segments for link in s.links]
    assert targets == ["Target one", "Two", "Three", "Four"]


def article(page_id: int, title: str, n_words: int, extra: str = "") -> object:
    return page(page_id, title, f"{words(n_words)} {extra}".strip())


def test_extract_dump_counts_and_filters(tmp_path: Path) -> None:
    pages = [
        article(1, "Long", 120, "[[Short]] and [[Redirected]]"),
        article(2, "Short", 50),
        page(3, "Redirected", "#REDIRECT [[Long#Top]]", redirect="Long#Top"),
        page(4, "Text redirect", "#redirect: [[short]]"),
        page(5, "Talk:Long", words(200), ns=1),
    ]
    result = extract_dump(write_dump(tmp_path / "d.xml.bz2", pages))
    assert result.counts == ExtractCounts(
        pages=5, articles=1, dropped_short=1, redirects=2, other_namespaces=1, bad_pages=0,
        wikitext_bytes=sum(len(p.text.encode()) for p in pages[:4]),
    )  # fmt: skip
    validate(result.segments, ARTICLES, "segments")
    assert result.segments["revision_id"].unique().to_list() == [91]  # page 1's revision, for choosing among dumps
    validate(result.raw_links, RAW_LINKS, "raw_links")
    validate(result.redirects, REDIRECTS, "redirects")
    assert result.redirects.rows() == [("Redirected", "Long"), ("Text redirect", "Short")]
    assert result.raw_links["target_title"].to_list() == ["Short", "Redirected"]
    assert result.segments["n_words"].sum() == 123  # "and" counts too


def test_config_fields_change_the_result(tmp_path: Path) -> None:
    notes = page(3, "C", "Lead.\n== Notes ==\n" + words(10))
    path = write_dump(tmp_path / "d.xml", [article(1, "A", 400), article(2, "B", 60), notes])
    default = extract_dump(path)
    assert default.counts.articles == 1 and default.segments.height == 3  # 400 words -> 3 x ~134
    assert default.segments["n_words"].max() <= 180
    small = extract_dump(path, ArticleConfig(segment_max_words=100, min_words=50))
    assert small.counts.articles == 2  # B's 60 words are enough now
    assert small.segments.height == 4 + 1  # A: 400 words in 4 segments of 100; B: one
    keep_notes = extract_dump(path, ArticleConfig(min_words=5, drop_sections=()))
    sections = keep_notes.segments.filter(pl.col("article_id") == "3")["section"]
    assert sections.to_list() == ["", "Notes"]


def test_link_offsets_index_the_segment_text(tmp_path: Path) -> None:
    lead = f"[[Alpha]] {words(150)} [[Beta|the beta]]s."
    text = f"{lead}\n\n== H ==\n{words(100)} [[alpha]] {words(99)}"
    result = extract_dump(write_dump(tmp_path / "d.xml", [page(7, "Seven", text)]))
    joined = result.raw_links.join(
        result.segments, left_on=["src_id", "src_segment"], right_on=["article_id", "segment_no"]
    )
    # the lead is segment 1; H (200 words) is split into segments 2 and 3, 'alpha' opens segment 3
    assert joined["src_segment"].to_list() == [1, 1, 3]
    spans = joined.select("text", "anchor_start", "anchor_end", "anchor_text").iter_rows()
    assert all(text[start:end] == anchor for text, start, end, anchor in spans)
    assert joined["anchor_text"].to_list() == ["Alpha", "the betas", "alpha"]


def test_chunks_give_the_same_rows(tmp_path: Path) -> None:
    pages = [article(i, f"T{i}", 120, f"[[T{i + 1}]]") for i in range(1, 8)]
    path = write_dump(tmp_path / "d.xml", pages)
    chunks = list(iter_extract(path, chunk_pages=3))
    assert [c.counts.pages for c in chunks] == [3, 3, 1]
    whole = extract_dump(path)
    joined = concat_results(chunks)
    assert joined.segments.equals(whole.segments) and joined.raw_links.equals(whole.raw_links)
    assert joined.counts == whole.counts


def test_bad_wikitext_raises_with_the_page_or_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fragile(text: str, **kwargs: object) -> list[Paragraph]:
        if "BOOM" in text:
            raise RecursionError("too deep")
        return parse_wikitext(text, **kwargs)

    monkeypatch.setattr(articles, "parse_wikitext", fragile)
    pages = [article(1, "Fine", 120), article(2, "Kaput", 120, "BOOM")]
    path = write_dump(tmp_path / "d.xml", pages)
    message = r"d\.xml: page 'Kaput' \(id 2\): cannot parse its wikitext: RecursionError: too deep"
    with pytest.raises(DumpError, match=message):
        extract_dump(path)
    result = extract_dump(path, ArticleConfig(skip_bad_pages=True))
    assert result.counts.bad_pages == 1 and result.counts.articles == 1


def test_bad_page_element_is_skipped_and_counted(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "d.xml", [article(1, "Fine", 120), article(2, "Odd", 120)])
    xml = path.read_text().replace("<ns>0</ns>\n    <id>2</id>", "<ns>x</ns>\n    <id>2</id>")
    path.write_text(xml)
    with pytest.raises(DumpError, match=r"page 'Odd' \(id 2\): <ns> is not an integer"):
        extract_dump(path)
    assert extract_dump(path, ArticleConfig(skip_bad_pages=True)).counts.bad_pages == 1


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="segment_max_words"):
        ArticleConfig(segment_max_words=0)


def multistream_pages() -> list:
    return [article(i, f"T{i}", 110 + i, f"[[T{(i * 3) % 9}]] [[Missing]]") for i in range(9)] + [
        page(20, "R", "#REDIRECT [[T1]]", redirect="T1")
    ]


def test_parts_written_to_parquet_read_back_the_same(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "d.xml.bz2", multistream_pages())
    counts = write_extract_parts(path, tmp_path / "out", chunk_pages=4)
    whole = extract_dump(path)
    assert counts == whole.counts
    segments = pl.read_parquet(tmp_path / "out" / "segments" / "*.parquet")
    assert len(list((tmp_path / "out" / "segments").iterdir())) == 3
    assert segments.equals(whole.segments)
    assert pl.read_parquet(tmp_path / "out" / "raw_links" / "*.parquet").equals(whole.raw_links)


@pytest.mark.slow  # starts worker processes
def test_parallel_extraction_of_a_multistream_dump(tmp_path: Path) -> None:
    path = tmp_path / "wiki-multistream.xml.bz2"
    write_multistream(path, multistream_pages(), pages_per_stream=2)
    serial = extract_dump(path)
    parallel = extract_dump_parallel(path, processes=2)
    assert parallel.segments.equals(serial.segments)
    assert parallel.raw_links.equals(serial.raw_links)
    assert parallel.redirects.equals(serial.redirects)
    assert parallel.counts == serial.counts and serial.counts.articles == 9
    counts = write_extract_parts(path, tmp_path / "parts", processes=2)
    assert counts == serial.counts
    assert pl.read_parquet(tmp_path / "parts" / "segments" / "*.parquet").equals(serial.segments)


# --- articles in several dumps ------------------------------------------------------------------


def _dump_rows(partition: str, rows: list[tuple[str, int | None, str]]) -> pl.DataFrame:
    """(article_id, revision_id, text) rows of one dump, two segments per article."""
    return pl.DataFrame(
        [(a, f"T{a}", n, "", f"{text} {n}", 2, revision, partition) for a, revision, text in rows for n in (1, 2)],
        schema={**ARTICLES, "partition": pl.String},
        orient="row",
    )


def test_an_article_in_several_dumps_is_kept_from_its_newest_revision():
    old = _dump_rows("a.xml", [("1", 100, "old one"), ("2", 200, "two"), ("3", None, "three a")])
    new = _dump_rows("b.xml", [("1", 150, "new one"), ("4", 400, "four"), ("3", None, "three b")])
    older_again = _dump_rows("c.xml", [("1", 120, "middle one")])
    latest = latest_articles(pl.concat([old, new, older_again]))
    kept = latest.segments.collect().sort("article_id", "segment_no")
    assert kept.select("article_id", "partition").unique(maintain_order=True).rows() == [
        ("1", "b.xml"),
        ("2", "a.xml"),
        ("3", "b.xml"),
        ("4", "b.xml"),
    ]  # 3: no revisions, last dump key
    assert kept.filter(pl.col("article_id") == "1")["text"].to_list() == ["new one 1", "new one 2"]
    assert latest.superseded == 3  # article 1 twice (a, c), article 3 once (a)
    assert kept.select(pl.struct("article_id", "segment_no").is_duplicated().any()).item() is False

    links = pl.DataFrame(
        [("1", 1, "x", 0, 1, "Two", p) for p in ("a.xml", "b.xml", "c.xml")] + [("2", 1, "y", 0, 1, "One", "a.xml")],
        schema={**RAW_LINKS, "partition": pl.String},
        orient="row",
    )
    kept_links = latest_links(links, latest).collect()
    assert kept_links.select("src_id", "partition").rows() == [("1", "b.xml"), ("2", "a.xml")]


def test_one_dump_has_nothing_to_choose():
    single = _dump_rows("a.xml", [("1", 100, "one")]).drop("partition")
    latest = latest_articles(single)
    assert latest.segments.collect().equals(single) and latest.superseded == 0
