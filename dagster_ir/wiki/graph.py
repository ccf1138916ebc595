"""The link graph between articles and the PHP groups D1..D4 of Ma et al.'s hyperlink prediction.

All functions are Polars queries (no Python loop over rows). They accept DataFrames or LazyFrames
and return a LazyFrame when any input is lazy (so that Parquet parts of a full dump can be scanned
and the result streamed to disk), a DataFrame otherwise.

PHP groups (section 3.1 of the paper): for an article d, a segment s of d holding at least one link
to another article of the corpus, and each article d_i that d links to anywhere, with Seg(a, d_i)
the first segment of d_i linking back to d (`back_segment`):
    D1: d <-> d_i, a link to d_i in s, Seg(a, d_i) = 1
    D2: d <-> d_i, a link to d_i in s, Seg(a, d_i) > 1
    D3: d -> d_i only, a link to d_i in s
    D4: no link to d_i in s (whether or not d_i links back)
The groups are disjoint and together cover every (d, s, d_i).
"""

from __future__ import annotations

import polars as pl

from dagster_ir.schemas import LINK_GRAPH, LINKS, PHP_GROUPS

AnyFrame = pl.DataFrame | pl.LazyFrame
GROUPS = ("D1", "D2", "D3", "D4")
_KEY = ["article_id", "segment_no", "linked_id"]


def resolve_links(
    raw_links: AnyFrame,
    articles: AnyFrame,
    redirects: AnyFrame,
    *,
    max_hops: int = 5,
) -> AnyFrame:
    """Links (LINKS): raw links with `target_id`, the article their target title names.

    `articles` has columns (article_id, title), e.g. the segments table. A target is followed
    through redirects (chains of up to `max_hops`; cycles and longer chains stay unresolved); a
    target that ends on no article of the corpus gets a null `target_id`.
    """
    titles = articles.lazy().group_by("title").agg(pl.col("article_id").min())
    redirect_of = (
        redirects.lazy()
        .join(titles, left_on="from_title", right_on="title", how="anti")  # articles win
        .group_by("from_title")
        .agg(pl.col("to_title").min())
    )
    targets = raw_links.lazy().select(pl.col("target_title").unique()).with_columns(
        current=pl.col("target_title")
    )
    for _ in range(max_hops):
        targets = (
            targets.join(redirect_of, left_on="current", right_on="from_title", how="left")
            .with_columns(current=pl.coalesce("to_title", "current"))
            .drop("to_title")
        )
    resolved = targets.join(titles, left_on="current", right_on="title", how="left").select(
        "target_title", target_id=pl.col("article_id")
    )
    links = raw_links.lazy().join(
        resolved, on="target_title", how="left", maintain_order="left"
    )
    return _like(links.select(list(LINKS)), raw_links, articles, redirects)


def build_link_graph(links: AnyFrame) -> AnyFrame:
    """Directed edges between distinct articles of the corpus (LINK_GRAPH), sorted by (src, dst).

    `back_segment` is Seg(a, d_i): the first segment of dst that links to src; null if none.
    """
    edges = (
        _article_links(links)
        .group_by("src_id", "dst_id")
        .agg(
            n_links=pl.len().cast(pl.Int32),
            src_first_segment=pl.col("src_segment").min(),
        )
    )
    back = edges.select(
        src_id="dst_id", dst_id="src_id", back_segment=pl.col("src_first_segment")
    )
    graph = (
        edges.join(back, on=["src_id", "dst_id"], how="left")
        .with_columns(reciprocal=pl.col("back_segment").is_not_null())
        .select(list(LINK_GRAPH))
        .sort("src_id", "dst_id")
    )
    return _like(graph, links)


def assign_php_groups(
    links: AnyFrame, link_graph: AnyFrame
) -> AnyFrame:
    """PHP_GROUPS: the group of every (article d, segment s with links, linked article d_i)."""
    article_links = _article_links(links)
    segments = article_links.select("src_id", "src_segment").unique()
    in_segment = (
        article_links.select("src_id", "src_segment", "dst_id")
        .unique()
        .with_columns(in_segment=pl.lit(True))
    )
    edges = link_graph.lazy().select("src_id", "dst_id", "reciprocal", "back_segment")
    group = (
        pl.when(pl.col("in_segment").is_null())
        .then(pl.lit("D4"))
        .when(~pl.col("reciprocal"))
        .then(pl.lit("D3"))
        .when(pl.col("back_segment") == 1)
        .then(pl.lit("D1"))
        .otherwise(pl.lit("D2"))
    )
    groups = (
        segments.join(edges, on="src_id")
        .join(in_segment, on=["src_id", "src_segment", "dst_id"], how="left")
        .select(
            article_id="src_id",
            segment_no="src_segment",
            linked_id="dst_id",
            group=group,
        )
        .sort(_KEY)
    )
    return _like(groups, links, link_graph)


def check_php_groups(
    groups: AnyFrame, links: AnyFrame
) -> list[str]:
    """Problems with a PHP_GROUPS table given the links it was built from; [] when it is right.

    Looks for duplicate (article_id, segment_no, linked_id) rows, unknown group labels, missing and
    unexpected combinations, and combinations in the wrong group.
    """
    actual = groups.lazy().collect()
    expected = assign_php_groups(links.lazy(), build_link_graph(links.lazy())).collect()
    checks = {
        "duplicate (article_id, segment_no, linked_id) rows": actual.filter(
            pl.struct(_KEY).is_duplicated()
        ),
        f"rows whose group is not one of {GROUPS}": actual.filter(~pl.col("group").is_in(GROUPS)),
        "missing combinations": expected.join(actual, on=_KEY, how="anti"),
        "unexpected combinations": actual.join(expected, on=_KEY, how="anti"),
        "combinations in the wrong group (group_right is expected)": actual.join(
            expected, on=_KEY
        ).filter(pl.col("group") != pl.col("group_right")),
    }
    return [
        f"{len(rows)} {what}, e.g. {rows.row(0, named=True)}"
        for what, rows in checks.items()
        if len(rows)
    ]


def link_statistics(
    segments: AnyFrame,
    redirects: AnyFrame,
    links: AnyFrame,
    link_graph: AnyFrame,
    groups: AnyFrame,
) -> dict[str, object]:
    """Corpus and graph figures as plain Python values (for asset metadata and reports).

    `symmetric_pairs` counts unordered pairs linked both ways; `symmetric_share` is the share of
    in-corpus edges whose reverse edge exists; `out_degree_histogram` lists (out-degree, number of
    articles), including articles with no edge.
    """
    articles = segments.lazy().select(pl.col("article_id").unique())
    graph = link_graph.lazy()
    degrees = (
        articles.join(
            graph.group_by("src_id").len(), left_on="article_id", right_on="src_id", how="left"
        )
        .select(degree=pl.col("len").fill_null(0))
        .group_by("degree")
        .len()
        .sort("degree")
        .collect()
    )
    counts = pl.collect_all(
        [
            articles.select(pl.len()),
            segments.lazy().select(pl.len()),
            redirects.lazy().select(pl.len()),
            links.lazy().select(pl.len(), pl.col("target_id").is_not_null().sum()),
            graph.select(pl.len(), pl.col("reciprocal").sum()),
            groups.lazy().group_by("group").len(),
        ]
    )
    n_edges, n_reciprocal = counts[4].row(0)
    group_sizes = dict(counts[5].iter_rows())
    return {
        "articles": counts[0].item(),
        "segments": counts[1].item(),
        "redirects": counts[2].item(),
        "links": counts[3].item(0, 0),
        "resolved_links": counts[3].item(0, 1),
        "in_corpus_edges": n_edges,
        "symmetric_pairs": n_reciprocal // 2,
        "symmetric_share": n_reciprocal / n_edges if n_edges else 0.0,
        "group_sizes": {g: group_sizes.get(g, 0) for g in GROUPS},
        "out_degree_histogram": [tuple(row) for row in degrees.iter_rows()],
    }


def _article_links(links: AnyFrame) -> pl.LazyFrame:
    """Links to another article of the corpus, with the target as `dst_id`."""
    return (
        links.lazy()
        .filter(pl.col("target_id").is_not_null() & (pl.col("target_id") != pl.col("src_id")))
        .rename({"target_id": "dst_id"})
    )


def _like(result: pl.LazyFrame, *inputs: AnyFrame) -> AnyFrame:
    """Lazy when any input is lazy, collected otherwise."""
    if any(isinstance(frame, pl.LazyFrame) for frame in inputs):
        return result
    return result.collect()
