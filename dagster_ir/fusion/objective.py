"""The objective coordinate ascent maximises: a mean ir_measures value of a linearly scored run.

Rankings are recomputed thousands of times during training, so the common measures (RR@k, nDCG@k,
P@k, R@k, AP) are computed directly with numpy, with trec_eval's semantics (score descending, ties
by doc id descending; relevant means relevance >= 1; nDCG's gain is the relevance value and its ideal
ranking comes from the qrels, retrieved or not). Any other measure goes through
`dagster_ir.evaluation.evaluate_run` (correct, slower). Only queries with a relevant document count.
"""

from __future__ import annotations

from dataclasses import dataclass

import ir_measures
import numpy as np
import polars as pl

from dagster_ir.evaluation import aggregate, evaluate_run, parse_measures
from dagster_ir.schemas import QRELS, RUN, validate

_DIRECT = {"RR", "nDCG", "P", "R", "AP"}


@dataclass(frozen=True)
class _Measure:
    name: str
    cutoff: int | None


class RankingObjective:
    """mean measure(features @ weights) over the judged queries of a candidate frame.

    `candidates` has query_id, doc_id and the feature columns `features`; `qrels` is a QRELS frame.
    """

    def __init__(self, candidates: pl.DataFrame, features: list[str], qrels: pl.DataFrame, measure: str) -> None:
        validate(qrels, QRELS, "qrels")
        relevant = qrels.filter(pl.col("relevance") >= 1)
        judged = candidates.join(relevant.select("query_id").unique(), on="query_id", how="semi")
        if judged.height == 0:
            raise ValueError("RankingObjective: no candidate query has a relevant document")
        # group by query; within a query doc id descending, so a stable sort by score keeps trec_eval's ties
        frame = judged.sort(["query_id", "doc_id"], descending=[False, True]).join(
            qrels.select("query_id", "doc_id", "relevance"),
            on=["query_id", "doc_id"],
            how="left",
            maintain_order="left",
        )
        self.frame = frame.select("query_id", "doc_id")
        self.features = frame.select(features).to_numpy().astype(np.float64)
        self.relevance = frame["relevance"].fill_null(0).clip(lower_bound=0).to_numpy().astype(np.float64)
        self.query = frame["query_id"].rle_id().to_numpy()
        self.starts = np.flatnonzero(np.diff(self.query, prepend=-1))
        self.qrels = qrels
        self.measure = parse_measures([measure])[0]
        self._direct = _direct_measure(self.measure)
        per_query = relevant.join(frame.select("query_id").unique(), on="query_id", how="semi")
        ordered_ids = frame["query_id"].gather(self.starts)
        self.n_relevant = _per_query(per_query.group_by("query_id").len(), ordered_ids, "len")
        self.ideal = _ideal_dcg(per_query, ordered_ids, self._direct.cutoff if self._direct else None)

    def __call__(self, weights: np.ndarray) -> float:
        scores = self.features @ np.asarray(weights, dtype=np.float64)
        if self._direct is None:
            return self._via_ir_measures(scores)
        return float(self.per_query(scores).mean())

    def per_query(self, scores: np.ndarray) -> np.ndarray:
        """The measure of every judged query (direct measures only) for the given scores."""
        if self._direct is None:
            raise ValueError(f"{self.measure} is not computed directly")
        order = np.lexsort((-scores, self.query))  # stable: equal scores keep doc id descending
        relevance = self.relevance[order]
        position = np.arange(scores.size) - self.starts[self.query[order]]
        return _compute(
            self._direct, relevance, position, self.query[order], self.starts.size, self.n_relevant, self.ideal
        )

    def _via_ir_measures(self, scores: np.ndarray) -> float:
        run = self.frame.with_columns(
            score=pl.Series(scores), rank=pl.lit(0, pl.Int32), run_name=pl.lit("fusion")
        ).select(list(RUN))
        per_query = evaluate_run(run, self.qrels.join(self.frame, on="query_id", how="semi"), [self.measure])
        return float(aggregate(per_query)["mean"][0])


def _direct_measure(measure: ir_measures.Measure) -> _Measure | None:
    """The measure if it is one we compute directly with default parameters, else None."""
    cutoff = dict(measure.params).get("cutoff")
    canonical = f"{measure.NAME}@{cutoff}" if cutoff is not None else measure.NAME
    if measure.NAME not in _DIRECT or str(measure) != str(ir_measures.parse_measure(canonical)):
        return None
    if measure.NAME in ("P", "R") and cutoff is None:
        return None
    return _Measure(measure.NAME, cutoff)


def _per_query(counts: pl.DataFrame, ordered_ids: pl.Series, column: str) -> np.ndarray:
    joined = pl.DataFrame({"query_id": ordered_ids}).join(counts, on="query_id", how="left", maintain_order="left")
    return joined[column].fill_null(0).to_numpy().astype(np.float64)


def _ideal_dcg(relevant: pl.DataFrame, ordered_ids: pl.Series, cutoff: int | None) -> np.ndarray:
    ranked = relevant.sort(["query_id", "relevance"], descending=[False, True]).with_columns(
        position=pl.int_range(pl.len()).over("query_id")
    )
    if cutoff is not None:
        ranked = ranked.filter(pl.col("position") < cutoff)
    ideal = ranked.group_by("query_id").agg(
        idcg=(pl.col("relevance").cast(pl.Float64) / (pl.col("position") + 2).cast(pl.Float64).log(2)).sum()
    )
    return _per_query(ideal, ordered_ids, "idcg")


def _compute(
    measure: _Measure,
    relevance: np.ndarray,
    position: np.ndarray,
    query: np.ndarray,
    n_queries: int,
    n_relevant: np.ndarray,
    ideal: np.ndarray,
) -> np.ndarray:
    cutoff = measure.cutoff
    inside = position < cutoff if cutoff is not None else np.ones(position.size, dtype=bool)
    hit = (relevance >= 1) & inside
    if measure.name == "RR":
        values = np.where(hit, 1.0 / (position + 1), 0.0)
        return np.maximum.reduceat(values, np.flatnonzero(np.diff(query, prepend=-1))) if values.size else values
    if measure.name == "nDCG":
        dcg = np.bincount(query, weights=np.where(inside, relevance / np.log2(position + 2), 0.0), minlength=n_queries)
        return np.divide(dcg, ideal, out=np.zeros(n_queries), where=ideal > 0)
    if measure.name == "P":
        return np.bincount(query, weights=hit, minlength=n_queries) / cutoff
    if measure.name == "R":
        found = np.bincount(query, weights=hit, minlength=n_queries)
        return np.divide(found, n_relevant, out=np.zeros(n_queries), where=n_relevant > 0)
    # AP: mean over relevant documents of the precision at their position
    cumulative = np.cumsum(hit) - np.repeat(_group_offsets(hit, query), np.bincount(query, minlength=n_queries))
    precision = np.where(hit, cumulative / (position + 1), 0.0)
    total = np.bincount(query, weights=precision, minlength=n_queries)
    return np.divide(total, n_relevant, out=np.zeros(n_queries), where=n_relevant > 0)


def _group_offsets(hit: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Hits before each query's first row (for per-query cumulative counts)."""
    starts = np.flatnonzero(np.diff(query, prepend=-1))
    before = np.concatenate([[0], np.cumsum(hit)])
    return before[starts]
