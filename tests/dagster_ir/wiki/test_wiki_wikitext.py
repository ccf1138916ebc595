"""Wikitext -> plain text and links: one markup construct per test, results worked out by hand."""

from dagster_ir.wiki.wikitext import Link, Paragraph, parse_wikitext


def only(text: str) -> Paragraph:
    """The single paragraph that `text` renders to, with its link spans checked."""
    paragraphs = parse_wikitext(text)
    assert len(paragraphs) == 1, paragraphs
    paragraph = paragraphs[0]
    for link in paragraph.links:
        assert paragraph.text[link.start : link.end] == link.anchor
    return paragraph


def test_plain_link_and_piped_link() -> None:
    p = only("A [[dog]] is a [[Canis familiaris|domestic canine]].")
    assert p.text == "A dog is a domestic canine."
    assert p.links == (
        Link("dog", 2, 5, "Dog"),
        Link("domestic canine", 11, 26, "Canis familiaris"),
    )


def test_link_trail_extends_the_anchor() -> None:
    p = only("Two [[dog]]s and [[cat|kitten]]s, [[ox]]-carts, [[ox]]<nowiki/>en.")
    assert p.text == "Two dogs and kittens, ox-carts, oxen."
    assert [(x.anchor, x.target) for x in p.links] == [
        ("dogs", "Dog"),
        ("kittens", "Cat"),
        ("ox", "Ox"),  # '-' is no trail letter
        ("ox", "Ox"),  # <nowiki/> ends the trail
    ]


def test_section_links() -> None:
    p = only("See [[#History|the history]] and the [[Paris#Sights|sights]] and [[Rome#Forum]].")
    assert p.text == "See the history and the sights and Rome#Forum."
    assert [(x.anchor, x.target) for x in p.links] == [("sights", "Paris"), ("Rome#Forum", "Rome")]


def test_pipe_trick() -> None:
    p = only("In [[Paris, Texas|]] and on [[Mercury (planet)|]].")
    assert p.text == "In Paris and on Mercury."
    assert [x.target for x in p.links] == ["Paris, Texas", "Mercury (planet)"]


def test_nested_multiline_templates_are_removed_with_their_links() -> None:
    text = (
        "{{Infobox person\n| name = {{lang|fr|[[Jean]]}}\n| spouse = [[Marie]]\n}}\n"
        "He [[sang]].{{citation needed|date={{CURRENTYEAR}}}}"
    )
    p = only(text)
    assert p.text == "He sang."
    assert [x.target for x in p.links] == ["Sang"]


def test_references_are_removed_with_their_links() -> None:
    text = 'Fact.<ref name="a">{{cite|[[Source]]}} [[Other]]</ref> More<ref name="a" /> [[text]].'
    p = only(text)
    assert p.text == "Fact. More text."
    assert [x.target for x in p.links] == ["Text"]


def test_file_and_category_links_are_removed_with_nested_links() -> None:
    text = (
        "[[File:Dog.jpg|thumb|A [[dog]] in [[Paris]] ([http://x.org source])]]"
        "The [[cat]].[[Image:Cat.png|left|[[Cat]]s]] [[Category:Pets|Dog]] [[fr:Chien]]"
    )
    p = only(text)
    assert p.text == "The cat."
    assert [x.target for x in p.links] == ["Cat"]


def test_other_namespaces_and_interwiki_keep_text_but_are_no_links() -> None:
    p = only("A [[wikt:dog|dog]], [[:Category:Pets|pets]], [[WP:About|about]], [[:fr:Chien]].")
    assert p.text == "A dog, pets, about, fr:Chien."
    assert p.links == ()


def test_comments_tables_and_tags() -> None:
    text = (
        "Before<!-- [[Hidden]] -->.\n"
        '{| class="wikitable"\n|-\n| [[In table]] || {{x}}\n{|\n| nested\n|}\n|}\n'
        "Then <math>x^2</math>, <gallery>\nA.jpg|[[Gal]]\n</gallery><small>small</small> "
        "<span style='c'>[[span]]</span> __NOTOC__ x<br/>y."
    )
    paragraphs = parse_wikitext(text)
    assert [p.text for p in paragraphs] == ["Before.", "Then , small span x y."]
    assert [x.target for x in paragraphs[1].links] == ["Span"]


def test_external_links_bold_italic_and_entities() -> None:
    p = only("'''Bold''' ''italic'' '''''both''''' l''''s [http://a.org/x A site] [http://b.org] &amp; &nbsp;x")
    assert p.text == "Bold italic both l's A site & x"


def test_nowiki_content_is_literal() -> None:
    p = only("Write <nowiki>[[not a link]] {{or template}}</nowiki> as is.")
    assert p.text == "Write [[not a link]] {{or template}} as is."
    assert p.links == ()


def test_headings_paragraphs_and_lists() -> None:
    text = (
        "Lead one.\n\nLead two.\n"
        "== History ==\nIntro of history.\n"
        "=== Early life ===\n* first [[item]]\n* second item\n#: numbered\n; term : definition\n"
        "----\n"
        "== Legacy ==\n'''Legacy''' text.\n"
        "== References ==\n* [[Ref book]]\n"
        "== External links ==\n* [http://x.org site]\n"
    )
    paragraphs = parse_wikitext(text)
    assert [(p.section, p.text) for p in paragraphs] == [
        ("", "Lead one."),
        ("", "Lead two."),
        ("History", "Intro of history."),
        ("History / Early life", "first item second item numbered term : definition"),
        ("Legacy", "Legacy text."),
    ]


def test_drop_sections_can_be_changed() -> None:
    text = "Lead.\n== See also ==\n* [[Cat]]\n== References ==\n* [[Book]]\n"
    kept = [p.section for p in parse_wikitext(text)]
    assert kept == ["", "See also"]
    kept = [p.section for p in parse_wikitext(text, drop_sections=("see also",))]
    assert kept == ["", "References"]


def test_heading_text_is_rendered() -> None:
    paragraphs = parse_wikitext("== The [[Roman Empire|Romans]] and ''you'' ==\nBody.")
    assert paragraphs[0].section == "The Romans and you"


def test_unbalanced_markup_does_not_swallow_the_article() -> None:
    paragraphs = parse_wikitext("Start {{broken\n\nStill [[here]].\n\nAnd ]] {{x}} there.")
    assert [p.text for p in paragraphs] == ["Start {{broken", "Still here.", "And ]] there."]


def test_empty_and_markup_only_text() -> None:
    assert parse_wikitext("") == []
    assert parse_wikitext("{{Infobox}}\n[[Category:X]]\n<!-- c -->\n\n") == []
