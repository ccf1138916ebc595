"""Tiny MediaWiki dumps written by the tests: plain XML, bz2, and multistream bz2 with an index.

Imported by the test modules of this folder (pytest puts the folder on sys.path).
"""

from __future__ import annotations

import bz2
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from dagster_ir.wiki.dump import Page

HEADER = (
    '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
    "  <siteinfo>\n    <sitename>Test</sitename>\n  </siteinfo>\n"
)
FOOTER = "</mediawiki>\n"


def page(page_id: int, title: str, text: str, *, ns: int = 0, redirect: str | None = None) -> Page:
    """A Page as the dump reader should return it."""
    return Page(
        page_id=str(page_id), title=title, namespace=ns, redirect=redirect, text=text, revision_id=int(f"9{page_id}")
    )


def page_xml(p: Page) -> str:
    redirect = f"    <redirect title={quoteattr(p.redirect)} />\n" if p.redirect else ""
    return (
        f"  <page>\n    <title>{escape(p.title)}</title>\n    <ns>{p.namespace}</ns>\n"
        f"    <id>{p.page_id}</id>\n{redirect}    <revision>\n      <id>9{p.page_id}</id>\n"
        f'      <text xml:space="preserve">{escape(p.text)}</text>\n    </revision>\n  </page>\n'
    )


def write_dump(path: Path, pages: Sequence[Page], *, compress: bool | None = None) -> Path:
    """Write a single-stream dump; bz2-compressed when the name ends in .bz2."""
    xml = (HEADER + "".join(page_xml(p) for p in pages) + FOOTER).encode()
    compress = path.suffix == ".bz2" if compress is None else compress
    path.write_bytes(bz2.compress(xml) if compress else xml)
    return path


def write_multistream(
    path: Path, pages: Sequence[Page], *, pages_per_stream: int = 2, index: bool = False
) -> list[int]:
    """Write a multistream dump as Wikimedia does (header, groups of pages, footer, each its own
    bz2 stream); optionally the `-index.txt.bz2` beside it. Returns the stream offsets."""
    parts = [HEADER]
    parts += [
        "".join(page_xml(p) for p in pages[i : i + pages_per_stream]) for i in range(0, len(pages), pages_per_stream)
    ]
    parts.append(FOOTER)
    offsets, data = [], b""
    for part in parts:
        offsets.append(len(data))
        data += bz2.compress(part.encode())
    path.write_bytes(data)
    if index:
        lines = [f"{offsets[1 + i // pages_per_stream]}:{p.page_id}:{p.title}\n" for i, p in enumerate(pages)]
        name = path.name.removesuffix(".xml.bz2") + "-index.txt.bz2"
        (path.parent / name).write_bytes(bz2.compress("".join(lines).encode()))
    return offsets
