"""PHP groups at scale: D1-D3 explicit, a seeded sample of D4 per segment, sizes by query, sampled checks.

Article "a" links 12 articles b0..b11 from its lead (segment 1) and b0 again from segment 2, so
segment 2 has 11 D4 articles; b0..b5 link back to "a" from their lead (D1 where "a" links them).
"""

import polars as pl
import pytest

from dagster_ir.schemas import LINKS, PHP_GROUPS, validate
from dagster_ir.wiki.graph import assign_php_groups, build_link_graph, check_php_groups, php_group_sizes


def _links() -> pl.DataFrame:
    rows = [("a", 1, f"b{i}") for i in range(12)] + [("a", 2, "b0")]
    rows += [(f"b{i}", 1, "a") for i in range(6)]
    rows += [("c", 1, "a"), ("c", 2, "b3")]  # c: a one-way link per segment
    return pl.DataFrame([(src, seg, "x", 0, 1, dst, dst) for src, seg, dst in rows], schema=LINKS, orient="row")


@pytest.fixture
def built():
    links = _links()
    graph = build_link_graph(links)
    return links, graph, assign_php_groups(links, graph)


def test_full_table_by_hand(built):
    _, _, full = built
    per_group = dict(full.group_by("group").len().iter_rows())
    # a/1: b0..b5 D1, b6..b11 D3; a/2: b0 D1, 11 D4; b_i/1: a D1; c/1: a D3, b3 D4; c/2: b3 D3, a D4
    assert per_group == {"D1": 6 + 1 + 6, "D3": 6 + 1 + 1, "D4": 11 + 2}


def test_sampled_d4_keeps_the_explicit_part_and_k_per_segment(built):
    links, graph, full = built
    sampled = assign_php_groups(links, graph, d4_per_segment=3, seed=7)
    validate(sampled, PHP_GROUPS, "php_groups")
    explicit = full.filter(pl.col("group") != "D4")
    assert sampled.filter(pl.col("group") != "D4").equals(explicit)
    d4 = sampled.filter(pl.col("group") == "D4")
    per_segment = dict(((a, s), n) for a, s, n in d4.group_by("article_id", "segment_no").len().iter_rows())
    assert per_segment == {("a", 2): 3, ("c", 1): 1, ("c", 2): 1}  # min(3, D4 size)
    assert d4.join(full, on=["article_id", "segment_no", "linked_id", "group"], how="anti").height == 0
    assert sampled.height == explicit.height + 5 < full.height
    assert assign_php_groups(links, graph, d4_per_segment=3, seed=7).equals(sampled)  # seeded
    others = {
        tuple(
            assign_php_groups(links, graph, d4_per_segment=3, seed=s).filter(pl.col("article_id") == "a")["linked_id"]
        )
        for s in range(8)
    }
    assert len(others) > 1  # the seed changes the sample
    assert assign_php_groups(links, graph, d4_per_segment=100).equals(full)  # k above every D4 size
    assert assign_php_groups(links.lazy(), graph.lazy(), d4_per_segment=3, seed=7).collect().equals(sampled)
    with pytest.raises(ValueError, match="d4_per_segment"):
        assign_php_groups(links, graph, d4_per_segment=-1)


def test_group_sizes_are_those_of_the_full_table(built):
    links, graph, full = built
    expected = {g: 0 for g in ("D1", "D2", "D3", "D4")} | dict(full.group_by("group").len().iter_rows())
    assert php_group_sizes(links, graph) == expected
    assert php_group_sizes(links.lazy(), graph.lazy()) == expected


def test_check_proves_the_sampled_table_and_finds_its_faults(built):
    links, graph, full = built
    sampled = assign_php_groups(links, graph, d4_per_segment=3, seed=7)
    key = dict(d4_per_segment=3, sample_articles=2, seed=0)
    assert check_php_groups(sampled, links, d4_per_segment=3) == []
    assert check_php_groups(sampled, links, **key) == []
    assert check_php_groups(full, links, sample_articles=3) == []
    # The full table is not a sample of 3: a/2 holds 11 D4 rows.
    assert any("D4 sample" in p for p in check_php_groups(full, links, d4_per_segment=3))

    def problems(table: pl.DataFrame, **kwargs) -> list[str]:
        return [p.split(", e.g.")[0] for p in check_php_groups(table, links, d4_per_segment=3, **kwargs)]

    short = sampled.filter(~((pl.col("article_id") == "a") & (pl.col("group") == "D4"))).vstack(
        sampled.filter((pl.col("article_id") == "a") & (pl.col("group") == "D4")).head(2)
    )
    assert problems(short) == ["1 segments whose D4 sample is not min(3, D4 size) rows"]
    relabelled = sampled.with_columns(
        group=pl.when((pl.col("article_id") == "a") & (pl.col("linked_id") == "b0"))
        .then(pl.lit("D4"))
        .otherwise("group")
    )
    assert "2 combinations in the wrong group (group_right is expected)" in problems(relabelled)
    # Outside the article sample only the explicit part is proven; an explicit fault is still found.
    dropped = sampled.filter(~((pl.col("article_id") == "c") & (pl.col("group") == "D3")))
    everywhere = problems(dropped, sample_articles=1)
    assert "2 explicit (D1-D3) combinations missing" in everywhere
