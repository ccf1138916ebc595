"""Negative selection that guards against false negatives: the RocketQA and RANCE baselines of CET.

Both draw, like `dagster_ir.negatives.sample_negatives`, `n_per_positive` negatives per (query, labelled
positive) from the candidate pool (a run's top `depth` minus every labelled positive), seeded per
(seed, query id, positive id) so that results depend only on the inputs' content.

* **RocketQA-style denoising** (Ding et al., 2021; `denoised_negatives`), as the CET paper states it
  (section 5.4): a first ranker, trained naively on the same labels, scores the unlabelled
  candidates, and negatives are drawn uniformly from those whose score is *below* eta, on that
  ranker's own (raw) score scale: a candidate scoring above eta is taken for an unlabelled positive
  and never used. A pairwise-trained cross-encoder's scores are defined only up to a shift, so no
  fixed eta means anything across models: the lab chooses eta on dev from a sweep (`lab`).
  Candidates are drawn uniformly without replacement from the pool and rejected while their score
  exceeds eta - which gives exactly a uniform draw from the filtered pool while scoring only the
  candidates drawn (about n per positive when few are rejected), instead of the whole pool. A pair
  whose filtered pool holds fewer than n candidates keeps what it has.
* **RANCE-style sampling** (Prakash et al., 2021; `relevance_by_rank`, `rance_rank_weights`,
  `sample_negatives_by_rank`): on a densely judged set of queries (never the test split),
  p_rel(r) is the share of queries whose document at rank r is relevant; the sampling weight of
  rank r is the gain (1 - p_rel(r)) / ln(r - 1 + gain_k), smoothed by a centred moving average
  over 2k - 1 ranks, minus its minimum (RANCE's `getSamplingDist`; we skip its degree-4
  polynomial fit of the smoothed gains). Negatives are then drawn without replacement from the pool
  with probabilities proportional to the weights of their ranks (uniformly if they are all 0).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl

from dagster_ir.negatives.sampling import NegativeSample, SamplingCounts
from dagster_ir.retrieval.runs import top_k
from dagster_ir.schemas import NEGATIVES, QRELS, RUN, validate

# Scores (query_id, doc_id) rows with the first ranker; returns one score per row, in row order.
PairScorer = Callable[[pl.DataFrame], np.ndarray]


@dataclass(frozen=True)
class DenoiseConfig:
    """RocketQA-style denoising: pool depth, negatives per positive, threshold eta, seed."""

    depth: int = 100
    n_per_positive: int = 1
    eta: float = 0.0  # drop d_j when the first ranker's raw score s(q, d_j) > eta
    seed: int = 42

    def __post_init__(self) -> None:
        if self.depth < 1 or self.n_per_positive < 1:
            raise ValueError(
                f"DenoiseConfig: depth and n_per_positive must be >= 1 (got {self.depth}, {self.n_per_positive})"
            )
        if not np.isfinite(self.eta):
            raise ValueError(f"DenoiseConfig.eta must be a finite score threshold, got {self.eta}")


@dataclass(frozen=True)
class DenoisedSample:
    """Negatives after denoising, their counts, and what the first ranker did."""

    sample: NegativeSample
    scored: int  # (query, doc) pairs the first ranker scored (by this call's scorer)
    rejected: int  # drawn candidates dropped as likely false negatives (score > eta)


@dataclass(frozen=True)
class RanceConfig:
    """RANCE-style sampling: curve depth, smoothing half-width k, gain offset, negatives, seed."""

    depth: int = 100
    smoothing: int = 5  # moving average over 2k - 1 ranks
    gain_k: float = 2.0  # gain denominator ln(r - 1 + gain_k); must exceed 1
    n_per_positive: int = 1
    seed: int = 42

    def __post_init__(self) -> None:
        if self.depth < 1 or self.n_per_positive < 1 or self.smoothing < 1:
            raise ValueError(
                f"RanceConfig: depth, n_per_positive and smoothing must be >= 1 "
                f"(got {self.depth}, {self.n_per_positive}, {self.smoothing})"
            )
        if self.gain_k <= 1.0:
            raise ValueError(
                f"RanceConfig.gain_k must exceed 1 (ln(gain_k) is the first denominator), got {self.gain_k}"
            )


# --- shared: pools and per-pair generators -----------------------------------------------------


@dataclass(frozen=True)
class _Pools:
    """Per query: the pool (doc ids, ranks, ordered by rank then doc id) and its sorted positives."""

    pools: dict[str, tuple[list[str], list[int]]]
    positives: dict[str, list[str]]
    without_positives: int


def _pools(run: pl.DataFrame, qrels_train: pl.DataFrame, query_ids: Iterable[str], depth: int) -> _Pools:
    validate(run, RUN, "run")
    validate(qrels_train, QRELS, "qrels_train")
    wanted = pl.Series("query_id", list(query_ids), pl.String).unique()
    is_wanted = pl.col("query_id").is_in(wanted.implode())
    positives = qrels_train.filter((pl.col("relevance") > 0) & is_wanted).select("query_id", "doc_id").unique()
    pool = (
        top_k(run.filter(is_wanted), depth)
        .join(positives, on=["query_id", "doc_id"], how="anti")
        .sort(["query_id", "rank", "doc_id"])
        .group_by("query_id", maintain_order=True)
        .agg("doc_id", "rank")
    )
    by_query = positives.group_by("query_id").agg(pl.col("doc_id").sort()).sort("query_id")
    return _Pools(
        pools={q: (docs, ranks) for q, docs, ranks in pool.iter_rows()},
        positives=dict(by_query.iter_rows()),
        without_positives=wanted.len() - by_query.height,
    )


def _rng(seed: int, query_id: str, positive: str) -> np.random.Generator:
    return np.random.default_rng([seed, _stable_hash(query_id), _stable_hash(positive)])


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


class _Rows:
    """Accumulates NEGATIVES rows."""

    def __init__(self) -> None:
        self.columns: dict[str, list[object]] = {name: [] for name in NEGATIVES}

    def add(self, query_id: str, positive: str, docs: list[str], ranks: list[int]) -> None:
        self.columns["query_id"] += [query_id] * len(docs)
        self.columns["pos_doc_id"] += [positive] * len(docs)
        self.columns["neg_doc_id"] += docs
        self.columns["neg_rank"] += ranks
        self.columns["sample_no"] += list(range(len(docs)))

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.columns, schema=NEGATIVES).sort("query_id", "pos_doc_id", "sample_no")


# --- RANCE -------------------------------------------------------------------------------------


def relevance_by_rank(
    run: pl.DataFrame, dense_qrels: pl.DataFrame, query_ids: Iterable[str], depth: int
) -> pl.DataFrame:
    """p_rel(r) for r = 1..depth: the share of the `query_ids` the run answers whose rank-r document
    `dense_qrels` judges relevant. Columns (rank: Int32, p_relevant: Float64)."""
    validate(run, RUN, "run")
    validate(dense_qrels, QRELS, "dense_qrels")
    wanted = pl.Series("query_id", list(query_ids), pl.String).unique()
    ranked = top_k(run.filter(pl.col("query_id").is_in(wanted.implode())), depth)
    n_queries = ranked["query_id"].n_unique()
    if n_queries == 0:
        raise ValueError("relevance_by_rank: the run answers none of the requested queries")
    relevant = dense_qrels.filter(pl.col("relevance") > 0).select("query_id", "doc_id").unique()
    position = pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("query_id")
    hits = ranked.with_columns(position=position).join(relevant, on=["query_id", "doc_id"])
    counts = np.bincount(hits["position"].to_numpy(), minlength=depth + 1)[1 : depth + 1]
    return pl.DataFrame(
        {"rank": np.arange(1, depth + 1, dtype=np.int32), "p_relevant": counts / n_queries},
        schema={"rank": pl.Int32, "p_relevant": pl.Float64},
    )


def rance_rank_weights(curve: pl.DataFrame, config: RanceConfig = RanceConfig()) -> np.ndarray:
    """Sampling weight per rank 1..len(curve) (see the module docstring); sums to 1."""
    p_relevant = curve.sort("rank")["p_relevant"].to_numpy()
    index = np.arange(p_relevant.size)
    gains = (1.0 - p_relevant) / np.log(index + config.gain_k)
    smoothed = _moving_average(gains, config.smoothing)
    weights = smoothed - smoothed.min()
    if weights.sum() <= 0:
        return np.full(p_relevant.size, 1.0 / p_relevant.size)
    return weights / weights.sum()


def _moving_average(values: np.ndarray, k: int) -> np.ndarray:
    """Centred mean over 2k - 1 values; near the ends, over those that exist."""
    kernel = np.ones(2 * k - 1)
    sums = np.convolve(values, kernel, mode="same")
    counts = np.convolve(np.ones_like(values), kernel, mode="same")
    return sums / counts


def sample_negatives_by_rank(
    run: pl.DataFrame,
    qrels_train: pl.DataFrame,
    query_ids: Iterable[str],
    rank_weights: np.ndarray,
    config: RanceConfig = RanceConfig(),
) -> NegativeSample:
    """Negatives drawn from the top len(rank_weights) minus positives, with probability ∝ the weight
    of their rank; without replacement unless the pool is smaller than n_per_positive."""
    weights = np.asarray(rank_weights, dtype=float)
    if weights.ndim != 1 or weights.size == 0 or (weights < 0).any() or not np.isfinite(weights).all():
        raise ValueError("sample_negatives_by_rank: rank_weights must be a non-empty vector of finite weights >= 0")
    pools = _pools(run, qrels_train, query_ids, weights.size)
    rows, n = _Rows(), config.n_per_positive
    without_candidates = with_replacement = n_positives = 0
    for query_id, positives in pools.positives.items():
        docs, ranks = pools.pools.get(query_id, ([], []))
        if not docs:
            without_candidates += 1
            continue
        with_replacement += len(docs) < n
        p = weights[np.asarray(ranks) - 1]
        p = p / p.sum() if p.sum() > 0 else np.full(len(docs), 1.0 / len(docs))
        for positive in positives:
            picks = _weighted_picks(_rng(config.seed, query_id, positive), p, n)
            rows.add(query_id, positive, [docs[i] for i in picks], [ranks[i] for i in picks])
            n_positives += 1
    return _sample(rows, pools, n_positives, without_candidates, with_replacement)


def _weighted_picks(rng: np.random.Generator, p: np.ndarray, n: int) -> np.ndarray:
    """n positions drawn with probabilities p: with replacement only when the pool is smaller than n;
    when fewer than n have positive weight, all of those (in weighted order) then uniform zero-weight ones."""
    if p.size < n:
        return rng.choice(p.size, size=n, replace=True, p=p)
    if np.count_nonzero(p) >= n:
        return rng.choice(p.size, size=n, replace=False, p=p)
    positive = np.flatnonzero(p > 0)
    first = rng.choice(positive, size=positive.size, replace=False, p=p[positive] / p[positive].sum())
    rest = rng.choice(np.flatnonzero(p == 0), size=n - positive.size, replace=False)
    return np.concatenate([first, rest])


def _sample(
    rows: _Rows, pools: _Pools, n_positives: int, without_candidates: int, with_replacement: int
) -> NegativeSample:
    negatives = rows.frame()
    counts = SamplingCounts(
        queries=negatives["query_id"].n_unique(),
        positives=n_positives,
        negatives=negatives.height,
        without_positives=pools.without_positives,
        without_candidates=without_candidates,
        with_replacement=with_replacement,
    )
    return NegativeSample(negatives, counts)


# --- RocketQA ----------------------------------------------------------------------------------


def denoised_negatives(
    run: pl.DataFrame,
    qrels_train: pl.DataFrame,
    query_ids: Iterable[str],
    score: PairScorer,
    config: DenoiseConfig = DenoiseConfig(),
) -> DenoisedSample:
    """Uniform negatives from the pool among the candidates that the first ranker (`score`) scores
    at most eta; see the module docstring."""
    pools = _pools(run, qrels_train, query_ids, config.depth)
    pairs = [(q, p) for q, positives in pools.positives.items() if pools.pools.get(q) for p in positives]
    scores = _ScoreCache(score)
    orders = {(q, p): _rng(config.seed, q, p).permutation(len(pools.pools[q][0])) for q, p in pairs}
    accepted: dict[tuple[str, str], list[int]] = {pair: [] for pair in pairs}
    cursor = dict.fromkeys(pairs, 0)
    rejected = 0
    open_pairs = list(pairs)
    while open_pairs:
        drawn = []
        for pair in open_pairs:
            need = config.n_per_positive - len(accepted[pair])
            take = orders[pair][cursor[pair] : cursor[pair] + need]
            cursor[pair] += take.size
            drawn += [(pair, int(i)) for i in take]
        scores.fetch([(q, pools.pools[q][0][i]) for (q, _), i in drawn])
        for (q, p), i in drawn:
            if scores[q, pools.pools[q][0][i]] > config.eta:
                rejected += 1
            else:
                accepted[q, p].append(i)
        open_pairs = [
            pair
            for pair in open_pairs
            if len(accepted[pair]) < config.n_per_positive and cursor[pair] < orders[pair].size
        ]
    return DenoisedSample(_denoised_sample(pools, accepted), scored=len(scores), rejected=rejected)


def _denoised_sample(pools: _Pools, accepted: dict[tuple[str, str], list[int]]) -> NegativeSample:
    rows = _Rows()
    without_candidates = sum(1 for q in pools.positives if not pools.pools.get(q))
    for (q, p), picks in accepted.items():
        docs, ranks = pools.pools[q]
        rows.add(q, p, [docs[i] for i in picks], [ranks[i] for i in picks])
    n_positives = sum(1 for picks in accepted.values() if picks)
    return _sample(rows, pools, n_positives, without_candidates, with_replacement=0)


class _ScoreCache:
    """Scores of (query, doc) pairs, each computed once, in batches."""

    def __init__(self, score: PairScorer) -> None:
        self.score = score
        self.values: dict[tuple[str, str], float] = {}

    def fetch(self, keys: list[tuple[str, str]]) -> None:
        missing = list(dict.fromkeys(k for k in keys if k not in self.values))
        if not missing:
            return
        frame = pl.DataFrame(missing, schema={"query_id": pl.String, "doc_id": pl.String}, orient="row")
        values = np.asarray(self.score(frame), dtype=float)
        if values.shape != (len(missing),) or not np.isfinite(values).all():
            raise ValueError(
                f"denoised_negatives: the scorer must return {len(missing)} finite scores, got shape {values.shape}"
            )
        self.values.update(zip(missing, values.tolist()))

    def __getitem__(self, key: tuple[str, str]) -> float:
        return self.values[key]

    def __len__(self) -> int:
        return len(self.values)
