"""Streaming dump reader: plain, bz2 and multistream dumps; byte ranges; errors on bad input."""

import bz2
from dataclasses import replace
from pathlib import Path

import pytest
from wiki_dumps import HEADER, page, page_xml, write_dump, write_multistream

from dagster_ir.wiki.dump import DumpError, check_dump, iter_pages, split_ranges, stream_offsets

PAGES = [
    page(10, "Alpha", "'''Alpha''' links [[Beta]]."),
    page(11, "Beta", 'Beta & <stuff> "quoted"\n\nsecond paragraph'),
    page(12, "Gamma", "#REDIRECT [[Alpha]]", redirect="Alpha"),
    page(13, "Talk:Alpha", "talk", ns=1),
    page(14, "Delta", ""),
    page(15, "Epsilon", "e " * 50),
    page(16, "Zeta", "z"),
]


@pytest.mark.parametrize("name", ["dump.xml", "dump.xml.bz2"])
def test_pages_round_trip(tmp_path: Path, name: str) -> None:
    path = write_dump(tmp_path / name, PAGES)
    assert list(iter_pages(path)) == PAGES


def test_namespaced_tags_and_history_take_the_last_revision(tmp_path: Path) -> None:
    path = tmp_path / "history.xml"
    path.write_text(
        '<mw:mediawiki xmlns:mw="urn:x"><mw:page><mw:title>A</mw:title><mw:ns>0</mw:ns>'
        "<mw:id>1</mw:id><mw:revision><mw:id>5</mw:id><mw:text>old</mw:text></mw:revision>"
        "<mw:revision><mw:id>6</mw:id><mw:text>new</mw:text></mw:revision></mw:page></mw:mediawiki>"
    )
    assert list(iter_pages(path)) == [replace(page(1, "A", "new"), revision_id=6)]


def test_multistream_offsets_from_scan_and_from_index(tmp_path: Path) -> None:
    path = tmp_path / "wiki-multistream.xml.bz2"
    offsets = write_multistream(path, PAGES, pages_per_stream=2)
    assert len(offsets) == 1 + 4 + 1  # header, 7 pages in streams of 2, footer
    assert stream_offsets(path) == offsets
    write_multistream(path, PAGES, pages_per_stream=2, index=True)
    # The index lists the streams holding pages; the header stream at 0 is added, the footer is not.
    assert stream_offsets(path) == offsets[:-1]


def test_single_stream_and_plain_xml_are_one_range(tmp_path: Path) -> None:
    for name in ["one.xml", "one.xml.bz2"]:
        path = write_dump(tmp_path / name, PAGES)
        assert stream_offsets(path) == [0]
        assert split_ranges(path, 4) == [(0, path.stat().st_size)]


def test_multistream_parses_like_single_stream(tmp_path: Path) -> None:
    path = tmp_path / "wiki-multistream.xml.bz2"
    write_multistream(path, PAGES, pages_per_stream=2)
    assert list(iter_pages(path)) == PAGES


@pytest.mark.parametrize("n_chunks", [1, 2, 3, 6, 20])
def test_split_ranges_cover_every_page_once(tmp_path: Path, n_chunks: int) -> None:
    path = tmp_path / "wiki-multistream.xml.bz2"
    write_multistream(path, PAGES, pages_per_stream=2)
    ranges = split_ranges(path, n_chunks)
    assert 1 <= len(ranges) <= n_chunks
    assert ranges[0][0] == 0 and ranges[-1][1] == path.stat().st_size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    pages = [p for r in ranges for p in iter_pages(path, byte_range=r)]
    assert pages == PAGES


def test_a_range_ending_inside_a_stream_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "wiki-multistream.xml.bz2"
    offsets = write_multistream(path, PAGES, pages_per_stream=2)
    with pytest.raises(DumpError, match="truncated bz2"):
        list(iter_pages(path, byte_range=(offsets[1], offsets[2] - 5)))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DumpError, match=r"nope\.xml\.bz2: no such dump file"):
        list(iter_pages(tmp_path / "nope.xml.bz2"))


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty.xml").write_bytes(b"")
    with pytest.raises(DumpError, match=r"empty\.xml: the dump file is empty"):
        list(iter_pages(tmp_path / "empty.xml"))


def test_byte_range_outside_the_file(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "d.xml", PAGES)
    with pytest.raises(DumpError, match="outside the file"):
        list(iter_pages(path, byte_range=(0, path.stat().st_size + 1)))


def test_truncated_bz2_names_file_and_offset(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "cut.xml.bz2", PAGES)
    path.write_bytes(path.read_bytes()[:-40])
    message = r"cut\.xml\.bz2: truncated bz2 data: the stream starting at byte 0"
    with pytest.raises(DumpError, match=message):
        list(iter_pages(path))


def test_corrupt_bz2(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "bad.xml.bz2", PAGES)
    data = bytearray(path.read_bytes())
    data[20:60] = bytes(40)
    path.write_bytes(bytes(data))
    with pytest.raises(DumpError, match=r"bad\.xml\.bz2: corrupt bz2 data"):
        list(iter_pages(path))


def test_malformed_xml_names_line_and_previous_page(tmp_path: Path) -> None:
    good = page_xml(PAGES[0])
    broken = "  <page>\n    <title>Broken</titel>\n  </page>\n"
    path = tmp_path / "bad.xml"
    path.write_text(HEADER + good + broken + "</mediawiki>\n")
    line = (HEADER + good).count("\n") + 2
    seen = []
    message = rf"bad\.xml: malformed XML at line {line}, .* after page 'Alpha' \(id 10\)"
    with pytest.raises(DumpError, match=message):
        seen.extend(iter_pages(path))
    assert seen == [PAGES[0]]  # the pages before the error come out first


def test_truncated_plain_xml(tmp_path: Path) -> None:
    path = tmp_path / "short.xml"
    path.write_text(HEADER + page_xml(PAGES[0]) + "  <page>\n    <title>Half")
    with pytest.raises(DumpError, match=r"short\.xml: malformed XML .*after page 'Alpha'"):
        list(iter_pages(path))


def test_bad_page_raises_or_is_passed_on(tmp_path: Path) -> None:
    bad = page_xml(PAGES[1]).replace("<ns>0</ns>", "<ns>zero</ns>")
    path = tmp_path / "d.xml"
    path.write_text(HEADER + page_xml(PAGES[0]) + bad + page_xml(PAGES[2]) + "</mediawiki>")
    message = r"d\.xml: bad page after page 'Alpha' \(id 10\): page 'Beta' \(id 11\): <ns> is not"
    with pytest.raises(DumpError, match=message):
        list(iter_pages(path))
    problems: list[DumpError] = []
    assert list(iter_pages(path, on_bad_page=problems.append)) == [PAGES[0], PAGES[2]]
    assert len(problems) == 1 and "'Beta'" in str(problems[0])


@pytest.mark.parametrize("field", ["<id>10</id>", "<ns>0</ns>"])
def test_page_without_id_or_namespace(tmp_path: Path, field: str) -> None:
    path = tmp_path / "d.xml"
    path.write_text(HEADER + page_xml(PAGES[0]).replace(field, "") + "</mediawiki>")
    with pytest.raises(DumpError, match=rf"page 'Alpha' has no {field[:4]}"):
        list(iter_pages(path))


def test_large_page_streams_through_small_pieces(tmp_path: Path) -> None:
    big = page(1, "Big", "word " * 600_000)  # 3 MB of text, several 1 MiB pieces
    path = write_dump(tmp_path / "big.xml.bz2", [big, PAGES[0]])
    assert list(iter_pages(path)) == [big, PAGES[0]]
    assert bz2.decompress(path.read_bytes()).count(b"<page>") == 2


# --- check_dump: the look add-dump takes before registering a file ------------------------------


@pytest.mark.parametrize("name", ["ok.xml", "ok.xml.bz2"])
def test_check_dump_accepts_whole_dumps(tmp_path: Path, name: str) -> None:
    check_dump(write_dump(tmp_path / name, PAGES))
    write_multistream(tmp_path / "multi.xml.bz2", PAGES)
    check_dump(tmp_path / "multi.xml.bz2")


def test_check_dump_accepts_the_gensim_sample() -> None:
    from dagster_ir.storage.dumps import sample_dump_path

    check_dump(sample_dump_path())


@pytest.mark.parametrize("cut", [40, 2, 300])
def test_check_dump_refuses_a_truncated_bz2(tmp_path: Path, cut: int) -> None:
    path = write_dump(tmp_path / "cut.xml.bz2", PAGES * 30)
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(DumpError, match=r"cut\.xml\.bz2: .*(truncated|end-of-stream)"):
        check_dump(path)


def test_check_dump_refuses_a_truncated_multistream(tmp_path: Path) -> None:
    path = tmp_path / "multi.xml.bz2"
    offsets = write_multistream(path, PAGES)
    path.write_bytes(path.read_bytes()[: offsets[-1]])  # the last stream (the closing tag) is gone
    with pytest.raises(DumpError, match=r"multi\.xml\.bz2: .*</mediawiki>"):
        check_dump(path)


def test_check_dump_refuses_a_truncated_plain_xml(tmp_path: Path) -> None:
    path = tmp_path / "short.xml"
    path.write_text(HEADER + page_xml(PAGES[0]) + "  <page>\n    <title>Half")
    with pytest.raises(DumpError, match=r"short\.xml: .*</mediawiki>"):
        check_dump(path)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty"),
        (b"hello world, not xml at all" * 10, "not .*MediaWiki"),
        (b"<html><body>404</body></html>", "root element is <html>"),
        (bz2.compress(b"<rss><channel/></rss>"), "root element is <rss>"),
    ],
)
def test_check_dump_refuses_what_is_not_a_dump(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "thing.xml.bz2"
    path.write_bytes(content)
    with pytest.raises(DumpError, match=rf"thing\.xml\.bz2: .*{problem}"):
        check_dump(path)


def test_check_dump_reads_the_end_marker_of_a_large_single_stream(tmp_path: Path, monkeypatch) -> None:
    import dagster_ir.wiki.dump as dump

    monkeypatch.setattr(dump, "_WHOLE_LIMIT", 100)  # as if the file were too large to decompress whole
    path = write_dump(tmp_path / "big.xml.bz2", PAGES * 2000)  # two bz2 blocks: the head decompresses alone
    check_dump(path)
    for cut in (1, 5, 200):
        (tmp_path / "cut.xml.bz2").write_bytes(path.read_bytes()[:-cut])
        with pytest.raises(DumpError, match=r"cut\.xml\.bz2: no bz2 end-of-stream marker"):
            check_dump(tmp_path / "cut.xml.bz2")
