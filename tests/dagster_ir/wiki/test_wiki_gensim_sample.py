"""Regression on real data: the enwiki sample bundled with gensim (206 pages, 6 MB of wikitext).

The pinned figures move when the parser changes on purpose; update them then, and say why.
"""

import importlib.resources

import polars as pl
import pytest

from dagster_ir.schemas import LINK_GRAPH, LINKS, PHP_GROUPS, SEGMENTS, validate
from dagster_ir.wiki import (
    assign_php_groups,
    build_link_graph,
    check_php_groups,
    extract_dump,
    link_statistics,
    resolve_links,
)

SAMPLE = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


@pytest.mark.slow
def test_gensim_enwiki_sample() -> None:
    path = importlib.resources.files("gensim") / SAMPLE
    result = extract_dump(path)
    counts = result.counts
    # 206 pages: 100 redirects (one of them in the Wikipedia: namespace) and 106 articles.
    assert (counts.pages, counts.redirects, counts.other_namespaces) == (206, 99, 1)
    assert counts.articles + counts.dropped_short == 106
    assert (counts.articles, counts.bad_pages) == (104, 0)
    validate(result.segments, SEGMENTS, "segments")
    assert result.segments["n_words"].max() <= 180
    assert result.segments.filter(pl.col("segment_no") == 1).height == counts.articles

    spans = result.raw_links.join(
        result.segments, left_on=["src_id", "src_segment"], right_on=["article_id", "segment_no"]
    )
    assert spans.height == result.raw_links.height
    span = pl.col("text").str.slice(pl.col("anchor_start"), pl.col("anchor_end") - pl.col("anchor_start"))
    assert spans.filter(span != pl.col("anchor_text")).is_empty()

    articles = result.segments.select("article_id", "title")
    links = resolve_links(result.raw_links, articles, result.redirects)
    graph = build_link_graph(links)
    groups = assign_php_groups(links, graph)
    for frame, schema in [(links, LINKS), (graph, LINK_GRAPH), (groups, PHP_GROUPS)]:
        validate(frame, schema, "sample")
    assert check_php_groups(groups, links) == []
    stats = link_statistics(result.segments, result.redirects, links, graph, groups)
    assert (stats["links"], stats["in_corpus_edges"], stats["symmetric_pairs"]) == (22315, 78, 8)
    assert sum(stats["group_sizes"].values()) == groups.height
