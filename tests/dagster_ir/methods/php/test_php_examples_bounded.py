"""The bounded PHP example builder (scans in, `max_examples` applied first) against the in-memory one.

Made-up dumps: random links between 80 articles (some segments without links, reciprocal links),
grouped by the real `assign_php_groups`, stored as Parquet and read back as scans. Without a binding
cap the table and every count equal the pre-#18 builder's (`php_examples_reference`); with one it keeps
exactly `max_examples` of the uncapped examples, the ones of smallest hash of (seed, stage, d, s, positive).
"""

from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from php_examples_reference import reference_php_examples

from dagster_ir.methods.php import D4_RULES, FILL_NEGATIVES, STAGE_ORDER, PhpConfig, build_php_examples
from dagster_ir.methods.php.config import seed_of
from dagster_ir.schemas import LINKS, PHP_GROUPS
from dagster_ir.wiki.graph import assign_php_groups, build_link_graph

KEY = ["article_id", "segment_no", "pos_id"]
EXCLUDED = ["a7", "a13"]


def _links(articles: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(articles):
        for segment in range(1, int(rng.integers(1, 5)) + 1):
            for j in rng.choice(articles, size=int(rng.integers(0, 4)), replace=False):
                if j != i:
                    rows.append((f"a{i}", segment, f"a{j}"))
        if i % 3 == 0:  # reciprocal links: a_i <-> a_{i+1} <-> a_{i+3}, from leads and from later segments
            rows += [(f"a{i}", 1, f"a{(i + 1) % articles}"), (f"a{(i + 1) % articles}", 2, f"a{i}")]
            rows += [
                (f"a{(i + 1) % articles}", 1, f"a{(i + 3) % articles}"),
                (f"a{(i + 3) % articles}", 1, f"a{(i + 1) % articles}"),
            ]
    return pl.DataFrame([(s, g, "x", 0, 1, d, d) for s, g, d in rows], schema=LINKS, orient="row")


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(php_groups, wiki_link_graph) of a made-up dump, as scans of Parquet files."""
    folder: Path = tmp_path_factory.mktemp("php_examples")
    links = _links(80, seed=5)
    graph = build_link_graph(links)
    groups = assign_php_groups(links, graph)
    assert set(groups["group"]) == {"D1", "D2", "D3", "D4"}
    groups.write_parquet(folder / "groups.parquet", row_group_size=64)
    graph.write_parquet(folder / "graph.parquet", row_group_size=64)
    return pl.scan_parquet(folder / "groups.parquet"), pl.scan_parquet(folder / "graph.parquet")


def _seeded(config: PhpConfig, seed: int) -> PhpConfig:
    return replace(config, train=replace(config.train, seed=seed))


@pytest.mark.parametrize("fill", FILL_NEGATIVES)
@pytest.mark.parametrize("rule", D4_RULES)
def test_equals_the_in_memory_builder_when_no_cap_binds(dump, fill, rule) -> None:
    groups, graph = dump
    for stage in STAGE_ORDER:
        config = PhpConfig(n_negatives=3, fill_negatives=fill, d4_rule=rule)
        expected, counts = reference_php_examples(groups.collect(), stage, config, EXCLUDED, graph.collect())
        assert expected.height > 0 or (stage != "hp" and fill == "none")
        # the whole table (no cap), and a cap just at the number of examples (positives > cap: the hash
        # passes run, find no more than the cap and keep everything)
        for cap in (None, expected.height, expected.height + 1000):
            capped = replace(config, max_examples=cap)
            for frame_in, graph_in in ((groups, graph), (groups.collect(), graph.collect())):
                frame, bounded = build_php_examples(frame_in, stage, capped, EXCLUDED, link_graph=graph_in)
                assert frame.equals(expected), (stage, fill, rule, cap)
                assert asdict(bounded) == asdict(counts), (stage, fill, rule, cap)


@pytest.mark.parametrize(("stage", "fill"), [("hp", "lower+random"), ("shp", "lower"), ("mrds", "none")])
def test_a_binding_cap_keeps_the_examples_of_smallest_key_hash(dump, stage, fill) -> None:
    groups, graph = dump
    config = PhpConfig(n_negatives=3, fill_negatives=fill)
    full, full_counts = build_php_examples(groups, stage, config, EXCLUDED)
    assert full.height >= 20
    cap = full.height // 4
    capped, counts = build_php_examples(groups, stage, replace(config, max_examples=cap), EXCLUDED)
    assert capped.height == cap == counts.examples
    # each kept example is the uncapped table's row for its key
    assert capped.join(full, on=KEY, how="anti").height == 0
    assert capped.equals(full.join(capped.select(KEY), on=KEY, how="semi"))
    # the keys: those of the uncapped table with the smallest hash of (seed, stage, d, s, positive)
    salt = seed_of(config.train.seed, stage, "max_examples") % (1 << 63)
    smallest = full.select(KEY).with_columns(h=pl.struct(KEY).hash(salt)).sort("h", *KEY).head(cap)
    assert capped.select(KEY).equals(smallest.select(KEY).sort(KEY))
    positives = full_counts.examples + full_counts.positives_without_negatives
    assert counts.examples + counts.positives_without_negatives + counts.sampled_out == positives
    assert counts.sampled_out > 0 and counts.positives_without_negatives <= full_counts.positives_without_negatives
    again, _ = build_php_examples(groups.collect(), stage, replace(config, max_examples=cap), EXCLUDED)
    assert again.equals(capped)  # deterministic, scan or frame
    others = [
        build_php_examples(groups, stage, _seeded(replace(config, max_examples=cap), s), EXCLUDED)[0] for s in (1, 2, 3)
    ]
    assert any(not o.select(KEY).equals(capped.select(KEY)) for o in others)  # the seed chooses other keys
    for other, s in zip(others, (1, 2, 3)):
        uncapped, _ = build_php_examples(groups, stage, _seeded(config, s), EXCLUDED)
        assert other.height == cap and other.join(uncapped, on=KEY, how="anti").height == 0  # a subset


def test_cap_skips_keys_without_negatives_even_where_they_hash_smallest() -> None:
    # MRDS without fills: only a/1 has a D2 (c); the many D1 positives of x/1..x/40 have none.
    rows = [("a", 1, "b", "D1"), ("a", 1, "c", "D2"), ("a", 1, "e", "D1")]
    rows += [("x", s, f"y{s}", "D1") for s in range(1, 41)]
    groups = pl.DataFrame(rows, schema=list(PHP_GROUPS), orient="row").cast(PHP_GROUPS)
    for seed in range(5):
        config = _seeded(PhpConfig(n_negatives=2, max_examples=1), seed)
        frame, counts = build_php_examples(groups.lazy(), "mrds", config)
        assert (
            frame.height == 1 and frame["article_id"].item() == "a" and frame["neg_ids"].item().to_list() == ["c", "c"]
        )
        assert counts.examples + counts.positives_without_negatives + counts.sampled_out == 42
    # two keys with an example and a cap of 2: nothing is sampled out (the cap does not bind)
    frame, counts = build_php_examples(groups, "mrds", PhpConfig(n_negatives=2, max_examples=2))
    assert frame["pos_id"].to_list() == ["b", "e"] and (counts.positives_without_negatives, counts.sampled_out) == (
        40,
        0,
    )


def test_random_fill_leaves_out_an_article_that_links_to_every_other_one() -> None:
    # A tiny universe {a, b, c, z}: z links to all of it, so the random fill has nothing for z.
    rows = [("z", 1, "a", "D1"), ("z", 1, "b", "D1"), ("z", 2, "c", "D1"), ("a", 1, "b", "D1")]
    groups = pl.DataFrame(rows, schema=list(PHP_GROUPS), orient="row").cast(PHP_GROUPS)
    config = PhpConfig(n_negatives=2, fill_negatives="lower+random")
    expected, reference = reference_php_examples(groups, "mrds", config)
    for cap in (None, 1, 2):
        frame, counts = build_php_examples(groups.lazy(), "mrds", replace(config, max_examples=cap))
        assert set(frame["article_id"]) == {"a"} and frame.equals(expected)  # a: c or z, never b
        assert counts.positives_without_negatives + counts.sampled_out == 3
    assert reference.positives_without_negatives == 3


def test_many_small_passes_choose_the_same_keys(dump, monkeypatch) -> None:
    # Passes of at most 8 x max_examples keys (the floor lowered): the cut falls in later and other ranges.
    from dagster_ir.methods.php import examples

    groups, _ = dump
    runs = {}
    for floor in (examples._PASS_KEYS, 1):
        monkeypatch.setattr(examples, "_PASS_KEYS", floor)
        for seed in range(4):
            for cap in (1, 2, 5):
                config = _seeded(PhpConfig(n_negatives=2, max_examples=cap), seed)
                runs.setdefault((seed, cap), []).append(build_php_examples(groups, "mrds", config))
    for (seed, cap), ((one, one_counts), (many, many_counts)) in runs.items():
        assert one.height == cap and one.equals(many) and one_counts == many_counts, (seed, cap)
