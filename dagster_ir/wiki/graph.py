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

At scale (deviation, see the README): D4 is of the order of segments x out-degree rows, about a
billion on enwiki, so `assign_php_groups(..., d4_per_segment=k)` keeps D1-D3 explicit and a seeded
sample of at most k D4 rows per segment; `php_group_sizes` counts the full groups by queries and
`check_php_groups(..., d4_per_segment=k, sample_articles=n)` proves the rule on the explicit part
and, in full, on a seeded sample of n articles.
"""

from __future__ import annotations

import polars as pl

from dagster_ir.schemas import LINK_GRAPH, LINKS

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
    targets = raw_links.lazy().select(pl.col("target_title").unique()).with_columns(current=pl.col("target_title"))
    for _ in range(max_hops):
        targets = (
            targets.join(redirect_of, left_on="current", right_on="from_title", how="left")
            .with_columns(current=pl.coalesce("to_title", "current"))
            .drop("to_title")
        )
    resolved = targets.join(titles, left_on="current", right_on="title", how="left").select(
        "target_title", target_id=pl.col("article_id")
    )
    links = raw_links.lazy().join(resolved, on="target_title", how="left", maintain_order="left")
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
    back = edges.select(src_id="dst_id", dst_id="src_id", back_segment=pl.col("src_first_segment"))
    graph = (
        edges.join(back, on=["src_id", "dst_id"], how="left")
        .with_columns(reciprocal=pl.col("back_segment").is_not_null())
        .select(list(LINK_GRAPH))
        .sort("src_id", "dst_id")
    )
    return _like(graph, links)


def assign_php_groups(
    links: AnyFrame,
    link_graph: AnyFrame,
    *,
    d4_per_segment: int | None = None,
    seed: int = 0,
) -> AnyFrame:
    """PHP_GROUPS: the group of every (article d, segment s with links, linked article d_i).

    `d4_per_segment=None` lists every D4 row: segments x out-degree rows, of the order of a billion
    on a full English dump. With an int k, D1-D3 stay explicit (one row per distinct link of a
    segment) and each segment keeps a seeded sample of at most k of its D4 articles: the first k,
    in a per-article order by a hash of (seed, d, d_i), that the segment does not link to. That is a
    uniform sample of the segment's D4 (the segments of one article share the order), and the table
    has at most distinct links + k x segments rows. The full D4 sizes are `php_group_sizes`.
    """
    if d4_per_segment is not None and d4_per_segment < 0:
        raise ValueError(f"d4_per_segment must be >= 0 or None, got {d4_per_segment}")
    article_links = _article_links(links)
    in_segment = article_links.select("src_id", "src_segment", "dst_id").unique()
    edges = link_graph.lazy().select("src_id", "dst_id", "reciprocal", "back_segment")
    explicit = in_segment.join(edges, on=["src_id", "dst_id"]).select(
        article_id="src_id",
        segment_no="src_segment",
        linked_id="dst_id",
        group=pl.when(~pl.col("reciprocal"))
        .then(pl.lit("D3"))
        .when(pl.col("back_segment") == 1)
        .then(pl.lit("D1"))
        .otherwise(pl.lit("D2")),
    )
    if d4_per_segment is None:
        segments = in_segment.select("src_id", "src_segment").unique()
        d4 = segments.join(edges.select("src_id", "dst_id"), on="src_id")
    else:
        d4 = _d4_sample(in_segment, edges, d4_per_segment, seed)
    d4 = d4.join(in_segment, on=["src_id", "src_segment", "dst_id"], how="anti").select(
        article_id="src_id", segment_no="src_segment", linked_id="dst_id", group=pl.lit("D4")
    )
    groups = pl.concat([explicit, d4]).sort(_KEY)
    return _like(groups, links, link_graph)


def _d4_sample(in_segment: pl.LazyFrame, edges: pl.LazyFrame, k: int, seed: int) -> pl.LazyFrame:
    """Candidate D4 rows (src_id, src_segment, dst_id): per segment, the first k of its article's
    out-edges in hash order that the segment does not link to (the anti-join is the caller's)."""
    ranked = edges.select("src_id", "dst_id").with_columns(
        rank=pl.struct("src_id", "dst_id").hash(seed).rank("ordinal").over("src_id")
    )
    n_in = in_segment.group_by("src_id", "src_segment").agg(n_in=pl.len())
    # k D4 rows of a segment lie among its article's first k + n_in edges in hash order.
    candidates = (
        n_in.join(ranked, on="src_id")
        .filter(pl.col("rank") <= pl.col("n_in") + k)
        .join(in_segment, on=["src_id", "src_segment", "dst_id"], how="anti")
    )
    return candidates.filter(pl.col("rank").rank("ordinal").over("src_id", "src_segment") <= k).select(
        "src_id", "src_segment", "dst_id"
    )


def php_group_sizes(links: AnyFrame, link_graph: AnyFrame) -> dict[str, int]:
    """Rows of each group D1..D4 of the full PHP_GROUPS table, counted by queries, never listed.

    D4 of a segment is the article's out-degree less the distinct articles the segment links to.
    """
    article_links = _article_links(links)
    in_segment = article_links.select("src_id", "src_segment", "dst_id").unique()
    explicit = assign_php_groups(links.lazy(), link_graph.lazy(), d4_per_segment=0)
    degree = link_graph.lazy().group_by("src_id").agg(degree=pl.len())
    d4 = (
        in_segment.group_by("src_id", "src_segment")
        .agg(n_in=pl.len())
        .join(degree, on="src_id")
        .select((pl.col("degree") - pl.col("n_in")).sum())
    )
    counts, d4_rows = pl.collect_all([explicit.group_by("group").len(), d4])
    sizes = {g: 0 for g in GROUPS} | dict(counts.iter_rows())
    sizes["D4"] = int(d4_rows.item() or 0)
    return sizes


def check_php_groups(
    groups: AnyFrame,
    links: AnyFrame,
    *,
    d4_per_segment: int | None = None,
    sample_articles: int | None = None,
    seed: int = 0,
) -> list[str]:
    """Problems with a PHP_GROUPS table given the links it was built from; [] when it is right.

    Looks for duplicate (article_id, segment_no, linked_id) rows, unknown group labels, missing and
    unexpected combinations, and combinations in the wrong group.

    At scale: `sample_articles=n` proves the rule in full (every D4 row worked out) on a seeded
    sample of n articles, and on the explicit part (D1-D3) of every article; `d4_per_segment=k`
    says the table holds a sample of at most k D4 rows per segment (`assign_php_groups`), so each
    segment of the sample must hold min(k, its D4 size) rows of its own D4 and no other.
    """
    actual = groups.lazy()
    links = links.lazy()
    graph = build_link_graph(links)
    problems: list[str] = []

    def report(what: str, rows: pl.LazyFrame) -> None:
        n, first = pl.collect_all([rows.select(pl.len()), rows.head(1)])
        if n.item():
            problems.append(f"{n.item()} {what}, e.g. {first.row(0, named=True)}")

    report(
        "duplicate (article_id, segment_no, linked_id) rows",
        actual.group_by(_KEY).agg(n=pl.len()).filter(pl.col("n") > 1).join(actual, on=_KEY).drop("n"),
    )
    report(f"rows whose group is not one of {GROUPS}", actual.filter(~pl.col("group").is_in(GROUPS)))
    scope_actual, scope_links = actual, links
    if sample_articles is not None:
        chosen = (
            links.select(article_id=pl.col("src_id").unique())
            .with_columns(key=pl.col("article_id").hash(seed))
            .sort("key")
            .head(sample_articles)
            .select("article_id")
        )
        scope_actual = actual.join(chosen, on="article_id", how="semi")
        scope_links = links.join(chosen, left_on="src_id", right_on="article_id", how="semi")
    # Expected rows of the articles in scope; graph of every link (back segments come from d_i).
    expected = assign_php_groups(
        scope_links, graph.join(scope_links.select(src_id=pl.col("src_id").unique()), on="src_id", how="semi")
    )
    if d4_per_segment is None:
        report("missing combinations", expected.join(scope_actual, on=_KEY, how="anti"))
    else:
        report(
            "missing combinations",
            expected.filter(pl.col("group") != "D4").join(scope_actual, on=_KEY, how="anti"),
        )
        seg = ["article_id", "segment_no"]
        wanted = (
            expected.filter(pl.col("group") == "D4")
            .group_by(seg)
            .agg(expected=pl.len().clip(upper_bound=d4_per_segment))
        )
        held = scope_actual.filter(pl.col("group") == "D4").group_by(seg).agg(held=pl.len())
        report(
            f"segments whose D4 sample is not min({d4_per_segment}, D4 size) rows",
            wanted.join(held, on=seg, how="full", coalesce=True).filter(
                pl.col("expected").fill_null(0) != pl.col("held").fill_null(0)
            ),
        )
    report("unexpected combinations", scope_actual.join(expected, on=_KEY, how="anti"))
    report(
        "combinations in the wrong group (group_right is expected)",
        scope_actual.join(expected, on=_KEY).filter(pl.col("group") != pl.col("group_right")),
    )
    if sample_articles is not None:  # the explicit part of every article
        explicit = assign_php_groups(links, graph, d4_per_segment=0)
        stored = actual.filter(pl.col("group") != "D4")
        report("explicit (D1-D3) combinations missing", explicit.join(stored, on=_KEY, how="anti"))
        report(
            "explicit (D1-D3) rows not in the links or in the wrong group",
            stored.join(explicit, on=["article_id", "segment_no", "linked_id", "group"], how="anti"),
        )
    return problems


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
        articles.join(graph.group_by("src_id").len(), left_on="article_id", right_on="src_id", how="left")
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
