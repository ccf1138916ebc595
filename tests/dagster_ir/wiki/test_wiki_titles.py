"""Title normalisation and namespace recognition."""

import pytest

from dagster_ir.wiki.titles import is_article_title, namespace_of, normalize_title


@pytest.mark.parametrize(
    ("raw", "title"),
    [
        ("dog", "Dog"),
        ("  new_york   city ", "New york city"),
        ("iPod", "IPod"),
        ("eBay#History", "EBay"),
        ("Paris#Sights", "Paris"),
        (":Dog", "Dog"),
        ("AT&amp;T", "AT&T"),
        ("Caf&eacute;", "Café"),
        ("Caf%C3%A9_au_lait", "Café au lait"),
        ("100% Pure", "100% Pure"),
        ("ßtraße", "ßtraße"),  # no one-letter upper case: left alone
        ("category: living people", "Category:Living people"),
        ("Image:Foo.jpg", "File:Foo.jpg"),
        ("Star Trek: the next generation", "Star Trek: the next generation"),
        ("#History", ""),
        ("   ", ""),
    ],
)
def test_normalize_title(raw: str, title: str) -> None:
    assert normalize_title(raw) == title


def test_normalize_title_is_idempotent() -> None:
    for raw in ["new_york city#x", "category: foo_bar", ":fr:Paris", "Caf%C3%A9"]:
        once = normalize_title(raw)
        assert normalize_title(once) == once


@pytest.mark.parametrize(
    ("title", "namespace"),
    [
        ("File:X.jpg", "File"),
        ("image:X.jpg", "File"),
        ("Category:Living people", "Category"),
        (":Category:Living people", "Category"),
        ("Template:Infobox", "Template"),
        ("Wikipedia:Manual of Style", "Wikipedia"),
        ("WP:MOS", "Wikipedia"),
        ("Help:Contents", "Help"),
        ("Portal:Science", "Portal"),
        ("User talk:Someone", "User talk"),
        ("fr:Anarchisme", "fr"),
        ("zh-min-nan:Tâi-oân", "zh-min-nan"),
        ("wikt:dog", "wikt"),
        ("Star Trek: The Next Generation", None),
        ("Dog", None),
        ("Ratio 1:2", None),
    ],
)
def test_namespace_of(title: str, namespace: str | None) -> None:
    assert namespace_of(title) == namespace
    assert is_article_title(title) is (namespace is None)


def test_empty_title_is_not_an_article() -> None:
    assert not is_article_title("")
    assert not is_article_title(":")
