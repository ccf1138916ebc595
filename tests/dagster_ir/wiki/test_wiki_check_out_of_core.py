"""`check_php_groups_out_of_core` (DuckDB over the Parquet files) proves the same rule as the
in-memory `check_php_groups`: the same problems, in the same order and counts, on good tables and on
made-up faults (an overlap, a missing link, a wrong group, a short D4 sample, duplicates, unknown labels).

The links are those of tests/dagster_ir/wiki/test_wiki_groups_at_scale.py: "a" links b0..b11 from its
lead and b0 again from segment 2 (11 D4 articles there); b0..b5 link back from their lead; "c" has a
one-way link per segment. Plus an unresolved link and a self link, which give no group.
"""

import polars as pl
import pytest

from dagster_ir.schemas import LINKS, PHP_GROUPS
from dagster_ir.wiki.graph import assign_php_groups, build_link_graph, check_php_groups
from dagster_ir.wiki.out_of_core import OutOfCoreLimits, check_php_groups_out_of_core

LIMITS = OutOfCoreLimits(memory_limit="64MB", threads=1)


def _links() -> pl.DataFrame:
    rows = [("a", 1, f"b{i}") for i in range(12)] + [("a", 2, "b0")]
    rows += [(f"b{i}", 1, "a") for i in range(6)]
    rows += [("c", 1, "a"), ("c", 2, "b3"), ("c", 2, None), ("c", 1, "c")]
    return pl.DataFrame([(src, seg, "x", 0, 1, str(dst), dst) for src, seg, dst in rows], schema=LINKS, orient="row")


@pytest.fixture
def built(tmp_path):
    links = _links()
    graph = build_link_graph(links)
    links.write_parquet(tmp_path / "links.parquet")
    return links, graph, tmp_path


def _both(table: pl.DataFrame, links: pl.DataFrame, tmp_path, **kwargs) -> tuple[list[str], list[str]]:
    """The problems (without the quoted row) of the in-memory check and of the out-of-core one."""
    path = tmp_path / "groups.parquet"
    table.write_parquet(path)
    memory = check_php_groups(table, links, **kwargs)
    bounded = check_php_groups_out_of_core(
        path, tmp_path / "links.parquet", temp_directory=tmp_path / "work", limits=LIMITS, **kwargs
    )
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())  # work database removed
    return [p.split(", e.g.")[0] for p in memory], [p.split(", e.g.")[0] for p in bounded]


def test_good_tables_pass(built):
    links, graph, tmp_path = built
    full = assign_php_groups(links, graph)
    sampled = assign_php_groups(links, graph, d4_per_segment=3, seed=7)
    for table, kwargs in [
        (full, {}),
        (full, {"sample_articles": 2}),
        (sampled, {"d4_per_segment": 3}),
        (sampled, {"d4_per_segment": 3, "sample_articles": 2, "seed": 5}),
    ]:
        assert _both(table, links, tmp_path, **kwargs) == ([], [])


def test_faults_fail_with_the_same_problems(built):
    links, graph, tmp_path = built
    full = assign_php_groups(links, graph)
    sampled = assign_php_groups(links, graph, d4_per_segment=3, seed=7)
    a_b0 = (pl.col("article_id") == "a") & (pl.col("linked_id") == "b0")
    overlap = pl.concat([full, full.filter(a_b0 & (pl.col("segment_no") == 1)).with_columns(group=pl.lit("D3"))])
    missing_link = full.filter(
        ~((pl.col("article_id") == "c") & (pl.col("linked_id") == "b3") & (pl.col("group") == "D3"))
    )
    extra = pl.DataFrame([("z", 1, "a", "D3")], schema=PHP_GROUPS, orient="row")
    cases = [
        (
            overlap,
            {},
            [
                "2 duplicate (article_id, segment_no, linked_id) rows",
                "1 combinations in the wrong group (group_right is expected)",
            ],
        ),
        (missing_link, {}, ["1 missing combinations"]),
        (missing_link, {"sample_articles": 1, "seed": 3}, None),  # "c" may be outside the sample
        (pl.concat([full, extra]), {}, ["1 unexpected combinations"]),
        (
            full.with_columns(group=pl.when(a_b0).then(pl.lit("D4")).otherwise("group")),
            {},
            ["2 combinations in the wrong group (group_right is expected)"],
        ),
        (full.with_columns(group=pl.lit("D5")), {}, None),
        (full, {"d4_per_segment": 3}, ["1 segments whose D4 sample is not min(3, D4 size) rows"]),
        (
            sampled.filter(~((pl.col("article_id") == "a") & (pl.col("group") == "D4"))),
            {"d4_per_segment": 3},
            ["1 segments whose D4 sample is not min(3, D4 size) rows"],
        ),
        (
            sampled.filter(~((pl.col("article_id") == "c") & (pl.col("group") == "D3"))),
            {"d4_per_segment": 3, "sample_articles": 1},
            None,
        ),
    ]
    for table, kwargs, expected in cases:
        memory, bounded = _both(table, links, tmp_path, **kwargs)
        assert bounded == memory, (kwargs, memory, bounded)
        assert bounded, kwargs  # every case is a fault the check must find
        if expected is not None:
            assert bounded == expected
    # A missing explicit link outside the article sample is still found (D1-D3 are proven everywhere).
    memory, bounded = _both(missing_link, links, tmp_path, sample_articles=1, seed=3)
    assert "1 explicit (D1-D3) combinations missing" in bounded


def test_bad_arguments(built):
    _, _, tmp_path = built
    with pytest.raises(FileNotFoundError, match="php_groups"):
        check_php_groups_out_of_core(tmp_path / "none.parquet", tmp_path / "links.parquet", temp_directory=tmp_path)
    with pytest.raises(ValueError, match="d4_per_segment"):
        check_php_groups_out_of_core(
            tmp_path / "links.parquet", tmp_path / "links.parquet", temp_directory=tmp_path, d4_per_segment=-1
        )
