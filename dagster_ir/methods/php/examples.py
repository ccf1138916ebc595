"""PHP examples: one per (d, s, positive) with n negatives of the same (d, s) (`build_php_examples`).

Negatives are drawn by a generator seeded from (seed, stage, d, s), so the table depends on content
only. When (d, s) has fewer negatives than n, every negative is used and the list is filled by
cycling through them in a fresh random order (the paper's repeated sampling); such examples are
flagged `with_replacement` and counted. A (d, s) without negatives gives no example, unless
`fill_negatives` says where else to take them (not in the paper; for small dumps, where few
segments hold two groups - the bundled sample has one SHP segment and no MRDS one):
"lower" takes the segment's links of the groups below the stage's negatives (SHP: D4, MRDS: D3
then D4), "lower+random" then articles of the link graph that d does not link to. Both keep the
paper's order D1 > D2 > D3 > D4 > unlinked, so a positive still outranks every negative it meets.
"""

from __future__ import annotations

import math
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
from dagster_ir.schemas import PHP_EXAMPLES, PHP_GROUPS, validate


@dataclass(frozen=True)
class ExampleCounts:
    """What building one stage's examples did."""

    stage: str
    examples: int  # rows of the examples table
    segments: int  # distinct (d, s) queries
    with_replacement: int  # examples whose negatives repeat (fewer than n available)
    positives_without_negatives: int  # (d, s, positive) dropped: no negative in s
    filled_from_lower: int  # examples whose negatives come from lower groups (fill_negatives)
    filled_from_random: int  # examples whose negatives are articles d does not link to (fill_negatives)
    excluded_rows: int  # php_groups rows left out (articles of evaluation queries)
    sampled_out: int  # examples dropped by max_examples


def stage_groups(stage: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(positive groups, negative groups) of a stage."""
    if stage not in STAGES:
        raise ValueError(f"unknown PHP stage {stage!r}: choose from {STAGE_ORDER}")
    return STAGES[stage]


def build_php_examples(
    groups: pl.DataFrame,
    stage: str,
    config: PhpConfig,
    exclude_articles: Iterable[str] = (),
) -> tuple[pl.DataFrame, ExampleCounts]:
    """PHP_EXAMPLES rows of one stage (see the module docstring), sorted by (d, s, positive)."""
    validate(groups, PHP_GROUPS, "php_groups")
    positive_groups, negative_groups = stage_groups(stage)
    excluded = pl.Series(sorted(set(exclude_articles)), dtype=pl.String)
    keep = ~pl.col("article_id").is_in(excluded.implode()) & ~pl.col("linked_id").is_in(excluded.implode())
    kept = groups.filter(keep)
    lower_groups = GROUP_ORDER[max(GROUP_ORDER.index(g) for g in negative_groups) + 1:]
    per_segment = (
        kept.group_by("article_id", "segment_no")
        .agg(
            positives=pl.col("linked_id").filter(pl.col("group").is_in(positive_groups)).sort(),
            negatives=pl.col("linked_id").filter(pl.col("group").is_in(negative_groups)).sort(),
            lower=pl.col("linked_id").filter(pl.col("group").is_in(lower_groups)).unique().sort(),
        )
        .filter(pl.col("positives").list.len() > 0)
        .sort("article_id", "segment_no")
    )
    universe, linked_from = [], {}
    if config.fill_negatives == "lower+random":
        universe = sorted(set(kept["article_id"]) | set(kept["linked_id"]))
        linked_from = {a: set(ids) for a, ids in kept.group_by("article_id").agg("linked_id").iter_rows()}
    rows, dropped, from_lower, from_random = [], 0, 0, 0
    for article, segment, positives, negatives, lower in per_segment.iter_rows():
        source = None
        if not negatives and config.fill_negatives != "none" and lower:
            negatives, source = lower, "lower"
        if not negatives and config.fill_negatives == "lower+random":
            negatives = [a for a in universe if a != article and a not in linked_from.get(article, ())]
            source = "random"
        if not negatives:
            dropped += len(positives)
            continue
        rng = np.random.default_rng(seed_of(config.train.seed, stage, article, str(segment)))
        for positive in positives:
            chosen, repeated = _draw_negatives(negatives, config.n_negatives, rng)
            rows.append((stage, article, segment, positive, chosen, repeated))
        from_lower += len(positives) if source == "lower" else 0
        from_random += len(positives) if source == "random" else 0
    frame = pl.DataFrame(rows, schema=PHP_EXAMPLES, orient="row")
    frame, sampled_out = _cap(frame, config.max_examples, config.train.seed)
    counts = ExampleCounts(
        stage=stage,
        examples=frame.height,
        segments=frame.select("article_id", "segment_no").n_unique() if frame.height else 0,
        with_replacement=int(frame["with_replacement"].sum()),
        positives_without_negatives=dropped,
        filled_from_lower=from_lower,
        filled_from_random=from_random,
        excluded_rows=groups.height - kept.height,
        sampled_out=sampled_out,
    )
    return frame, counts



def _draw_negatives(negatives: list[str], n: int, rng: np.random.Generator) -> tuple[list[str], bool]:
    """n negatives: a sample without replacement, or every one cycled in random orders when too few."""
    if len(negatives) >= n:
        return [negatives[i] for i in rng.choice(len(negatives), size=n, replace=False)], False
    rounds = math.ceil(n / len(negatives))
    order = np.concatenate([rng.permutation(len(negatives)) for _ in range(rounds)])[:n]
    return [negatives[i] for i in order], True


def _cap(frame: pl.DataFrame, max_examples: int | None, seed: int) -> tuple[pl.DataFrame, int]:
    if max_examples is None or frame.height <= max_examples:
        return frame, 0
    chosen = np.sort(np.random.default_rng(seed).choice(frame.height, size=max_examples, replace=False))
    return frame[chosen], frame.height - max_examples

