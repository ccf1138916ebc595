"""Page titles as MediaWiki normalises them, and which titles are not articles.

`normalize_title` turns a link target as written in wikitext (`[[ new_York_City#History ]]`) into
the canonical title of the page it names (`New York City`), so that link targets, redirect targets
and page titles compare equal. `namespace_of` tells an article title from a title in another
namespace (`File:`, `Category:`, `Wikipedia:` ...) or on another wiki (`fr:`, `wikt:` ...).
Namespace names are those of the English Wikipedia.
"""

from __future__ import annotations

import html
import re
from urllib.parse import unquote

# Namespace names and aliases of the English Wikipedia (lower case, spaces) -> canonical name.
_NAMESPACES: dict[str, str] = {
    name.lower(): name
    for name in (
        "Media", "Special", "Talk", "User", "User talk", "Wikipedia", "Wikipedia talk", "File",
        "File talk", "MediaWiki", "MediaWiki talk", "Template", "Template talk", "Help",
        "Help talk", "Category", "Category talk", "Portal", "Portal talk", "Book", "Book talk",
        "Draft", "Draft talk", "Education Program", "Education Program talk", "TimedText",
        "TimedText talk", "Module", "Module talk", "Gadget", "Gadget talk", "Gadget definition",
        "Gadget definition talk", "Topic",
    )
} | {
    "image": "File", "image talk": "File talk", "wp": "Wikipedia", "wt": "Wikipedia talk",
    "project": "Wikipedia", "project talk": "Wikipedia talk",
}  # fmt: skip

# Interwiki prefixes to sister projects and other sites that enwiki links to inline.
_PROJECT_PREFIXES = frozenset(
    "w wikipedia wikt wiktionary b wikibooks q wikiquote s wikisource n wikinews v wikiversity "
    "voy wikivoyage species wikispecies d wikidata c commons m meta metawikimedia mw "
    "mediawikiwiki foundation wmf wikimedia incubator phab phabricator outreach oldwikisource "
    "betawikiversity wikitech doi arxiv rfc iarchive gutenberg".split()
)

#: Language editions of Wikipedia: `[[fr:Anarchisme]]` is an interlanguage link, not an article.
LANGUAGE_CODES = frozenset(
    "aa ab ace ady af ak als alt am ami an ang anp ar arc ary arz as ast atj av avk awa ay az azb "
    "ba ban bar bat-smg bbc bcl be be-tarask be-x-old bg bh bi bjn blk bm bn bo bpy br bs bug bxr "
    "ca cbk-zam cdo ce ceb ch cho chr chy ckb co cr crh cs csb cu cv cy da dag de din diq dsb dty "
    "dv dz ee el eml en eo es et eu ext fa fat ff fi fiu-vro fj fo fon fr frp frr fur fy ga gag "
    "gan gcr gd gl glk gn gom gor got gpe gu guc gur guw gv ha hak haw he hi hif ho hr hsb ht hu "
    "hy hyw hz ia id ie ig ii ik ilo inh io is it iu ja jam jbo jv ka kaa kab kbd kbp kcg kg ki "
    "kj kk kl km kn ko koi kr krc ks ksh ku kv kw ky la lad lb lbe lez lfn lg li lij lld lmo ln "
    "lo lrc lt ltg lv lzh mad mai map-bms mdf mg mh mhr mi min mk ml mn mni mnw mo mr mrj ms mt "
    "mus mwl my myv mzn na nah nan nap nb nds nds-nl ne new ng nia nl nn no nov nqo nrm nso nv "
    "ny oc olo om or os pa pag pam pap pcd pcm pdc pfl pi pih pl pms pnb pnt ps pt pwn qu rm rmy "
    "rn ro roa-rup roa-tara ru rue rup rw sa sah sat sc scn sco sd se sg sgs sh shi shn si simple "
    "sk skr sl sm smn sn so sq sr srn ss st stq su sv sw szl szy ta tay tcy te tet tg th ti tk tl "
    "tly tn to tpi tr trv ts tt tum tw ty tyv udm ug uk ur uz ve vec vep vi vls vo vro wa war wo "
    "wuu xal xh xmf yi yo yue za zea zh zh-classical zh-min-nan zh-yue zu".split()
)

_SPACES = re.compile(r"[\s_]+")


def normalize_title(raw: str) -> str:
    """The canonical page title a link target names, as MediaWiki computes it.

    Decodes HTML entities and %-escapes, drops a `#fragment` and a leading ':', turns underscores
    into spaces, collapses whitespace and upper-cases the first letter (the rest is untouched).
    A namespace prefix is written in its canonical form (`category: foo` -> `Category:Foo`).
    Returns "" for a target that names no page (`#History`, blanks).
    """
    title = raw
    if "&" in title:
        title = html.unescape(title)
    if "%" in title:
        title = unquote(title)
    title = title.partition("#")[0]
    title = _SPACES.sub(" ", title).strip()
    if title.startswith(":"):
        title = title[1:].lstrip()
    prefix, colon, rest = title.partition(":")
    namespace = _NAMESPACES.get(prefix.strip().lower()) if colon else None
    if namespace is not None:
        return f"{namespace}:{_upper_first(rest.strip())}"
    return _upper_first(title)


def namespace_of(title: str) -> str | None:
    """The namespace or interwiki prefix of a title, None for an article title.

    Namespaces come back in canonical form (`"File"` for `Image:x.jpg`), interwiki prefixes in
    lower case (`"fr"`, `"wikt"`). Works on raw or normalised titles; a leading ':' is ignored.
    """
    prefix, colon, _ = title.lstrip(" :").partition(":")
    if not colon:
        return None
    key = _SPACES.sub(" ", prefix).strip().lower()
    if key in _NAMESPACES:
        return _NAMESPACES[key]
    if key in LANGUAGE_CODES or key in _PROJECT_PREFIXES:
        return key
    return None


def is_article_title(title: str) -> bool:
    """True when `title` is a non-empty title of the article namespace of this wiki."""
    return bool(title.strip(" :")) and namespace_of(title) is None


def _upper_first(text: str) -> str:
    """Upper-case the first character unless that changes the length (as for 'ß')."""
    if not text:
        return text
    first = text[0].upper()
    return (first if len(first) == 1 else text[0]) + text[1:]
