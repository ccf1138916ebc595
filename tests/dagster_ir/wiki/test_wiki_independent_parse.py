"""The link graph of the enwiki sample against an independent parse of the same dump.

WikiExtractor (`--links`) parses the dump; its `<a href="...">` links are unquoted, unescaped and
normalised to titles here, resolved through the redirects read from the raw XML with regular
expressions (not with our dump reader), and compared with `extract_dump` -> `resolve_links` ->
`build_link_graph` as directed in-corpus edges (src != dst) and symmetric pairs.

The two parsers follow different rules in four places; the check applies ours to both, explicitly:
1. List items: WikiExtractor (without --html) drops every line starting with `*`, `#` or `;`; we
   keep list items as running text. Its input has the list markers of articles stripped. Without
   that, its edges are a subset of ours, and each missing edge comes from a link on a list line
   (`test_wikiextractor_misses_only_list_links`: 5 edges on the sample).
2. Sections in DEFAULT_DROP_SECTIONS (References, External links, ...) are cut from its input, from
   such a heading to the next heading of the same or a higher level, as our parser drops them
   (on this sample no in-corpus edge comes from them: the cut guards the rule, it changes no edge).
3. Templates: `--no-templates`, as links inside templates are not kept (nor are `<ref>`s, which
   WikiExtractor drops itself).
4. Short articles: its documents with fewer than ArticleConfig.min_words words (title line
   excluded, section headings included) are dropped. The sample's counts are far from the
   threshold: 52 and 66 words for the two short articles, 122 for the next.
The nodes are the articles WikiExtractor outputs (after rule 4), so the set of articles we keep is
checked too.

Differences that change no edge of the sample are left alone: WikiExtractor drops a link whose
target holds a ':' anywhere, even in the #fragment (`[[Chirality (chemistry)#By configuration: D-
and L-|...]]`), and the text of `<small>`; it keeps `[[wikt:..]]`, `[[w:..]]`, section links and
external links, which are no article links for us. Counted per (source, target title) the two
parses then share 22,274 links; ours has 41 more, WikiExtractor 72, all of these kinds.
"""

from __future__ import annotations

import bz2
import html
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

import pytest

from dagster_ir.storage.dumps import sample_dump_path
from dagster_ir.wiki import (
    DEFAULT_DROP_SECTIONS,
    ArticleConfig,
    build_link_graph,
    extract_dump,
    resolve_links,
)

pytest.importorskip("wikiextractor.WikiExtractor")

Edge = tuple[str, str]

_PAGE = re.compile(r"<page>.*?</page>", re.S)
_TITLE = re.compile(r"<title>(.*?)</title>")
_PAGE_ID = re.compile(r"<id>(\d+)</id>")  # the page's id comes before the revision's
_REDIRECT = re.compile(r'<redirect title="([^"]*)"\s*/>')
_TEXT = re.compile(r"(<text\b[^>]*>)(.*?)(</text>)", re.S)
_LIST_MARKERS = re.compile(r"^[ \t]*[*#;]+[ \t]*", re.M)
_LIST_LINE = re.compile(r"^[ \t]*[*#;].*$", re.M)
_HEADING = re.compile(r"^(={1,6})[ \t]*(.+?)[ \t]*\1[ \t]*$", re.M)
_WIKILINK = re.compile(r"\[\[([^\[\]|]*)")
_DOC = re.compile(r'<doc id="(\d+)" url="[^"]*" title="([^"]*)">\n(.*?)</doc>', re.S)
_ANCHOR = re.compile(r'<a href="([^"]*)">(.*?)</a>', re.S)


# --- the raw dump, read with regular expressions --------------------------------------------------


def title_key(raw: str) -> str:
    """A link target or page title as MediaWiki names the page: no #fragment, underscores and runs
    of white space as one space, no leading ':', the first letter in upper case."""
    title = re.sub(r"[\s_]+", " ", raw.partition("#")[0]).strip().lstrip(":").strip()
    return title[:1].upper() + title[1:]


def href_title(href: str) -> str:
    """The title a WikiExtractor href names. It quotes the title as the dump holds it, XML entities
    (`&amp;nbsp;`) and all: unquote, decode the XML entities, then those of the wikitext."""
    return title_key(html.unescape(html.unescape(unquote(href))))


def dump_xml() -> str:
    return bz2.decompress(sample_dump_path().read_bytes()).decode("utf-8")


def is_article(page: str) -> bool:
    return "<ns>0</ns>" in page and _REDIRECT.search(page) is None


def read_redirects(xml: str) -> dict[str, str]:
    """Redirect title -> target title, from `<title>` and `<redirect title=...>` of each page."""
    redirects = {}
    for page in _PAGE.findall(xml):
        redirect = _REDIRECT.search(page)
        if redirect:
            source = title_key(html.unescape(_TITLE.search(page).group(1)))
            redirects[source] = title_key(html.unescape(redirect.group(1)))
    return redirects


def resolver(articles: dict[str, str], redirects: dict[str, str]) -> Callable[[str], str | None]:
    """Title -> article id, through at most 5 redirects; an article title wins over a redirect."""

    def resolve(title: str) -> str | None:
        for _ in range(6):
            if title in articles:
                return articles[title]
            if title not in redirects:
                return None
            title = redirects[title]
        return None

    return resolve


# --- our rules, applied to WikiExtractor's input --------------------------------------------------


def strip_list_markers(text: str) -> str:
    return _LIST_MARKERS.sub("", text)


def cut_sections(text: str, names: tuple[str, ...] = DEFAULT_DROP_SECTIONS) -> str:
    """`text` without the sections whose heading is in `names`, their subsections included."""
    kept, position, cut_level = [], 0, None
    for heading in _HEADING.finditer(text):
        level = len(heading.group(1))
        if cut_level is None:
            kept.append(text[position : heading.start()])
        elif level <= cut_level:
            cut_level = None
        if cut_level is None and heading.group(2).strip().lower() in names:
            cut_level = level
        if cut_level is None:
            kept.append(heading.group())
        position = heading.end()
    if cut_level is None:
        kept.append(text[position:])
    return "".join(kept)


def harmonise(xml: str, rewrite: Callable[[str], str]) -> str:
    """The dump with `rewrite` applied to the (XML-escaped) wikitext of every article."""

    def page(match: re.Match[str]) -> str:
        if not is_article(match.group()):
            return match.group()
        return _TEXT.sub(lambda t: t.group(1) + rewrite(t.group(2)) + t.group(3), match.group())

    return _PAGE.sub(page, xml)


# --- WikiExtractor --------------------------------------------------------------------------------


def wikiextractor_docs(xml: str, out: Path) -> dict[str, tuple[str, str]]:
    """Run WikiExtractor --links --no-templates on `xml`: doc id -> (title, unescaped body)."""
    dump = out / "dump.xml"
    dump.write_text(xml, encoding="utf-8")
    command = [sys.executable, "-m", "wikiextractor.WikiExtractor", "--links", "--no-templates",
               "--processes", "1", "--quiet", "-o", str(out / "text"), str(dump)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True)
    output = "".join(f.read_text(encoding="utf-8") for f in sorted(out.rglob("wiki_*")))
    return {
        doc_id: (title_key(html.unescape(title)), html.unescape(body)) for doc_id, title, body in _DOC.findall(output)
    }


def long_docs(docs: dict[str, tuple[str, str]], min_words: int) -> dict[str, tuple[str, str]]:
    """Docs with at least `min_words` words of text, links as their anchors, title line excluded."""

    def words(body: str) -> int:
        return len(_ANCHOR.sub(r"\2", body).partition("\n")[2].split())

    return {doc_id: doc for doc_id, doc in docs.items() if words(doc[1]) >= min_words}


def link_graph(docs: dict[str, tuple[str, str]], redirects: dict[str, str]) -> set[Edge]:
    """Directed edges (src != dst) between the docs, through their `<a href>` links."""
    resolve = resolver({title: doc_id for doc_id, (title, _) in docs.items()}, redirects)
    edges = set()
    for src, (_, body) in docs.items():
        for href, _ in _ANCHOR.findall(body):
            dst = resolve(href_title(href))
            if dst is not None and dst != src:
                edges.add((src, dst))
    return edges


# --- ours -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ours() -> tuple[set[str], set[Edge]]:
    result = extract_dump(sample_dump_path())
    articles = result.segments.select("article_id", "title")
    graph = build_link_graph(resolve_links(result.raw_links, articles, result.redirects))
    return set(articles["article_id"]), set(graph.select("src_id", "dst_id").iter_rows())


def symmetric_pairs(edges: set[Edge]) -> int:
    return sum((dst, src) in edges for src, dst in edges) // 2


@pytest.mark.slow
def test_link_graph_agrees_with_wikiextractor(ours, tmp_path) -> None:
    our_articles, our_edges = ours
    xml = harmonise(dump_xml(), lambda text: cut_sections(strip_list_markers(text)))
    docs = long_docs(wikiextractor_docs(xml, tmp_path), ArticleConfig().min_words)
    their_edges = link_graph(docs, read_redirects(xml))
    assert set(docs) == our_articles
    assert len(their_edges) > 50  # not two empty graphs
    assert their_edges == our_edges
    assert symmetric_pairs(their_edges) == symmetric_pairs(our_edges) > 0


@pytest.mark.slow
def test_wikiextractor_misses_only_list_links(ours, tmp_path) -> None:
    """On the dump as it is, WikiExtractor's edges are ours less some from links on list lines.

    Without list items its word counts say nothing about min_words: the nodes are our articles.
    """
    our_articles, our_edges = ours
    xml = dump_xml()
    docs = wikiextractor_docs(xml, tmp_path)
    assert our_articles <= set(docs)
    their_edges = link_graph({i: docs[i] for i in our_articles}, read_redirects(xml))
    missing = our_edges - their_edges
    assert their_edges < our_edges and len(missing) == 5

    pages = {_PAGE_ID.search(p).group(1): p for p in _PAGE.findall(xml) if is_article(p)}
    titles = {title_key(html.unescape(_TITLE.search(p).group(1))): i for i, p in pages.items()}
    resolve = resolver(titles, read_redirects(xml))
    for src, dst in missing:
        text = html.unescape(_TEXT.search(pages[src]).group(2))
        list_targets = {
            resolve(title_key(target)) for line in _LIST_LINE.findall(text) for target in _WIKILINK.findall(line)
        }
        assert dst in list_targets, f"edge {src} -> {dst} does not come from a list item"


def test_harmonising_rewrites_cut_dropped_sections_and_list_markers() -> None:
    text = "lead\n==A==\na\n== References ==\nr\n===Sub===\ns\n==B==\n* b\n#c\n=Top=\n==Notes==\nn"
    assert cut_sections(text) == "lead\n==A==\na\n==B==\n* b\n#c\n=Top=\n"
    assert strip_list_markers(text).endswith("==B==\nb\nc\n=Top=\n==Notes==\nn")
