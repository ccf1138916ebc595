"""Stream the pages of a MediaWiki XML dump (`.xml`, `.xml.bz2`, multistream or not).

`iter_pages` decompresses and parses a dump incrementally (bz2 block by block into an expat pull
parser), so memory is bounded by one page whatever the size of the dump. Element tags are matched on
their local name, whatever the export schema version.

A multistream dump is a concatenation of independent bz2 streams: the first holds the
`<mediawiki>` header and `<siteinfo>`, each later one about a hundred whole `<page>` elements, the
last the closing tag. `stream_offsets` finds where the streams start and `split_ranges` groups them
into contiguous byte ranges; `iter_pages(path, byte_range=...)` parses one range on its own
(wrapping bare pages in a synthetic root), so that several processes can share a dump.

`check_dump` is the quick look `dagster-ir add-dump` takes before registering a file: readable,
the head decompresses and opens a `<mediawiki>` root, the tail decompresses and closes it.

Every problem with the input raises `DumpError` naming the file and the page or position.
"""

from __future__ import annotations

import bisect
import bz2
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

_READ_BYTES = 1 << 20
_BZ2_MAGIC = b"BZh"
# A bz2 stream header ("BZh" + block size) and the first block's magic number 0x314159265359.
_STREAM_HEADER = re.compile(rb"BZh[1-9]1AY&SY")
_SYNTHETIC_ROOT = b"<mediawiki>"


class DumpError(ValueError):
    """A dump cannot be read: the message names the file and the page or byte offset."""


@dataclass(frozen=True)
class Page:
    """One page of a dump: its latest revision's wikitext and id and, for a redirect, the target title."""

    page_id: str
    title: str
    namespace: int
    redirect: str | None
    text: str
    revision_id: int | None = None  # MediaWiki revision ids grow with time: the larger, the newer


def iter_pages(
    path: str | os.PathLike[str],
    *,
    byte_range: tuple[int, int] | None = None,
    on_bad_page: Callable[[DumpError], None] | None = None,
) -> Iterator[Page]:
    """Yield the pages of a dump, or of the whole bz2 streams in `byte_range` = (start, end).

    A page without title, id or a numeric namespace raises DumpError, or, when `on_bad_page` is
    given, is passed to it as a DumpError and skipped.
    """
    path = _existing(path)
    size = path.stat().st_size
    if size == 0:
        raise DumpError(f"{path}: the dump file is empty")
    start, end = byte_range if byte_range is not None else (0, size)
    if not 0 <= start < end <= size:
        raise DumpError(f"{path}: byte range {byte_range} is outside the file (0, {size})")
    reader = _PageReader(path, start)
    for chunk in _decompressed(path, start, end):
        yield from reader.feed(chunk, on_bad_page)
    yield from reader.close(at_end_of_file=end == size, on_bad_page=on_bad_page)


def stream_offsets(path: str | os.PathLike[str]) -> list[int]:
    """Byte offsets where the bz2 streams of a dump start; `[0]` for a single stream or plain XML.

    Reads the `...-multistream-index.txt.bz2` file beside the dump when there is one (its lines are
    `offset:page_id:title`), otherwise scans the file for stream headers.
    """
    path = _existing(path)
    if not _is_bz2(path):
        return [0]
    index = _index_path(path)
    if index is not None:
        return _offsets_from_index(index)
    return _scan_stream_headers(path)


def split_ranges(
    path: str | os.PathLike[str], n_chunks: int, *, within: tuple[int, int] | None = None
) -> list[tuple[int, int]]:
    """At most `n_chunks` contiguous byte ranges of about equal size, each a run of whole streams.

    Together they cover the file (or the range `within`, itself whole streams) exactly once; a
    dump that is not multistream is one range.
    """
    if n_chunks < 1:
        raise ValueError(f"n_chunks must be at least 1, got {n_chunks}")
    offsets = stream_offsets(path)
    start, end = within if within is not None else (0, Path(path).stat().st_size)
    bounds = [start]
    for k in range(1, n_chunks):
        i = bisect.bisect_left(offsets, start + (end - start) * k / n_chunks)
        if i < len(offsets) and bounds[-1] < offsets[i] < end:
            bounds.append(offsets[i])
    bounds.append(end)
    return list(zip(bounds[:-1], bounds[1:]))


def check_dump(path: str | os.PathLike[str]) -> None:
    """Raise DumpError unless `path` looks like a whole MediaWiki dump (without parsing it all).

    Checks that the file is readable and not empty, that its head decompresses and opens a
    `<mediawiki>` root element, and that its tail decompresses and ends with `</mediawiki>`: the
    last bz2 stream of a multistream dump, the whole file of a single-stream dump up to
    32 MiB, or the end-of-stream marker of a larger one.
    """
    path = _existing(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as file:
            file.read(1)
    except OSError as error:
        raise DumpError(f"{path}: cannot be read ({error.strerror})") from None
    if size == 0:
        raise DumpError(f"{path}: the dump file is empty")
    if not _is_bz2(path):
        _check_root(path, b"".join(c for _, c in _raw_chunks(path, 0, min(size, _HEAD_BYTES))))
        tail = b"".join(c for _, c in _raw_chunks(path, max(0, size - 4096), size))
        _check_closed(path, tail, "the file")
        return
    _check_root(path, _bz2_head(path, size))
    _check_bz2_tail(path, size)


_HEAD_BYTES = 1 << 16
_TAIL_WINDOW = 1 << 22  # the last stream of a multistream dump starts within this many bytes
_WHOLE_LIMIT = 32 << 20  # a single-stream dump up to this size is decompressed whole
_EOS_MAGIC = 0x177245385090  # bz2 end-of-stream marker (48 bits, then a 32-bit CRC, bit-aligned)


def _bz2_head(path: Path, size: int) -> bytes:
    head = b""
    for piece in _decompressed(path, 0, size):
        head += piece
        if len(head) >= _HEAD_BYTES:
            break
    return head


def _check_root(path: Path, head: bytes) -> None:
    parser = ET.XMLPullParser(events=("start",))
    try:
        parser.feed(head)
        for _, element in parser.read_events():
            if _local(element.tag) != "mediawiki":
                raise DumpError(f"{path}: the root element is <{_local(element.tag)}>, not <mediawiki>")
            return
    except ET.ParseError as error:
        raise DumpError(f"{path}: not a MediaWiki XML dump ({error.msg})") from None
    raise DumpError(f"{path}: not a MediaWiki XML dump (no element in its first {len(head)} bytes)")


def _check_closed(path: Path, tail: bytes, what: str) -> None:
    if not tail.rstrip().endswith(b"</mediawiki>"):
        raise DumpError(f"{path}: {what} does not end with </mediawiki>; the dump is truncated")


def _check_bz2_tail(path: Path, size: int) -> None:
    window = max(0, size - _TAIL_WINDOW)
    data = b"".join(c for _, c in _raw_chunks(path, window, size))
    starts = [window + m.start() for m in _STREAM_HEADER.finditer(data)]
    last = starts[-1] if starts else 0
    if last > 0 or size <= _WHOLE_LIMIT:  # decompress the last stream (or the whole small file)
        tail = b""
        for piece in _decompressed(path, last, size):
            tail = (tail + piece)[-4096:]
        _check_closed(path, tail, f"the bz2 data from byte {last}")
        return
    end = int.from_bytes(data[-11:], "big")
    if not any((end >> (pad + 32)) & (2**48 - 1) == _EOS_MAGIC for pad in range(8)):
        raise DumpError(f"{path}: no bz2 end-of-stream marker at the end of the file; the dump is truncated")


# --- reading bytes -------------------------------------------------------------------------------


def _existing(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    if not path.is_file():
        raise DumpError(f"{path}: no such dump file")
    return path


def _is_bz2(path: Path) -> bool:
    with path.open("rb") as file:
        return file.read(3) == _BZ2_MAGIC


def _raw_chunks(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) pieces of the file between start and end."""
    with path.open("rb") as file:
        file.seek(start)
        offset = start
        while offset < end:
            chunk = file.read(min(_READ_BYTES, end - offset))
            if not chunk:
                return
            yield offset, chunk
            offset += len(chunk)


def _decompressed(path: Path, start: int, end: int) -> Iterator[bytes]:
    """XML bytes of [start, end) in pieces of at most 1 MiB, decompressed stream by stream."""
    if not _is_bz2(path):
        yield from (chunk for _, chunk in _raw_chunks(path, start, end))
        return
    decompressor, stream_start, fed = bz2.BZ2Decompressor(), start, False
    for offset, chunk in _raw_chunks(path, start, end):
        chunk_end = offset + len(chunk)
        while chunk or not (decompressor.needs_input or decompressor.eof):
            try:
                yield decompressor.decompress(chunk, max_length=_READ_BYTES)
            except (OSError, EOFError) as error:
                where = f"in the stream starting at byte {stream_start}"
                raise DumpError(f"{path}: corrupt bz2 data {where}: {error}") from error
            chunk, fed = b"", True
            if decompressor.eof:  # the next stream may start in the same piece
                chunk = decompressor.unused_data
                stream_start = chunk_end - len(chunk)
                decompressor, fed = bz2.BZ2Decompressor(), False
    if fed:
        raise DumpError(
            f"{path}: truncated bz2 data: the stream starting at byte {stream_start} ends "
            f"before its end-of-stream marker"
        )


# --- multistream offsets -------------------------------------------------------------------------


def _index_path(path: Path) -> Path | None:
    """The index beside a dump: `x-multistream.xml.bz2` -> `x-multistream-index.txt.bz2`."""
    name = path.name.removesuffix(".bz2").removesuffix(".xml")
    for suffix in ("-index.txt.bz2", "-index.txt"):
        candidate = path.with_name(name + suffix)
        if candidate.is_file():
            return candidate
    return None


def _offsets_from_index(index: Path) -> list[int]:
    opener = bz2.open if index.suffix == ".bz2" else open
    offsets = {0}
    last = -1
    with opener(index, "rt", encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            field = line.partition(":")[0]
            if not field.strip():
                continue
            try:
                offset = int(field)
            except ValueError:
                expected = "expected 'offset:page_id:title'"
                raise DumpError(f"{index}:{number}: {expected}, got {line[:80]!r}") from None
            if offset != last:
                offsets.add(offset)
                last = offset
    return sorted(offsets)


def _scan_stream_headers(path: Path) -> list[int]:
    """Offsets of bz2 stream headers, scanning the file in overlapping pieces."""
    overlap = 9  # a header is 10 bytes: a match starting in the last 9 bytes is found next time
    offsets: list[int] = []
    tail, tail_offset = b"", 0
    for offset, chunk in _raw_chunks(path, 0, path.stat().st_size):
        data = tail + chunk
        for match in _STREAM_HEADER.finditer(data):
            position = tail_offset + match.start()
            if not offsets or position > offsets[-1]:
                offsets.append(position)
        tail, tail_offset = data[-overlap:], offset + len(chunk) - len(data[-overlap:])
    return offsets or [0]


# --- parsing pages -------------------------------------------------------------------------------


def _local(tag: str) -> str:
    """`{http://www.mediawiki.org/xml/export-0.10/}page` -> `page`."""
    return tag.rpartition("}")[2]


class _PageReader:
    """Feed XML bytes, get pages: an expat pull parser that clears each page once read."""

    def __init__(self, path: Path, start: int) -> None:
        self.path = path
        self.start = start
        self.parser = ET.XMLPullParser(events=("start", "end"))
        self.root: ET.Element | None = None
        self.depth = 0
        self.in_page = False
        self.last_page = "none yet"
        if start > 0:  # later streams of a multistream dump hold bare <page> elements
            self.parser.feed(_SYNTHETIC_ROOT)

    def feed(self, data: bytes, on_bad_page: Callable[[DumpError], None] | None) -> Iterator[Page]:
        self.parser.feed(data)  # a syntax error is queued and raised by read_events
        yield from self._events(on_bad_page)

    def close(self, *, at_end_of_file: bool, on_bad_page: Callable[[DumpError], None] | None) -> Iterator[Page]:
        yield from self._events(on_bad_page)
        if at_end_of_file:
            try:
                self.parser.close()
            except ET.ParseError as error:
                raise self._xml_error(error) from error
            yield from self._events(on_bad_page)
        if self.in_page:
            raise DumpError(f"{self.path}: the input ends inside a page, after {self.last_page}")

    def _events(self, on_bad_page: Callable[[DumpError], None] | None) -> Iterator[Page]:
        try:
            for event, element in self.parser.read_events():
                if event == "start":
                    self._start(element)
                    continue
                self.depth -= 1
                if self.depth == 1 and _local(element.tag) == "page":
                    self.in_page = False
                    page = self._page(element, on_bad_page)
                    self.root.clear()  # drop the pages read so far
                    if page is not None:
                        yield page
        except ET.ParseError as error:
            raise self._xml_error(error) from error

    def _start(self, element: ET.Element) -> None:
        self.depth += 1
        if self.root is None:
            self.root = element
        elif self.depth == 2 and _local(element.tag) == "page":
            self.in_page = True

    def _page(self, element: ET.Element, on_bad_page: Callable[[DumpError], None] | None) -> Page | None:
        try:
            page = _page_from_element(element)
        except ValueError as problem:
            error = DumpError(f"{self.path}: bad page after {self.last_page}: {problem}")
            if on_bad_page is None:
                raise error from None
            on_bad_page(error)
            return None
        self.last_page = f"page {page.title!r} (id {page.page_id})"
        return page

    def _xml_error(self, error: ET.ParseError) -> DumpError:
        line, column = error.position
        where = f"line {line}, column {column}"
        if self.start > 0:
            where += f" of the XML of the streams from byte {self.start}"
        return DumpError(f"{self.path}: malformed XML at {where}, after {self.last_page}: {error.msg}")


def _page_from_element(element: ET.Element) -> Page:
    """A Page from a `<page>` element; ValueError naming the missing or bad field."""
    fields: dict[str, ET.Element] = {}
    revision = None
    for child in element:
        name = _local(child.tag)
        if name == "revision":
            revision = child  # the last revision when a dump holds the history
        else:
            fields.setdefault(name, child)
    title = _field_text(fields, "title")
    page_id = _field_text(fields, "id")
    namespace_text = _field_text(fields, "ns")
    try:
        namespace = int(namespace_text)
    except ValueError:
        raise ValueError(f"page {title!r} (id {page_id}): <ns> is not an integer") from None
    redirect = fields["redirect"].get("title") if "redirect" in fields else None
    text, revision_id = "", None
    if revision is not None:
        text_element = next((c for c in revision if _local(c.tag) == "text"), None)
        text = (text_element.text or "") if text_element is not None else ""
        id_element = next((c for c in revision if _local(c.tag) == "id"), None)
        revision_text = (id_element.text or "").strip() if id_element is not None else ""
        if revision_text:
            if not revision_text.isdigit():
                raise ValueError(f"page {title!r} (id {page_id}): revision <id> is not a number: {revision_text!r}")
            revision_id = int(revision_text)
    return Page(
        page_id=page_id, title=title, namespace=namespace, redirect=redirect, text=text, revision_id=revision_id
    )


def _field_text(fields: dict[str, ET.Element], name: str) -> str:
    element = fields.get(name)
    value = (element.text or "").strip() if element is not None else ""
    if not value:
        title = fields["title"].text if "title" in fields else None
        raise ValueError(f"page {title!r} has no <{name}>")
    return value
