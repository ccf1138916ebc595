"""The in-memory PHP example builder as it was before issue #18 (commit 21db7bb), kept as the reference.

`dagster_ir.methods.php.examples.build_php_examples` now reads scans and applies `max_examples` first;
without a binding cap its table and counts must equal this builder's (tests/.../test_php_examples_bounded.py).
It works on whole in-memory frames and draws its cap as NumPy row indices of the whole built table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl

from dagster_ir.methods.php.config import (
    GROUP_ORDER,
    STAGE_ORDER,
    STAGES,
    PhpConfig,
    seed_of,
)
from dagster_ir.schemas import LINK_GRAPH, PHP_EXAMPLES, PHP_GROUPS, validate


@dataclass(frozen=True)
class ReferenceCounts:
    """What building one stage's examples did."""

    stage: str
    examples: int  # rows of the examples table
    segments: int  # distinct (d, s) queries
    with_replacement: int  # examples whose negatives repeat (fewer than n available)
    positives_without_negatives: int  # (d, s, positive) dropped: no negative in s
    filled_from_lower: int  # examples whose negatives come from lower groups (fill_negatives)
    filled_from_random: int  # examples whose negatives are articles d does not link to (fill_negatives)
    excluded_rows: int  # php_groups rows left out (articles of evaluation queries)
    d4_dropped: int  # D4 rows of bidirectional links left out (d4_rule "literal")
    sampled_out: int  # examples dropped by max_examples


def stage_groups(stage: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(positive groups, negative groups) of a stage."""
    if stage not in STAGES:
        raise ValueError(f"unknown PHP stage {stage!r}: choose from {STAGE_ORDER}")
    return STAGES[stage]


def reference_php_examples(
    groups: pl.DataFrame,
    stage: str,
    config: PhpConfig,
    exclude_articles: Iterable[str] = (),
    link_graph: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, ReferenceCounts]:
    """PHP_EXAMPLES rows of one stage (see the module docstring), sorted by (d, s, positive).

    Vectorised: every draw is a hash of (seed, stage, d, s, positive, candidate), so there is no
    Python loop over articles and the work grows with the rows, not with articles x segments.

    `link_graph` (LINK_GRAPH) is needed only by `d4_rule="literal"`.
    """
    validate(groups, PHP_GROUPS, "php_groups")
    positive_groups, negative_groups = stage_groups(stage)
    groups, d4_dropped = apply_d4_rule(groups, config.d4_rule, link_graph)
    excluded = pl.Series(sorted(set(exclude_articles)), dtype=pl.String)
    keep = ~pl.col("article_id").is_in(excluded.implode()) & ~pl.col("linked_id").is_in(excluded.implode())
    kept = groups.filter(keep)
    lower_groups = GROUP_ORDER[max(GROUP_ORDER.index(g) for g in negative_groups) + 1 :]
    seg = ["article_id", "segment_no"]
    salt = seed_of(config.train.seed, stage) % (1 << 63)
    positives = kept.filter(pl.col("group").is_in(positive_groups)).select(*seg, pos_id="linked_id").unique()
    own = kept.filter(pl.col("group").is_in(negative_groups)).select(*seg, candidate="linked_id").unique()
    # Where each segment's negatives come from: its own negative groups, else the fills in order.
    sources = [own.with_columns(source=pl.lit(_OWN))]
    if config.fill_negatives != "none":
        lower = kept.filter(pl.col("group").is_in(lower_groups)).select(*seg, candidate="linked_id").unique()
        sources.append(lower.join(own, on=seg, how="anti").with_columns(source=pl.lit("lower")))
    pool = pl.concat(sources)
    source_of = pool.select(*seg, "source").unique()
    examples = positives.join(pool, on=seg)  # (d, s, positive, candidate, source)
    if config.fill_negatives == "lower+random":
        wanting = positives.join(source_of, on=seg, how="anti")
        examples = pl.concat([examples, _random_candidates(kept, wanting, config.n_negatives, salt)])
    frame = _draw(examples, config.n_negatives, salt).with_columns(stage=pl.lit(stage)).select(list(PHP_EXAMPLES))
    frame = frame.cast(PHP_EXAMPLES).sort("article_id", "segment_no", "pos_id")  # type: ignore[arg-type]
    from_source = dict(examples.select(*_EXAMPLE, "source").unique().group_by("source").len().iter_rows())
    drawn = frame.height
    frame, sampled_out = _cap(frame, config.max_examples, config.train.seed)
    counts = ReferenceCounts(
        stage=stage,
        examples=frame.height,
        segments=frame.select("article_id", "segment_no").n_unique() if frame.height else 0,
        with_replacement=int(frame["with_replacement"].sum()),
        positives_without_negatives=positives.height - drawn,
        filled_from_lower=from_source.get("lower", 0),
        filled_from_random=from_source.get("random", 0),
        excluded_rows=groups.height - kept.height,
        d4_dropped=d4_dropped,
        sampled_out=sampled_out,
    )
    return frame, counts


_OWN = "own"
_EXAMPLE = ["article_id", "segment_no", "pos_id"]


def _draw(examples: pl.DataFrame, n: int, salt: int) -> pl.DataFrame:
    """n negatives per (d, s, positive) from its candidates: a seeded sample without replacement, or
    every candidate cycled in fresh random orders when there are fewer than n (`with_replacement`)."""
    sizes = examples.group_by(_EXAMPLE).agg(available=pl.len())
    rounds = sizes.with_columns(round=pl.int_ranges(0, (n + pl.col("available") - 1) // pl.col("available")))
    drawn = (
        examples.join(rounds.explode("round"), on=_EXAMPLE)
        .with_columns(key=pl.struct(*_EXAMPLE, "candidate", "round").hash(salt))
        .sort(*_EXAMPLE, "round", "key")
        .group_by(_EXAMPLE, maintain_order=True)
        .agg(neg_ids=pl.col("candidate").head(n), with_replacement=pl.col("available").first() < n)
    )
    return drawn


def _random_candidates(kept: pl.DataFrame, wanting: pl.DataFrame, n: int, salt: int) -> pl.DataFrame:
    """Candidates for positives whose segment has no negative: articles of the graph that d neither is
    nor links to. Each (d, s, positive) reads a window of n + deg(d) + 1 articles of the universe,
    starting at a place its hash gives, so no row lists the whole universe (it is the window when the
    universe is that small)."""
    if wanting.height == 0:
        return wanting.with_columns(candidate=pl.lit(None, pl.String), source=pl.lit("random"))
    universe = (
        pl.concat([kept.select(a="article_id"), kept.select(a="linked_id")])
        .unique()
        .sort("a")
        .with_row_index("position")
    )
    size = universe.height
    linked = kept.select("article_id", candidate="linked_id").unique()
    degree = linked.group_by("article_id").agg(degree=pl.len())
    windows = (
        wanting.join(degree, on="article_id", how="left")
        .with_columns(
            start=(pl.struct(*_EXAMPLE).hash(salt) % size).cast(pl.Int64),
            width=pl.min_horizontal(pl.col("degree").fill_null(0) + n + 1, pl.lit(size)),
        )
        .with_columns(offset=pl.int_ranges(0, "width"))
        .explode("offset")
        .with_columns(position=((pl.col("start") + pl.col("offset")) % size).cast(pl.UInt32))
        .join(universe, on="position")
        .select(*_EXAMPLE, candidate="a")
    )
    return (
        windows.filter(pl.col("candidate") != pl.col("article_id"))
        .join(linked, on=["article_id", "candidate"], how="anti")
        .with_columns(source=pl.lit("random"))
    )


def apply_d4_rule(groups: pl.DataFrame, rule: str, link_graph: pl.DataFrame | None) -> tuple[pl.DataFrame, int]:
    """`groups` under a D4 rule: "cover" keeps them; "literal" drops D4 rows whose link is bidirectional."""
    if rule == "cover":
        return groups, 0
    if rule != "literal":
        raise ValueError(f"d4_rule: choose 'cover' or 'literal', got {rule!r}")
    if link_graph is None:
        raise ValueError("build_php_examples: d4_rule 'literal' needs the link graph (its reciprocal flag)")
    validate(link_graph, LINK_GRAPH, "wiki_link_graph")
    both_ways = link_graph.filter(pl.col("reciprocal")).select(article_id="src_id", linked_id="dst_id", both=True)
    marked = groups.join(both_ways, on=["article_id", "linked_id"], how="left")
    drop = (pl.col("group") == "D4") & pl.col("both").fill_null(False)
    kept = marked.filter(~drop).drop("both")
    return kept, groups.height - kept.height


def _cap(frame: pl.DataFrame, max_examples: int | None, seed: int) -> tuple[pl.DataFrame, int]:
    if max_examples is None or frame.height <= max_examples:
        return frame, 0
    chosen = np.sort(np.random.default_rng(seed).choice(frame.height, size=max_examples, replace=False))
    return frame[chosen], frame.height - max_examples
