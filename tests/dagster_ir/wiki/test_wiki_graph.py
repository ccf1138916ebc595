"""Link resolution, the link graph and PHP groups D1..D4 on a four-article dump worked out by hand.

Segments hold one paragraph each (max 12 words, paragraphs of about 8):
    A(1): s1 links B, C        s2 links D and, through the redirect "Bee", B     s3 no links
    B(2): s1 links A
    C(3): s1 no links          s2 links A
    D(4): s1 links B, itself, and "Nowhere" (not in the dump)
Edges: A->B (back link in B's s1), A->C (back link in C's s2), A->D (none), B->A, C->A, D->B.
"""

from pathlib import Path

import polars as pl
import pytest
from wiki_dumps import page, write_dump

from dagster_ir.schemas import LINK_GRAPH, LINKS, PHP_GROUPS, RAW_LINKS, validate
from dagster_ir.wiki.articles import ArticleConfig, extract_dump
from dagster_ir.wiki.graph import (
    assign_php_groups,
    build_link_graph,
    check_php_groups,
    link_statistics,
    resolve_links,
)

FOUR_ARTICLES = [
    page(1, "A", "A lead links to [[B]] and [[C]] here.\n"
                 "== One ==\nSecond part links [[D]] and [[Bee|bee]] too.\n"
                 "== Two ==\nThird part has no links at all here."),
    page(2, "B", "B lead mentions [[A]] in its lead."),
    page(3, "C", "C lead has nothing to say about that.\n"
                 "== Body ==\nC later mentions [[A]] in its body."),
    page(4, "D", "D lead links [[B]], [[D|itself]] and [[Nowhere]] only."),
    page(5, "Bee", "#REDIRECT [[B]]", redirect="B"),
]  # fmt: skip

EXPECTED_GROUPS = [
    ("1", 1, "2", "D1"),  # A<->B, B in A's s1, B links back from its s1
    ("1", 1, "3", "D2"),  # A<->C, C in A's s1, C links back from its s2
    ("1", 1, "4", "D4"),  # D not linked from A's s1
    ("1", 2, "2", "D1"),  # the redirect Bee -> B
    ("1", 2, "3", "D4"),  # reciprocal, but not linked from s2
    ("1", 2, "4", "D3"),  # D does not link back
    ("2", 1, "1", "D1"),  # A's first link to B is in A's s1
    ("3", 2, "1", "D1"),
    ("4", 1, "2", "D3"),  # the self link and the link to Nowhere make no edge
]


@pytest.fixture(params=["dump.xml", "dump.xml.bz2"])
def four(tmp_path: Path, request: pytest.FixtureRequest):
    path = write_dump(tmp_path / request.param, FOUR_ARTICLES)
    result = extract_dump(path, ArticleConfig(segment_max_words=12, min_words=3))
    articles = result.segments.select("article_id", "title")
    links = resolve_links(result.raw_links, articles, result.redirects)
    graph = build_link_graph(links)
    return result, links, graph, assign_php_groups(links, graph)


def test_segments_of_the_four_articles(four) -> None:
    result, *_ = four
    per_article = result.segments.group_by("article_id").len().sort("article_id")
    assert per_article.rows() == [("1", 3), ("2", 1), ("3", 2), ("4", 1)]


def test_links_are_resolved_through_redirects(four) -> None:
    _, links, _, _ = four
    validate(links, LINKS, "links")
    assert links.select("src_id", "src_segment", "target_title", "target_id").rows() == [
        ("1", 1, "B", "2"), ("1", 1, "C", "3"), ("1", 2, "D", "4"), ("1", 2, "Bee", "2"),
        ("2", 1, "A", "1"), ("3", 2, "A", "1"),
        ("4", 1, "B", "2"), ("4", 1, "D", "4"), ("4", 1, "Nowhere", None),
    ]  # fmt: skip


def test_link_graph(four) -> None:
    _, _, graph, _ = four
    validate(graph, LINK_GRAPH, "link_graph")
    assert graph.rows() == [
        # src, dst, n_links, src_first_segment, reciprocal, back_segment
        ("1", "2", 2, 1, True, 1),
        ("1", "3", 1, 1, True, 2),
        ("1", "4", 1, 2, False, None),
        ("2", "1", 1, 1, True, 1),
        ("3", "1", 1, 2, True, 1),
        ("4", "2", 1, 1, False, None),
    ]


def test_php_groups_by_hand(four) -> None:
    _, links, _, groups = four
    validate(groups, PHP_GROUPS, "php_groups")
    assert groups.rows() == EXPECTED_GROUPS
    assert check_php_groups(groups, links) == []


def test_check_php_groups_finds_each_kind_of_problem(four) -> None:
    _, links, _, groups = four

    def problems(table: pl.DataFrame) -> list[str]:
        return [p.split(", e.g.")[0] for p in check_php_groups(table, links)]

    assert problems(pl.concat([groups, groups.slice(5, 1)])) == ["2 duplicate (article_id, segment_no, linked_id) rows"]
    assert problems(groups.slice(1)) == ["1 missing combinations"]
    extra = pl.DataFrame([("9", 1, "1", "D3")], schema=PHP_GROUPS, orient="row")
    assert problems(pl.concat([groups, extra])) == ["1 unexpected combinations"]
    relabelled = groups.with_columns(group=pl.when(pl.col("linked_id") == "4").then(pl.lit("D1")).otherwise("group"))
    assert problems(relabelled) == ["2 combinations in the wrong group (group_right is expected)"]
    unknown = groups.with_columns(group=pl.lit("D5"))
    assert problems(unknown)[0] == "9 rows whose group is not one of ('D1', 'D2', 'D3', 'D4')"


def test_link_statistics(four) -> None:
    result, links, graph, groups = four
    stats = link_statistics(result.segments, result.redirects, links, graph, groups)
    assert stats == {
        "articles": 4,
        "segments": 7,
        "redirects": 1,
        "links": 9,
        "resolved_links": 8,
        "in_corpus_edges": 6,
        "symmetric_pairs": 2,
        "symmetric_share": 4 / 6,
        "group_sizes": {"D1": 4, "D2": 1, "D3": 2, "D4": 2},
        "out_degree_histogram": [(1, 3), (3, 1)],
    }


def test_lazy_inputs_give_lazy_results(four) -> None:
    result, links, graph, groups = four
    articles = result.segments.select("article_id", "title")
    lazy_links = resolve_links(result.raw_links.lazy(), articles, result.redirects)
    assert isinstance(lazy_links, pl.LazyFrame)
    assert lazy_links.collect().equals(links)
    lazy_graph = build_link_graph(lazy_links)
    assert isinstance(lazy_graph, pl.LazyFrame)
    assert assign_php_groups(lazy_links, lazy_graph).collect().equals(groups)


def resolved(targets: list[str], redirects: list[tuple[str, str]], max_hops: int = 5) -> list[str | None]:
    """target_id of links to `targets` in a corpus of two articles, Paris (1) and Rome (2)."""
    raw = pl.DataFrame([("0", 1, "x", 0, 1, target) for target in targets], schema=RAW_LINKS, orient="row")
    articles = pl.DataFrame({"article_id": ["1", "2"], "title": ["Paris", "Rome"]})
    redirects_frame = pl.DataFrame(redirects, schema=["from_title", "to_title"], orient="row")
    return resolve_links(raw, articles, redirects_frame, max_hops=max_hops)["target_id"].to_list()


def test_redirect_chains_cycles_and_hops() -> None:
    redirects = [
        ("City of light", "Lutetia"), ("Lutetia", "Paris"),  # a chain of two
        ("Loop", "Pool"), ("Pool", "Loop"),  # a cycle
        ("Rome", "Paris"),  # an article title never redirects
        ("Long1", "Long2"), ("Long2", "Long3"), ("Long3", "Long4"), ("Long4", "Rome"),
    ]  # fmt: skip
    targets = ["Paris", "City of light", "Lutetia", "Loop", "Rome", "Nowhere", "Long1"]
    assert resolved(targets, redirects) == ["1", "1", "1", None, "2", None, "2"]
    assert resolved(targets, redirects, max_hops=2) == ["1", "1", "1", None, "2", None, None]
