"""Vectorised example drawing on a generated table far larger than the hand-made ones."""

from functools import partial

import polars as pl

from dagster_ir.methods.php import PhpConfig, build_php_examples
from dagster_ir.schemas import PHP_GROUPS

N_ARTICLES = 400


def _article(i: int, k: int) -> str:
    return f"a{(i + k) % N_ARTICLES}"


def _groups() -> pl.DataFrame:
    """Article i: segment 1 links i+1..i+3 (D1, D3, D3), segment 2 none of them but i+4..i+9 as D4
    (and i+1..i+3 as D4); segment 2 has a D3 link to i+10. Ids wrap around N_ARTICLES."""
    rows = []
    for i in range(N_ARTICLES):
        art = partial(_article, i)
        rows += [(f"a{i}", 1, art(1), "D1"), (f"a{i}", 1, art(2), "D3"), (f"a{i}", 1, art(3), "D3")]
        rows += [(f"a{i}", 1, art(10), "D4")]
        rows += [(f"a{i}", 2, art(k), "D4") for k in range(1, 10)] + [(f"a{i}", 2, art(10), "D3")]
    return pl.DataFrame(rows, schema=list(PHP_GROUPS), orient="row").cast(PHP_GROUPS)


def test_every_example_draws_distinct_negatives_of_its_own_segment():
    groups = _groups()
    frame, counts = build_php_examples(groups, "hp", PhpConfig(n_negatives=4))
    assert frame.height == N_ARTICLES * 4 and counts.examples == frame.height
    d4 = groups.filter(pl.col("group") == "D4").group_by("article_id", "segment_no").agg(d4="linked_id")
    checked = frame.join(d4, on=["article_id", "segment_no"])
    assert checked.height == frame.height
    for row in checked.iter_rows(named=True):
        negatives = row["neg_ids"]
        if row["segment_no"] == 2:  # 9 D4: 4 distinct
            assert len(set(negatives)) == 4 and set(negatives) <= set(row["d4"]) and not row["with_replacement"]
        else:  # one D4, repeated
            assert negatives == row["d4"] * 4 and row["with_replacement"]
    assert counts.with_replacement == N_ARTICLES * 3
    firsts = frame.filter(pl.col("segment_no") == 2)["neg_ids"].list.first()
    assert firsts.n_unique() > 5  # the draws differ between segments (not one fixed order)


def test_random_fill_never_takes_a_linked_article_in_a_large_universe():
    groups = _groups().filter(pl.col("group") != "D2")  # MRDS has no D2 anywhere
    config = PhpConfig(n_negatives=3, fill_negatives="lower+random")
    frame, counts = build_php_examples(groups.filter(pl.col("group").is_in(["D1"])), "mrds", config)
    assert counts.filled_from_random == N_ARTICLES and counts.positives_without_negatives == 0
    linked = groups.filter(pl.col("group") == "D1").group_by("article_id").agg(linked="linked_id")
    for row in frame.join(linked, on="article_id").iter_rows(named=True):
        assert len(row["neg_ids"]) == 3 and not row["with_replacement"]
        assert row["article_id"] not in row["neg_ids"] and not set(row["neg_ids"]) & set(row["linked"])
