"""PHP examples: one per (d, s, positive) with n negatives of the same (d, s) (`build_php_examples`).

Negatives are drawn by hashing (seed, stage, d, s, positive, candidate): each example takes the n
candidates of smallest hash, a seeded sample without replacement, vectorised over the whole table
(no Python loop over articles or segments), so the table depends on content only. When (d, s) has
fewer negatives than n, every negative is used and the list is filled by cycling through them in
fresh random orders (the paper's repeated sampling); such examples are flagged `with_replacement`
and counted. A (d, s) without negatives gives no example, unless
`fill_negatives` says where else to take them (not in the paper; for small dumps, where few
segments hold two groups - the bundled sample has one SHP segment and no MRDS one):
"lower" takes the segment's links of the groups below the stage's negatives (SHP: D4, MRDS: D3
then D4), "lower+random" then articles of the link graph that d does not link to (each example reads a
window of n + deg(d) + 1 articles of the graph at a hashed start, so it never lists them all). Both keep the
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

Bounded memory. `build_php_examples` takes LazyFrames (scans of the stored Parquet) as well
as DataFrames and applies `max_examples` first: it chooses the (d, s, positive) keys, then reads only
their segments' rows (value filters on the scan) and draws their negatives, so what it holds is set by `max_examples`,
not by `php_groups` (of the order of 10^8-10^9 rows on enwiki). The keys are those with an example
(a negative of their own, or a fill) of smallest hash of (seed, stage, d, s, positive) (ties by the key),
found by streaming passes over consecutive ranges of that hash (`_choose`); an example's negatives are
drawn as above, so a kept example is the one the uncapped table has for its key. The random fill's
universe (the articles of the groups) and d's linked articles are queries over the groups
(O(articles)). When the cap does not bind, every example is kept: the table is the one the in-memory
builder gave (tested). Without a cap (`max_examples=None`) every example is built, so the table grows
with the dump by definition. Deviation (also in the README): when the cap binds, the kept examples are the
hash-smallest keys, not a NumPy draw of row indices of the whole table as before; `sampled_out` then
counts the positives past the cut (not examined for negatives) and `positives_without_negatives` those
before it, so examples + positives_without_negatives + sampled_out = positives as before. Memory that
still grows with the dump: the universe ("lower+random" only; about 150 bytes per article in
Polars' streaming unique), and under d4_rule "literal" the join with the graph's bidirectional links.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

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
    positives_without_negatives: int  # (d, s, positive) dropped: no negative in s (a binding cap: before the cut)
    filled_from_lower: int  # examples whose negatives come from lower groups (fill_negatives; of those kept)
    filled_from_random: int  # examples whose negatives are articles d does not link to (fill_negatives; kept)
    excluded_rows: int  # php_groups rows left out (articles of evaluation queries)
    d4_dropped: int  # D4 rows of bidirectional links left out (d4_rule "literal")
    sampled_out: int  # positives left out by max_examples: past the cut, not examined for negatives


def stage_groups(stage: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(positive groups, negative groups) of a stage."""
    if stage not in STAGES:
        raise ValueError(f"unknown PHP stage {stage!r}: choose from {STAGE_ORDER}")
    return STAGES[stage]


def build_php_examples(
    groups: pl.DataFrame | pl.LazyFrame,
    stage: str,
    config: PhpConfig,
    exclude_articles: Iterable[str] = (),
    link_graph: pl.DataFrame | pl.LazyFrame | None = None,
) -> tuple[pl.DataFrame, ExampleCounts]:
    """PHP_EXAMPLES rows of one stage (see the module docstring), sorted by (d, s, positive).

    Vectorised: every draw is a hash of (seed, stage, d, s, positive, candidate), so there is no
    Python loop over articles and the work grows with the rows, not with articles x segments.
    `groups` may be a scan: with `max_examples` set, only the chosen keys' segments are read into memory.

    `link_graph` (LINK_GRAPH) is needed only by `d4_rule="literal"`.
    """
    groups = groups.lazy()
    validate(groups, PHP_GROUPS, "php_groups")
    positive_groups, negative_groups = stage_groups(stage)
    ruled, d4_dropped = apply_d4_rule(groups, config.d4_rule, link_graph)
    excluded = pl.Series(sorted(set(exclude_articles)), dtype=pl.String)
    keep = ~pl.col("article_id").is_in(excluded.implode()) & ~pl.col("linked_id").is_in(excluded.implode())
    kept = ruled.filter(keep)
    lower_groups = GROUP_ORDER[max(GROUP_ORDER.index(g) for g in negative_groups) + 1 :]
    salt = seed_of(config.train.seed, stage) % (1 << 63)
    ruled_rows, kept_rows, positive_rows = _collect(
        ruled.select(
            pl.len().alias("rows"),
            keep.sum().alias("kept"),
            (keep & pl.col("group").is_in(positive_groups)).sum().alias("positives"),
        )
    ).row(0)
    positives = kept.filter(pl.col("group").is_in(positive_groups)).select(*_SEG, pos_id="linked_id")
    scope = _Scope(kept, negative_groups, lower_groups, config.fill_negatives)
    cap = config.max_examples
    if cap is None or positive_rows <= cap:  # every positive is a key: no cap can bind
        chosen = _collect(positives.unique())
        considered, passed_over, binding = chosen.height, None, False
    else:
        cap_salt = seed_of(config.train.seed, stage, "max_examples") % (1 << 63)
        chosen, considered, passed_over, binding = _choose(
            positives, positive_rows, cap, cap_salt, scope, config.n_negatives
        )
    frame, from_source = _examples(scope, chosen.select(_EXAMPLE), config.n_negatives, salt)
    frame = frame.with_columns(stage=pl.lit(stage)).select(list(PHP_EXAMPLES))
    frame = frame.cast(PHP_EXAMPLES).sort("article_id", "segment_no", "pos_id")  # type: ignore[arg-type]
    if binding and frame.height != chosen.height:  # _eligible and _examples disagree: a bug, not bad input
        raise RuntimeError(f"build_php_examples: {chosen.height} keys chosen but {frame.height} examples drawn")
    if binding:  # positives before the cut without an example; those after it were not examined
        without, sampled_out = passed_over, positive_rows - considered
    else:
        without, sampled_out = considered - frame.height, 0
    counts = ExampleCounts(
        stage=stage,
        examples=frame.height,
        segments=frame.select("article_id", "segment_no").n_unique() if frame.height else 0,
        with_replacement=int(frame["with_replacement"].sum()),
        positives_without_negatives=without,
        filled_from_lower=from_source.get("lower", 0),
        filled_from_random=from_source.get("random", 0),
        excluded_rows=ruled_rows - kept_rows,
        d4_dropped=d4_dropped,
        sampled_out=sampled_out,
    )
    return frame, counts


_OWN = "own"
_SEG = ["article_id", "segment_no"]
_EXAMPLE = ["article_id", "segment_no", "pos_id"]
_U64 = 1 << 64


def _collect(frame: pl.LazyFrame) -> pl.DataFrame:
    return frame.collect(engine="streaming")


class _Scope:
    """The kept groups (a LazyFrame) and the queries over them that a set of keys needs."""

    def __init__(self, kept: pl.LazyFrame, negative_groups, lower_groups, fill: str) -> None:
        self.kept, self.fill = kept, fill
        self.negative_groups, self.lower_groups = tuple(negative_groups), tuple(lower_groups)
        self._universe: pl.DataFrame | None = None

    def rows(self, keys: pl.DataFrame, groups: tuple[str, ...]) -> pl.DataFrame:
        """The kept rows of `groups` in the keys' segments.

        Filters by value lists (streamed; a semi-join there would hold the scanned side), then joins
        the few rows left. The `unique` copies the rows kept: a plain filter's result would keep the
        string buffers of every scanned morsel it took a row from (Polars' string views)."""
        segments = keys.select(_SEG).unique()
        near = _collect(
            self.kept.filter(
                pl.col("group").is_in(groups) & _among(segments, "article_id") & _among(segments, "segment_no")
            ).unique()
        )
        return near.join(segments, on=_SEG, how="semi")

    def linked(self, articles: pl.DataFrame) -> pl.DataFrame:
        """(article_id, candidate) of every article d of `articles` links to (in any group)."""
        return _collect(
            self.kept.filter(_among(articles, "article_id")).select("article_id", candidate="linked_id").unique()
        )

    def universe(self) -> pl.DataFrame:
        """The articles of the groups (as d or as d_i), sorted, with their position (O(articles))."""
        if self._universe is None:
            both = pl.concat([self.kept.select(a="article_id"), self.kept.select(a="linked_id")])
            self._universe = _collect(both.unique()).sort("a").with_row_index("position")
        return self._universe


def _among(frame: pl.DataFrame, column: str) -> pl.Expr:
    """pl.col(column) is one of the values of frame[column]."""
    return pl.col(column).is_in(frame[column].unique().implode())


def _sources(scope: _Scope, keys: pl.DataFrame) -> pl.DataFrame:
    """(d, s, candidate, source) of the keys' segments: their own negatives, else (fills) the lower groups."""
    rows = scope.rows(keys, scope.negative_groups + (scope.lower_groups if scope.fill != "none" else ()))
    own = rows.filter(pl.col("group").is_in(scope.negative_groups)).select(*_SEG, candidate="linked_id").unique()
    sources = [own.with_columns(source=pl.lit(_OWN))]
    if scope.fill != "none":
        lower = rows.filter(pl.col("group").is_in(scope.lower_groups)).select(*_SEG, candidate="linked_id").unique()
        sources.append(lower.join(own, on=_SEG, how="anti").with_columns(source=pl.lit("lower")))
    return pl.concat(sources)


def _examples(scope: _Scope, positives: pl.DataFrame, n: int, salt: int) -> tuple[pl.DataFrame, dict[str, int]]:
    """The drawn examples of the keys `positives` (d, s, positive) and how many came from each fill."""
    pool = _sources(scope, positives)
    examples = positives.join(pool, on=_SEG)  # (d, s, positive, candidate, source)
    if scope.fill == "lower+random":
        wanting = positives.join(pool.select(_SEG).unique(), on=_SEG, how="anti")
        examples = pl.concat([examples, _random_candidates(scope, wanting, n, salt)])
    from_source = dict(examples.select(*_EXAMPLE, "source").unique().group_by("source").len().iter_rows())
    return _draw(examples, n, salt), from_source


def _eligible(scope: _Scope, keys: pl.DataFrame, n: int) -> pl.Series:
    """Whether each key (d, s, positive) gets an example: a negative of its own, a lower fill, or an
    article of the universe that d neither is nor links to (the random fill's window then holds one)."""
    has = _sources(scope, keys).select(_SEG).unique().with_columns(ok=pl.lit(True))
    flags = keys.join(has, on=_SEG, how="left", maintain_order="left").with_columns(pl.col("ok").fill_null(False))
    if scope.fill == "lower+random" and not flags["ok"].all():
        rest = flags.filter(~pl.col("ok")).select("article_id").unique()
        closed = (
            scope.linked(rest)
            .group_by("article_id")
            .agg(closed=pl.len() + (~(pl.col("candidate") == pl.col("article_id")).any()).cast(pl.UInt32))
        )
        size = scope.universe().height
        flags = (
            flags.join(closed, on="article_id", how="left", maintain_order="left")
            .with_columns(ok=pl.col("ok") | (pl.col("closed").fill_null(1) < size))
            .drop("closed")
        )
    return flags["ok"]


_PASS_KEYS = 1 << 20  # keys one pass of `_choose` may hold (or 8 x max_examples, if more)


def _choose(
    positives: pl.LazyFrame, rows: int, cap: int, salt: int, scope: _Scope, n: int
) -> tuple[pl.DataFrame, int, int | None, bool]:
    """The `cap` keys with an example of smallest (hash of (d, s, positive), key), by streaming passes over
    consecutive ranges of the hash. A pass holds the keys of its range (at most about
    max(8 cap, `_PASS_KEYS`), 1 M); between passes only the keys with an example are kept (and the range
    holding the cut, whole), so where few keys have an example it takes more passes, not more memory.

    Returns (keys, positives considered: up to the cut when it binds, else all; positives before the cut
    without an example; whether the cap binds).
    """
    hashed = positives.with_columns(h=pl.struct(*_EXAMPLE).hash(salt))
    budget = max(8 * cap, _PASS_KEYS) / rows  # share of the positives one pass may hold
    chosen: list[pl.DataFrame] = []  # the keys with an example of the ranges before the cut's
    cut_range, found_before, without_before = None, 0, 0
    low, share, found, scanned = -1, min(1.0, 2 * cap / rows), 0, 0
    while True:
        high = _U64 - 1 if share >= 1.0 else int(share * _U64)
        in_range = pl.col("h") <= pl.lit(high, pl.UInt64)
        if low >= 0:
            in_range &= pl.col("h") > pl.lit(low, pl.UInt64)
        batch = _collect(hashed.filter(in_range).unique())  # unique: copies the rows (see _Scope.rows)
        batch = batch.with_columns(ok=_eligible(scope, batch.select(_EXAMPLE), n))
        eligible = int(batch["ok"].sum())
        if found < cap <= found + eligible:  # the cap-th example lies in this range
            cut_range, found_before, without_before = batch, found, scanned - found
        elif cut_range is None:
            chosen.append(batch.filter("ok"))
        found, scanned = found + eligible, scanned + batch.height
        if found > cap or share >= 1.0:
            break
        rate = max(found, 1) / max(scanned, 1)
        step = min(budget, max(share, 1.25 * (cap - found) / rate / rows))
        share, low = min(1.0, share + step), high
    if found <= cap:  # every positive seen and at most cap with an example: the cap does not bind
        last = [cut_range.filter("ok")] if cut_range is not None else []
        return pl.concat([*chosen, *last]).sort("h", *_EXAMPLE), scanned, None, False
    ordered = cut_range.sort("h", *_EXAMPLE)
    cut = int(ordered["ok"].cast(pl.Int64).cum_sum().search_sorted(cap - found_before, side="left"))
    keys = pl.concat([*chosen, ordered.head(cut + 1).filter("ok")]).sort("h", *_EXAMPLE)
    without = without_before + (cut + 1) - (cap - found_before)
    return keys, cap + without, without, True


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


def _random_candidates(scope: _Scope, wanting: pl.DataFrame, n: int, salt: int) -> pl.DataFrame:
    """Candidates for positives whose segment has no negative: articles of the graph that d neither is
    nor links to. Each (d, s, positive) reads a window of n + deg(d) + 1 articles of the universe,
    starting at a place its hash gives, so no row lists the whole universe (it is the window when the
    universe is that small)."""
    if wanting.height == 0:
        return wanting.with_columns(candidate=pl.lit(None, pl.String), source=pl.lit("random"))
    universe = scope.universe()
    size = universe.height
    linked = scope.linked(wanting)
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


def apply_d4_rule(
    groups: pl.DataFrame | pl.LazyFrame, rule: str, link_graph: pl.DataFrame | pl.LazyFrame | None
) -> tuple[pl.DataFrame | pl.LazyFrame, int]:
    """`groups` under a D4 rule: "cover" keeps them; "literal" drops D4 rows whose link is bidirectional.

    A LazyFrame stays lazy (the rows dropped are counted by a query)."""
    if rule == "cover":
        return groups, 0
    if rule != "literal":
        raise ValueError(f"d4_rule: choose 'cover' or 'literal', got {rule!r}")
    if link_graph is None:
        raise ValueError("build_php_examples: d4_rule 'literal' needs the link graph (its reciprocal flag)")
    validate(link_graph, LINK_GRAPH, "wiki_link_graph")
    both_ways = link_graph.lazy().filter(pl.col("reciprocal")).select(article_id="src_id", linked_id="dst_id")
    pair, d4 = ["article_id", "linked_id"], pl.col("group") == "D4"
    lazy = groups.lazy()
    kept = pl.concat([lazy.filter(~d4), lazy.filter(d4).join(both_ways, on=pair, how="anti")])
    dropped = int(_collect(lazy.filter(d4).join(both_ways, on=pair, how="semi").select(pl.len())).item())
    return (kept if isinstance(groups, pl.LazyFrame) else _collect(kept)), dropped
