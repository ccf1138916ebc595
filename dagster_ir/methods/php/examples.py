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

D4 and the paper's contradiction (section 3.1). The paper defines D4 as "Asymmetric linked
documents not in segment s: There exists a unidirectional hyperlink from d to d_i but a_i does not
appears in the segment s. i.e., d -> d_i and a_i not in s", and then states "D1 u D2 u D3 u D4 = D,
D_i n D_j = {} if i != j". The two cannot both hold: a d_i that links back to d (d <-> d_i) and whose
anchor a_i is not in s fits no group's definition, yet D is said to be covered. `php_groups` keeps the
covering rule (such links are D4: every linked document not linked from s), which is
`d4_rule="cover"` (the default, and the `paper` profile's, since HP's negatives come only from D4).
`d4_rule="literal"` follows the definition instead: those bidirectional links are dropped from D4
(they are in no group, so they are neither HP negatives nor "lower" fillers); it needs the link
graph's `reciprocal` flag, so `build_php_examples` then takes `link_graph`. The rows dropped are
counted (`d4_dropped`).
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
from dagster_ir.schemas import LINK_GRAPH, PHP_EXAMPLES, PHP_GROUPS, validate


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
    d4_dropped: int  # D4 rows of bidirectional links left out (d4_rule "literal")
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
    link_graph: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, ExampleCounts]:
    """PHP_EXAMPLES rows of one stage (see the module docstring), sorted by (d, s, positive).

    `link_graph` (LINK_GRAPH) is needed only by `d4_rule="literal"`.
    """
    validate(groups, PHP_GROUPS, "php_groups")
    positive_groups, negative_groups = stage_groups(stage)
    groups, d4_dropped = apply_d4_rule(groups, config.d4_rule, link_graph)
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
        d4_dropped=d4_dropped,
        sampled_out=sampled_out,
    )
    return frame, counts



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

