"""PHP examples: stage-to-group mapping, negatives with repetition, exclusions, determinism."""

from collections import Counter
from dataclasses import replace

import polars as pl
import pytest

from dagster_ir.methods.php import PhpConfig, ablation_config, build_php_examples, stage_groups
from dagster_ir.schemas import PHP_EXAMPLES, PHP_GROUPS


def _groups(rows):
    return pl.DataFrame(rows, schema=list(PHP_GROUPS), orient="row").cast(PHP_GROUPS)


# d = "a", segment 1 links b (D1), c (D2), e (D3); f is linked from another segment (D4).
GROUPS = _groups(
    [
        ("a", 1, "b", "D1"),
        ("a", 1, "c", "D2"),
        ("a", 1, "e", "D3"),
        ("a", 1, "f", "D4"),
        ("a", 2, "f", "D3"),
        ("a", 2, "b", "D4"),
        ("a", 2, "c", "D4"),
        ("a", 2, "e", "D4"),
    ]
)


def _by_positive(frame):
    return {row["pos_id"]: row["neg_ids"] for row in frame.filter(pl.col("segment_no") == 1).iter_rows(named=True)}


def test_stages_map_to_the_papers_groups():
    assert stage_groups("hp") == (("D1", "D2", "D3"), ("D4",))
    assert stage_groups("shp") == (("D1", "D2"), ("D3",))
    assert stage_groups("mrds") == (("D1",), ("D2",))
    with pytest.raises(ValueError, match="unknown PHP stage 'xyz'"):
        stage_groups("xyz")
    config = PhpConfig(n_negatives=2)
    hp, _ = build_php_examples(GROUPS, "hp", config)
    assert _by_positive(hp) == {"b": ["f", "f"], "c": ["f", "f"], "e": ["f", "f"]}
    assert set(hp.filter(pl.col("segment_no") == 2)["pos_id"]) == {"f"}  # D3 of segment 2 against its D4
    negatives = hp.filter(pl.col("segment_no") == 2)["neg_ids"].item()
    assert len(set(negatives)) == 2 and set(negatives) <= {"b", "c", "e"}  # 2 of its 3 D4s, no repeat
    shp, _ = build_php_examples(GROUPS, "shp", config)
    assert _by_positive(shp) == {"b": ["e", "e"], "c": ["e", "e"]} and shp.height == 2
    mrds, _ = build_php_examples(GROUPS, "mrds", config)
    assert _by_positive(mrds) == {"b": ["c", "c"]} and mrds.schema == pl.Schema(PHP_EXAMPLES)


def test_too_few_negatives_are_cycled_and_counted():
    frame, counts = build_php_examples(GROUPS, "hp", PhpConfig(n_negatives=5))
    second = frame.filter(pl.col("segment_no") == 2)["neg_ids"].item()
    assert sorted(Counter(second).values()) == [1, 2, 2] and set(second) == {"b", "c", "e"}  # all used, evenly
    assert counts.with_replacement == 4 and frame["with_replacement"].all()  # 1 or 3 negatives < 5
    enough, counts = build_php_examples(GROUPS, "hp", PhpConfig(n_negatives=2))
    assert enough.filter(pl.col("segment_no") == 2)["with_replacement"].to_list() == [False]
    assert counts.with_replacement == 3


def test_segments_without_negatives_give_no_examples_and_are_counted():
    groups = _groups([("a", 1, "b", "D1"), ("a", 1, "c", "D1")])
    frame, counts = build_php_examples(groups, "mrds", PhpConfig(n_negatives=2))
    assert frame.height == 0 and frame.schema == pl.Schema(PHP_EXAMPLES)
    assert counts.positives_without_negatives == 2 and counts.examples == 0


def test_excluded_articles_leave_as_queries_and_as_documents():
    frame, counts = build_php_examples(GROUPS, "hp", PhpConfig(n_negatives=2), exclude_articles=["c"])
    assert "c" not in frame["pos_id"].to_list()
    assert all("c" not in negs for negs in frame["neg_ids"].to_list())
    assert counts.excluded_rows == 2
    everything, _ = build_php_examples(GROUPS, "hp", PhpConfig(n_negatives=2), exclude_articles=["a"])
    assert everything.height == 0


def test_examples_depend_on_content_and_seed_not_row_order():
    config = PhpConfig(n_negatives=3)
    first, _ = build_php_examples(GROUPS, "hp", config)
    shuffled, _ = build_php_examples(GROUPS.reverse(), "hp", config)
    assert first.equals(shuffled)
    others = [
        build_php_examples(GROUPS, "hp", replace(config, train=replace(config.train, seed=s)))[0] for s in range(1, 6)
    ]
    assert any(not o.equals(first) for o in others)


def test_max_examples_takes_a_seeded_sample():
    capped, counts = build_php_examples(GROUPS, "hp", PhpConfig(n_negatives=2, max_examples=2))
    assert capped.height == 2 and counts.sampled_out == 2
    again, _ = build_php_examples(GROUPS, "hp", PhpConfig(n_negatives=2, max_examples=2))
    assert capped.equals(again)


def test_ablations_are_named_configurations():
    base = PhpConfig()
    assert ablation_config(base, "shp-only").stages == ("shp",)
    assert ablation_config(base, "no-mlm").mlm_weight == 0.0
    assert ablation_config(base, "anchor-0.15").anchor_mask_prob == 0.15
    assert ablation_config(base, "negatives-8").n_negatives == 8
    hp, _ = build_php_examples(GROUPS, "hp", ablation_config(replace(base, n_negatives=2), "negatives-1"))
    assert hp["neg_ids"].list.len().unique().to_list() == [1]  # the examples follow the ablation's n
    for bad in ("xyz-only", "anchor-high", "mlm", "negatives-many"):
        with pytest.raises(ValueError, match="unknown PHP ablation"):
            ablation_config(base, bad)
    with pytest.raises(ValueError, match="stages"):
        PhpConfig(stages=("hp", "nope"))


def test_fill_negatives_takes_lower_groups_then_unlinked_articles():
    # Segment 1 of "a": D1 "b" and D4 "f", no D2 (MRDS) and no D3 (SHP). "x" links "y" only (D1).
    groups = _groups(
        [("a", 1, "b", "D1"), ("a", 2, "f", "D3"), ("a", 1, "f", "D4"), ("a", 2, "b", "D4"), ("x", 1, "y", "D1")]
    )
    strict, counts = build_php_examples(groups, "mrds", PhpConfig(n_negatives=2))
    assert strict.height == 0 and counts.positives_without_negatives == 2
    lower, counts = build_php_examples(groups, "mrds", PhpConfig(n_negatives=2, fill_negatives="lower"))
    assert _by_positive(lower) == {"b": ["f", "f"]}  # D4 of the segment stands in for the missing D2
    assert counts.filled_from_lower == 1 and counts.positives_without_negatives == 1  # "x" has no lower group
    both, counts = build_php_examples(groups, "mrds", PhpConfig(n_negatives=2, fill_negatives="lower+random"))
    x_negatives = both.filter(pl.col("article_id") == "x")["neg_ids"].item()
    assert set(x_negatives) <= {"a", "b", "f"}  # articles of the graph that x neither is nor links to
    assert counts.filled_from_random == 1 and counts.positives_without_negatives == 0
    # The segment's own negative group always wins over a fill.
    shp, counts = build_php_examples(GROUPS, "shp", PhpConfig(n_negatives=2, fill_negatives="lower+random"))
    assert _by_positive(shp) == {"b": ["e", "e"], "c": ["e", "e"]} and counts.filled_from_lower == 0
    with pytest.raises(ValueError, match="fill_negatives"):
        PhpConfig(fill_negatives="random")


def _graph(edges):
    from dagster_ir.schemas import LINK_GRAPH

    rows = [(src, dst, 1, 1, both, 1 if both else None) for src, dst, both in edges]
    return pl.DataFrame(rows, schema=list(LINK_GRAPH), orient="row").cast(LINK_GRAPH)


def test_d4_rule_literal_drops_bidirectional_links_outside_s_and_cover_keeps_them():
    # a <-> b and a <-> c link both ways, a -> e and a -> f one way. Segment 2's D4 holds b, c (both ways)
    # and e (one way); segment 1's D4 holds f (one way).
    graph = _graph([("a", "b", True), ("a", "c", True), ("a", "e", False), ("a", "f", False)])
    cover = PhpConfig(n_negatives=3)
    literal = replace(cover, d4_rule="literal")
    hp_cover, counts_cover = build_php_examples(GROUPS, "hp", cover, link_graph=graph)
    hp_literal, counts_literal = build_php_examples(GROUPS, "hp", literal, link_graph=graph)
    second = lambda frame: frame.filter(pl.col("segment_no") == 2)["neg_ids"].item().to_list()  # noqa: E731
    assert sorted(second(hp_cover)) == ["b", "c", "e"]
    assert second(hp_literal) == ["e", "e", "e"]  # only the unidirectional e is D4 by the definition
    assert _by_positive(hp_literal) == _by_positive(hp_cover) == {p: ["f"] * 3 for p in "bce"}
    assert (counts_cover.d4_dropped, counts_literal.d4_dropped) == (0, 2)
    with pytest.raises(ValueError, match="needs the link graph"):
        build_php_examples(GROUPS, "hp", literal)
    with pytest.raises(ValueError, match="d4_rule"):
        PhpConfig(d4_rule="strict")
