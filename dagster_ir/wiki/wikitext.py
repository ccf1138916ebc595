"""Wikitext -> plain-text paragraphs with the character spans of their links.

`parse_wikitext` renders what a reader of the article sees as running text, roughly as
WikiExtractor does, and keeps every wikilink to another article as a `Link` whose `start:end` span
in the paragraph text is its anchor text. It works in passes over the whole text, each one a
compiled regular expression (the only Python loops run over matches, never over characters):

1. protect `<nowiki>` content; drop comments, `<ref>`s, blocks such as `<math>` or `<gallery>`;
2. drop templates `{{...}}` and tables `{|...|}` (innermost first, so nesting is handled);
3. drop `[[File:...]]`, `[[Category:...]]` and interlanguage links, captions and nested links with
   them; drop formatting tags and behaviour switches (`__TOC__`); keep labels of external links;
4. split at headings into sections, drop the sections in `drop_sections`, split each section into
   paragraphs at blank lines, strip list markup and collapse white space;
5. render `[[target|anchor]]trail` as `anchor + trail`, recording its span and normalised target.

Links inside templates, references, tables and captions are therefore not kept. A link to a page in
another namespace or wiki (`[[wikt:word|word]]`, `[[:Category:X|X]]`) keeps its text but is no link;
so does a section link `[[#History|the history]]` (it points to the page itself).
`Paragraph.section` is the heading path, e.g. "History / Early life"; "" for the lead.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterable
from dataclasses import dataclass

from dagster_ir.wiki.titles import LANGUAGE_CODES, namespace_of, normalize_title

#: Sections whose content is apparatus rather than running text (compared in lower case).
DEFAULT_DROP_SECTIONS: tuple[str, ...] = (
    "references", "notes", "footnotes", "citations", "notes and references", "sources",
    "bibliography", "further reading", "external links",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Link:
    """A wikilink to an article: `paragraph.text[start:end] == anchor`; `target` is normalised."""

    anchor: str
    start: int
    end: int
    target: str


@dataclass(frozen=True, slots=True)
class Paragraph:
    """A block of plain text between blank lines, the heading path above it and its links."""

    section: str
    text: str
    links: tuple[Link, ...]


def parse_wikitext(text: str, *, drop_sections: Iterable[str] = DEFAULT_DROP_SECTIONS) -> list[Paragraph]:
    """Plain-text paragraphs of an article's wikitext, in order, with their article links."""
    dropped = {name.lower() for name in drop_sections}
    paragraphs = []
    for path, body in _sections(_strip_markup(text)):
        if dropped.intersection(name.lower() for name in path):
            continue
        section = " / ".join(path)
        for block in _PARAGRAPH_BREAK.split(_LINE_MARKUP.sub("", body)):
            paragraph = _render_paragraph(section, block)
            if paragraph is not None:
                paragraphs.append(paragraph)
    return paragraphs


@functools.lru_cache(maxsize=1 << 12)
def word_count(text: str) -> int:
    """Number of white-space separated words (cached: a paragraph's text is counted at each step of
    segmenting it, and a string keeps its hash, so a repeat costs a lookup)."""
    return len(text.split())


# --- pass 1-3: markup that is removed ----------------------------------------------------------

# <nowiki> content is shown as is: its markup characters are swapped for private-use characters,
# one for one (so offsets do not move), and swapped back once the paragraph is rendered.
_NOWIKI_CHARS = "[]{}|'<>=*#:;_!"
_PROTECT = str.maketrans({c: chr(0xFFF00 + i) for i, c in enumerate(_NOWIKI_CHARS)})
_RESTORE = str.maketrans({chr(0xFFF00 + i): c for i, c in enumerate(_NOWIKI_CHARS)})
_PROTECTED = re.compile("[\U000fff00-\U000fff0f]")
_TRAIL_STOP = "\U000ffeff"  # `<nowiki/>`: renders as nothing but ends a link trail

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
_NOWIKI = re.compile(r"<nowiki\s*>(.*?)</nowiki\s*>", re.S | re.I)
_NOWIKI_EMPTY = re.compile(r"<nowiki\s*/>", re.I)
_REF_EMPTY = re.compile(r"<ref\b[^>]*/>", re.I)
_REF = re.compile(r"<ref\b[^>]*>.*?</ref\s*>", re.S | re.I)
_DROPPED_TAGS = (
    "math|chem|ce|gallery|timeline|imagemap|graph|mapframe|maplink|score|syntaxhighlight|source|"
    "pre|hiero|categorytree|references|templatedata|templatestyles|inputbox|includeonly|"
    "charinsert|indicator"
)
_DROPPED_BLOCK = re.compile(rf"<({_DROPPED_TAGS})\b[^>]*?(?:/>|>.*?</\1\s*>)", re.S | re.I)
_TEMPLATE = re.compile(r"\{\{(?:[^{}]++|\{(?!\{)|\}(?!\}))*+\}\}")
_TABLE = re.compile(r"\{\|(?:[^{|]++|\{(?!\|)|\|(?!\}))*+\|\}")
_BEHAVIOUR_SWITCH = re.compile(r"__[A-Z]+__")
_BRACKET_RUN = re.compile(r"\[{2,}|\]{2,}")
_HIDDEN_LINK_START = re.compile(r"\[\[[ \t]*([^\[\]|:\n]{1,40}):")
_HIDDEN_PREFIXES = {"file", "image", "category"} | LANGUAGE_CODES
_LINE_BREAK_TAG = re.compile(r"<br\b[^>]*>|</br\s*>", re.I)
_FORMAT_TAG = re.compile(
    r"</?(?:b|i|u|s|strike|del|ins|span|div|small|big|sup|sub|center|font|abbr|blockquote|p|hr|"
    r"code|tt|var|kbd|samp|cite|q|dfn|em|strong|mark|bdi|bdo|ruby|rb|rt|rp|wbr|poem|onlyinclude|"
    r"noinclude|section|table|tr|td|th|caption|ol|ul|li|dl|dt|dd|h[1-6]|time|data|ref|nowiki|"
    rf"{_DROPPED_TAGS})\b[^>]*>",
    re.I,
)
_EXTERNAL_LINK = re.compile(
    r"\[(?:https?:|ftps?:|mailto:|news:|irc:|ircs:|gopher:|telnet:|nntp:|svn:|git:|sftp:|ssh:|//)"
    r"[^\s\[\]<>\"]*(?:[ \t]+([^\]\n]*))?\]",
    re.I,
)
# Bold and italic quote runs render as nothing (a run of four is an apostrophe and bold).
_QUOTES = re.compile(r"''(?:'''|')?")


def _strip_markup(text: str) -> str:
    """Remove everything that is not running text or a link; keep lines and headings."""
    text = _COMMENT.sub("", text)
    if "nowiki" in text:
        text = _NOWIKI.sub(lambda m: m.group(1).translate(_PROTECT), text)
        text = _NOWIKI_EMPTY.sub(_TRAIL_STOP, text)
    if "<" in text:
        text = _REF_EMPTY.sub("", text)
        text = _REF.sub("", text)
        text = _DROPPED_BLOCK.sub("", text)
    text = _remove_nested(_TEMPLATE, "{{", text)
    text = _remove_nested(_TABLE, "{|", text)
    text = _BEHAVIOUR_SWITCH.sub("", text)
    text = _drop_hidden_links(text)
    if "<" in text:
        text = _LINE_BREAK_TAG.sub(" ", text)
        text = _FORMAT_TAG.sub("", text)
    text = _EXTERNAL_LINK.sub(r"\1", text)
    text = _QUOTES.sub("", text)
    return html.unescape(text) if "&" in text else text


def _restore(text: str) -> str:
    """Swap protected `<nowiki>` characters back (one for one: offsets do not move)."""
    return text.translate(_RESTORE) if _PROTECTED.search(text) else text


def _remove_nested(pattern: re.Pattern[str], opener: str, text: str) -> str:
    """Remove nested constructs innermost first: one pass per level of nesting."""
    while opener in text:
        text, removed = pattern.subn("", text)
        if not removed:
            break
    return text


def _drop_hidden_links(text: str) -> str:
    """Remove `[[File:..]]`, `[[Category:..]]`, `[[fr:..]]` with everything inside them.

    From each such opening the brackets are counted over runs of `[[`/`]]` (a loop over brackets,
    not characters) up to the matching `]]`, so a caption's nested links go with the file link.
    """
    cuts: list[tuple[int, int]] = []
    for opening in _HIDDEN_LINK_START.finditer(text):
        if cuts and opening.start() < cuts[-1][1]:
            continue  # inside a link already removed (a caption)
        if opening.group(1).strip().replace("_", " ").lower() not in _HIDDEN_PREFIXES:
            continue
        end = _matching_close(text, opening.start())
        if end is not None:
            cuts.append((opening.start(), end))
    return _cut(text, cuts)


def _matching_close(text: str, start: int) -> int | None:
    """End of the `]]` that closes the `[[` at `start`; None when it is never closed."""
    depth = 0
    for run in _BRACKET_RUN.finditer(text, start):
        pairs = len(run.group()) // 2
        if run.group()[0] == "[":
            depth += pairs
        elif depth <= pairs:  # an odd ']' first closes an external link inside a caption
            return run.end() - 2 * (pairs - depth)
        else:
            depth -= pairs
    return None


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` without the given sorted, disjoint spans."""
    if not spans:
        return text
    pieces, position = [], 0
    for start, end in spans:
        pieces.append(text[position:start])
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


# --- pass 4: sections and paragraphs -------------------------------------------------------------

_HEADING = re.compile(r"^(={1,6})[ \t]*(.+?)[ \t]*\1[ \t]*$", re.M)
# List and indentation markers, horizontal rules and leftovers of unclosed tables.
_LINE_MARKUP = re.compile(r"^[ \t]*(?:[*#:;]+[ \t]*|-{4,}.*$|(?:\{\||\|\}|\|).*$)", re.M)
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_SPACE = re.compile(r"\s+")


def _sections(text: str) -> list[tuple[tuple[str, ...], str]]:
    """Split at headings: (heading path, body) pairs; the lead has the empty path."""
    sections = []
    path: list[tuple[int, str]] = []
    position = 0
    for heading in _HEADING.finditer(text):
        sections.append((tuple(title for _, title in path), text[position : heading.start()]))
        level = len(heading.group(1))
        path = [(lvl, title) for lvl, title in path if lvl < level]
        path.append((level, _plain(heading.group(2))))
        position = heading.end()
    sections.append((tuple(title for _, title in path), text[position:]))
    return sections


def _plain(text: str) -> str:
    """Text of a heading: links rendered as their anchors, white space collapsed."""
    text = _LINK.sub(lambda m: "" if m.group(1) is None else _anchor(m), text)
    return _restore(_SPACE.sub(" ", text).strip())


# --- pass 5: links ----------------------------------------------------------------------------

_LINK = re.compile(r"\[\[([^\[\]|]*)(?:\|([^\[\]]*))?\]\]([a-z]+)?|" + _TRAIL_STOP)
_PARENTHETICAL = re.compile(r"^(.+?)\s*\([^()]*\)\s*$")


def _render_paragraph(section: str, block: str) -> Paragraph | None:
    """One paragraph from a block of text between blank lines; None when no text is left."""
    block = " ".join(block.split())  # white space collapsed, as `_SPACE.sub(" ", block).strip()`, faster
    if not block:
        return None
    text, spans = _render_links(block)
    stripped = text.strip()
    if not stripped:
        return None
    shift = len(text) - len(text.lstrip())
    text = _restore(stripped)
    links = tuple(
        Link(text[start - shift : end - shift], start - shift, end - shift, target) for start, end, target in spans
    )
    return Paragraph(section, text, links)


def _render_links(block: str) -> tuple[str, list[tuple[int, int, str]]]:
    """Links replaced by their anchor text: the text and the (start, end, target) of each link."""
    pieces: list[str] = []
    spans: list[tuple[int, int, str]] = []
    length = position = 0
    for match in _LINK.finditer(block):  # the match's groups and span read once each
        start, end = match.span()
        pieces.append(block[position:start])
        length += start - position
        position = end
        raw, label, trail = match.groups()
        if raw is None:  # a trail stop
            continue
        anchor = _shown(raw, label, trail)
        if not anchor:
            continue
        target = _target(raw)
        if target:
            spans.append((length, length + len(anchor), target))
        pieces.append(anchor)
        length += len(anchor)
    pieces.append(block[position:])
    return "".join(pieces), spans


def _anchor(match: re.Match[str]) -> str:
    """The text a link shows: its label (or the pipe trick, or the target) plus the link trail."""
    return _shown(*match.groups())


def _shown(target: str, label: str | None, trail: str | None) -> str:
    """`_anchor` of a link's three parts ("" when it shows nothing)."""
    if label is None:
        shown = target.strip().lstrip(":").lstrip("#")
    else:
        shown = label.strip() or _pipe_trick(target)
    return shown + trail if shown and trail else shown


def _pipe_trick(target: str) -> str:
    """`[[Paris, Texas|]]` shows "Paris", `[[Mercury (planet)|]]` shows "Mercury"."""
    title = target.strip().lstrip(":")
    if namespace_of(title) is not None:
        title = title.partition(":")[2].strip()
    parenthetical = _PARENTHETICAL.match(title)
    if parenthetical:
        return parenthetical.group(1)
    return title.partition(",")[0].strip()


@functools.lru_cache(maxsize=1 << 16)
def _target(raw: str) -> str | None:
    """The normalised article title a link points to; None for section links, other namespaces."""
    raw = raw.strip()
    if not raw or raw.startswith("#"):
        return None
    title = normalize_title(_restore(raw))
    if not title or namespace_of(title) is not None:
        return None
    return title
