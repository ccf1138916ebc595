"""Negative sampling from a candidate run: random from the top `depth`, or the hardest top-n.

For every training query and each of its labelled positives (relevance > 0), `n_per_positive`
negatives are drawn from the query's candidate pool: the run's top `depth` documents (by rank)
minus every labelled positive. Documents judged non-relevant (relevance 0) stay in the pool.

- "random": uniform without replacement from the pool, a fresh draw per (query, positive).
- "hard": the pool's top `n_per_positive` by rank, the same for every positive of a query.

When a pool holds fewer than `n_per_positive` documents the query is sampled with replacement
(random: uniform draws; hard: the pool repeated in rank order) and counted in `with_replacement`.
The result depends only on the config and on the *content* of the inputs, never on their row order:
pools are ordered by (rank, doc_id), positives by doc_id, and each (query, positive) draws from its
own random generator seeded by (seed, query_id, pos_doc_id).

Pairs that look like the reranking task (`candidate_pairs`): the same draw, but the positives are
only the judged-relevant documents *within* the run's top `depth` (the candidates a reranker sees
there), so positive and negatives come from the same first-stage ranking. Trained on every judged
positive instead (a third of Cranfield's lie below BM25's top 100), a reranker learns to tell
relevant documents it will never be shown from the top candidates' look-alikes.

Fresh draws per epoch (CET's Algorithm 1 samples new triples every iteration): `epoch_seed(seed,
epoch)` derives the seed of epoch `epoch` from the configured seed, and `for_epoch(config, epoch)` is
the config with that seed, so epoch e of any sampler draws the same negatives for the same (seed, e)
and, in general, other ones for another epoch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import polars as pl

from dagster_ir.retrieval.runs import top_k
from dagster_ir.schemas import NEGATIVES, QRELS, RUN, validate

Strategy = Literal["random", "hard"]


@dataclass(frozen=True)
class NegativeConfig:
    """How to draw negatives from a candidate run."""

    strategy: Strategy = "random"
    depth: int = 100  # candidate pool: the run's top `depth` documents per query
    n_per_positive: int = 4
    seed: int = 42

    def __post_init__(self) -> None:
        if self.strategy not in ("random", "hard"):
            raise ValueError(f"NegativeConfig.strategy: 'random' or 'hard', not {self.strategy!r}")
        for name in ("depth", "n_per_positive"):
            if getattr(self, name) < 1:
                raise ValueError(f"NegativeConfig.{name} must be >= 1, got {getattr(self, name)}")


def epoch_seed(seed: int, epoch: int) -> int:
    """The sampling seed of epoch `epoch` (0-based) derived from `seed`: a 63-bit hash of (seed, epoch)."""
    if epoch < 0:
        raise ValueError(f"epoch_seed: epoch must be >= 0, got {epoch}")
    state = np.random.SeedSequence([int(seed), int(epoch)]).generate_state(2, np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1


def for_epoch(config: NegativeConfig, epoch: int) -> NegativeConfig:
    """`config` with the seed of epoch `epoch` (see `epoch_seed`)."""
    return replace(config, seed=epoch_seed(config.seed, epoch))


@dataclass(frozen=True)
class SamplingCounts:
    """What happened to the requested queries."""

    queries: int  # queries that got negatives
    positives: int  # (query, positive) pairs that got negatives
    negatives: int  # rows of the negatives table
    without_positives: int  # no positive in qrels_train: skipped
    without_candidates: int  # positives, but nothing else in the top `depth`: skipped
    with_replacement: int  # fewer candidates than n_per_positive: sampled with replacement


@dataclass(frozen=True)
class NegativeSample:
    """A NEGATIVES table and the counts that describe it."""

    negatives: pl.DataFrame
    counts: SamplingCounts


def sample_negatives(
    run: pl.DataFrame,
    qrels_train: pl.DataFrame,
    query_ids: Iterable[str],
    config: NegativeConfig,
) -> NegativeSample:
    """Sample negatives for the `query_ids` from `run` (see the module docstring for the rules).

    Rows come sorted by (query_id, pos_doc_id, sample_no).
    """
    validate(run, RUN, "run")
    validate(qrels_train, QRELS, "qrels_train")
    wanted = pl.Series("query_id", list(query_ids), pl.String).unique()
    is_wanted = pl.col("query_id").is_in(wanted.implode())
    positives = qrels_train.filter((pl.col("relevance") > 0) & is_wanted)
    positives = positives.select("query_id", "doc_id").unique()
    pools = _candidate_pools(run.filter(is_wanted), positives, config.depth)
    by_query = positives.group_by("query_id").agg(pl.col("doc_id").sort()).sort("query_id")

    columns: dict[str, list[object]] = {name: [] for name in NEGATIVES}
    without_candidates = with_replacement = n_positives = 0
    for query_id, positive_ids in by_query.iter_rows():
        pool_docs, pool_ranks = pools.get(query_id, ([], []))
        if not pool_docs:
            without_candidates += 1
            continue
        with_replacement += len(pool_docs) < config.n_per_positive
        for positive in positive_ids:
            picks = _pick(len(pool_docs), config, query_id, positive)
            columns["query_id"] += [query_id] * len(picks)
            columns["pos_doc_id"] += [positive] * len(picks)
            columns["neg_doc_id"] += [pool_docs[i] for i in picks]
            columns["neg_rank"] += [pool_ranks[i] for i in picks]
            columns["sample_no"] += list(range(len(picks)))
            n_positives += 1
    negatives = pl.DataFrame(columns, schema=NEGATIVES)
    counts = SamplingCounts(
        queries=by_query.height - without_candidates,
        positives=n_positives,
        negatives=negatives.height,
        without_positives=len(wanted) - by_query.height,
        without_candidates=without_candidates,
        with_replacement=with_replacement,
    )
    return NegativeSample(negatives, counts)


def candidate_pairs(
    run: pl.DataFrame,
    qrels_train: pl.DataFrame,
    query_ids: Iterable[str],
    config: NegativeConfig,
) -> NegativeSample:
    """`sample_negatives` with positives limited to judged-relevant documents in the run's top `config.depth`.

    Queries with no judged-relevant document in that depth get no pairs (counted in `without_positives`).
    """
    validate(run, RUN, "run")
    validate(qrels_train, QRELS, "qrels_train")
    shown = top_k(run, config.depth).select("query_id", "doc_id")
    return sample_negatives(run, qrels_train.join(shown, on=["query_id", "doc_id"], how="semi"), query_ids, config)


def _candidate_pools(run: pl.DataFrame, positives: pl.DataFrame, depth: int) -> dict[str, tuple[list[str], list[int]]]:
    """query_id -> (doc ids, ranks) of the top-`depth` non-positives, ordered by (rank, doc_id)."""
    pool = top_k(run, depth).join(positives, on=["query_id", "doc_id"], how="anti").sort(["query_id", "rank", "doc_id"])
    grouped = pool.group_by("query_id").agg("doc_id", "rank")  # row order is kept within groups
    return {query_id: (docs, ranks) for query_id, docs, ranks in grouped.iter_rows()}


def _pick(pool_size: int, config: NegativeConfig, query_id: str, positive: str) -> np.ndarray:
    """Positions in the pool of the negatives for one (query, positive)."""
    n = config.n_per_positive
    if config.strategy == "hard":
        return np.arange(n) % pool_size
    rng = np.random.default_rng([config.seed, _stable_hash(query_id), _stable_hash(positive)])
    if pool_size >= n:
        return rng.choice(pool_size, size=n, replace=False)
    return rng.integers(0, pool_size, size=n)


def _stable_hash(text: str) -> int:
    """A 64-bit hash of `text` that is the same in every process (unlike `hash`)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def false_negative_share(negatives: pl.DataFrame, dense_qrels: pl.DataFrame) -> float:
    """Share of sampled negative rows that a denser qrels judges relevant (relevance > 0)."""
    validate(negatives, NEGATIVES, "negatives")
    validate(dense_qrels, QRELS, "dense_qrels")
    if negatives.height == 0:
        raise ValueError("false_negative_share: no negatives")
    relevant = (
        dense_qrels.filter(pl.col("relevance") > 0)
        .select("query_id", neg_doc_id="doc_id", relevant=pl.lit(True))
        .unique()
    )
    joined = negatives.join(relevant, on=["query_id", "neg_doc_id"], how="left")
    return float(joined["relevant"].fill_null(False).mean())
