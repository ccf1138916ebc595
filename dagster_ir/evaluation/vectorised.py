"""trec_eval's P@k, R@k, RR(@k), AP(@k) and nDCG@k over whole runs at once, in Polars and numpy.

`evaluate_run` uses this for the measures the reports use (and any of these forms with default
parameters, or `rel=` for the binary ones); any other measure goes to ir_measures. The values are
trec_eval's (pytrec_eval's, which ir_measures calls), checked value by value against ir_measures
in the tests:

* **Order.** trec_eval's: each query's documents by score descending, ties by doc id descending
  (byte order). Only each judged document's position is needed; it is the number of documents of
  its query scoring more, plus one, plus the number tied with it that have a larger doc id. So the
  run is ranked per query by score alone, and only documents that share a score with another are
  ordered by doc id; nothing sorts the whole run.
* **Sums.** trec_eval sums AP's precisions and nDCG's discounted gains one document after the other
  in rank order, in double precision; so do we (a cumulative sum along each query's judged
  documents), so the values are the same to the last bit, not merely close. The discount
  `log2(position + 1)` comes from the C library, as trec_eval's does.
* **Relevance.** A document is relevant for P, R, RR and AP when its relevance is >= `rel` (1
  unless the measure says otherwise); R and AP divide by the number of such documents in the
  qrels (0 when there is none). nDCG's gain is the relevance, negative relevance counting 0; its
  ideal ranking is the qrels' gains in descending order, cut at the same k.
* **Queries.** Every query of the qrels gets a value (0 for one the run does not answer), or,
  with `count_missing_as_zero=False`, every query of the qrels the run answers; queries without
  judgments are ignored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import ir_measures
import numpy as np
import polars as pl

from dagster_ir.schemas import PER_QUERY_EVAL

_BINARY = {"P", "R", "RR", "AP"}  # their only parameters: cutoff, rel (and judged_only=False)
# nDCG without a cutoff is left to ir_measures: its pytrec_eval hangs on a second evaluation of it in
# one process (seen with pytrec_eval-terrier 0.5.11), so it could not be checked against it.
_CUTOFF_REQUIRED = {"P", "R", "nDCG"}


@dataclass(frozen=True)
class _Measure:
    name: str  # the canonical ir_measures name, as in the `measure` column
    kind: str  # P, R, RR, AP or nDCG
    cutoff: int | None
    rel: int = 1


def vectorised_measures(measures: Sequence[ir_measures.Measure]) -> list[_Measure] | None:
    """The measures in the form this module computes, or None when one of them is not covered."""
    covered = []
    for measure in measures:
        params = dict(measure.params)
        cutoff = params.pop("cutoff", None)
        if params.get("judged_only") is False:
            params.pop("judged_only")
        rel = params.pop("rel", 1) if measure.NAME in _BINARY else 1
        if measure.NAME == "nDCG":
            if params.get("dcg") == "log2":
                params.pop("dcg")
            if params.get("gains") is None:
                params.pop("gains", None)
        if params or measure.NAME not in _BINARY | {"nDCG"}:
            return None
        if (cutoff is None and measure.NAME in _CUTOFF_REQUIRED) or (cutoff is not None and cutoff < 1):
            return None
        if not isinstance(rel, int) or isinstance(rel, bool):
            return None
        covered.append(_Measure(str(measure), measure.NAME, cutoff, rel))
    return covered


def evaluate_vectorised(
    run: pl.DataFrame, qrels: pl.DataFrame, measures: list[_Measure], count_missing_as_zero: bool
) -> pl.DataFrame:
    """PER_QUERY_EVAL rows of every run in `run` (run_name, query_id, doc_id, score; validated, no
    duplicate documents), runs by name; per run sorted by query id, then measure."""
    judged_queries = qrels.select("query_id").unique().sort("query_id")["query_id"]
    run_names = run["run_name"].unique().sort()  # as the ir_measures path: runs by name
    run = run.join(judged_queries.to_frame(), on="query_id", how="semi", maintain_order="left")
    run = _grouped(run)
    group = pl.struct("run_name", "query_id").rle_id().alias("group")
    run = run.with_columns(group)
    groups = run.group_by("group", maintain_order=True).agg(
        pl.col("run_name").first(), pl.col("query_id").first(), size=pl.len()
    )
    run = run.with_columns(position=_positions(run, groups["size"].to_numpy().astype(np.int64)))

    judged = run.select("group", "query_id", "doc_id", "position").join(
        qrels.select("query_id", "doc_id", "relevance"), on=["query_id", "doc_id"]
    )
    judged = judged.sort("group", "position")
    judged_group = judged["group"].to_numpy().astype(np.int64)
    position = judged["position"].to_numpy().astype(np.int64)
    relevance = judged["relevance"].to_numpy().astype(np.int64)

    query_number = {q: i for i, q in enumerate(judged_queries.to_list())}
    group_query = np.array([query_number[q] for q in groups["query_id"].to_list()], dtype=np.int64)
    n_groups = groups.height
    values = np.zeros((n_groups, len(measures)), dtype=np.float64)
    discount = _Discount(position)
    ideal = _IdealGains(qrels, query_number)
    for column, measure in enumerate(measures):
        values[:, column] = _values(measure, judged_group, position, relevance, n_groups, group_query, discount, ideal)
    return _rows(run_names, judged_queries, groups, group_query, values, measures, count_missing_as_zero)


def _grouped(run: pl.DataFrame) -> pl.DataFrame:
    """`run` with each (run_name, query_id) in one block of rows: as it is when it already is."""
    starts = run.select("run_name", "query_id").filter(
        pl.struct("run_name", "query_id").rle_id().diff().fill_null(1) != 0
    )
    if starts.height == starts.unique().height:
        return run
    return run.sort("run_name", "query_id", maintain_order=True)


def _positions(run: pl.DataFrame, sizes: np.ndarray) -> pl.Series:
    """trec_eval's 1-based position of every row of `run` (blocks numbered by `group`)."""
    higher = (
        run.select(pl.col("score").rank("min", descending=True).over("group").cast(pl.Int64)).to_series().to_numpy()
    )
    starts = np.cumsum(sizes) - sizes
    slot = starts[run["group"].to_numpy()] + higher - 1  # unique within a block unless tied
    tied = np.bincount(slot, minlength=len(slot))[slot] > 1
    position = higher.copy()
    if tied.any():
        ties = pl.DataFrame(
            {"slot": slot[tied], "doc_id": run["doc_id"].filter(pl.Series(tied)), "row": np.flatnonzero(tied)}
        )
        ties = ties.sort(["slot", "doc_id"], descending=[False, True])
        offset = ties.select(pl.int_range(pl.len()).over("slot")).to_series().to_numpy()
        position[ties["row"].to_numpy()] += offset
    return pl.Series("position", position)


class _Discount:
    """log2(position + 1) for the positions of the judged documents, from the C library."""

    def __init__(self, position: np.ndarray) -> None:
        top = int(position.max()) if position.size else 0
        self._table = np.array([math.log2(p + 1) if p else 1.0 for p in range(top + 1)])

    def __call__(self, position: np.ndarray) -> np.ndarray:
        return self._table[position]


class _IdealGains:
    """Each judged query's gains (relevance > 0), highest first, as a padded matrix; and its
    count of relevant documents at a relevance level."""

    def __init__(self, qrels: pl.DataFrame, query_number: dict[str, int]) -> None:
        self._query = np.array([query_number[q] for q in qrels["query_id"].to_list()], dtype=np.int64)
        self._relevance = qrels["relevance"].to_numpy()
        self._n_queries = len(query_number)
        gains = qrels.filter(pl.col("relevance") > 0).sort(["query_id", "relevance"], descending=[False, True])
        rows = np.array([query_number[q] for q in gains["query_id"].to_list()], dtype=np.int64)
        counts = np.bincount(rows, minlength=len(query_number))
        column = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        self.matrix = np.zeros((len(query_number), int(counts.max(initial=0))), dtype=np.float64)
        self.matrix[rows, column] = gains["relevance"].to_numpy()

    def relevant(self, level: int) -> np.ndarray:
        """Per judged query, the number of qrels with relevance >= `level` (trec_eval's num_rel)."""
        return np.bincount(self._query[self._relevance >= level], minlength=self._n_queries).astype(np.float64)

    def dcg(self, cutoff: int | None) -> np.ndarray:
        kept = self.matrix[:, :cutoff]
        discount = np.array([math.log2(p + 2) for p in range(kept.shape[1])])
        return _sequential_sums(kept / discount)


def _sequential_sums(terms: np.ndarray) -> np.ndarray:
    """Row sums, adding left to right as trec_eval's loops do (trailing zeros change nothing)."""
    if terms.shape[1] == 0:
        return np.zeros(terms.shape[0])
    return np.add.accumulate(terms, axis=1)[:, -1]


def _per_group(group: np.ndarray, terms: np.ndarray, n_groups: int) -> np.ndarray:
    """Sum of `terms` per group, left to right; rows of a group are consecutive, in rank order."""
    counts = np.bincount(group, minlength=n_groups)
    column = np.arange(len(group)) - np.repeat(np.cumsum(counts) - counts, counts)
    matrix = np.zeros((n_groups, int(counts.max(initial=0))), dtype=np.float64)
    matrix[group, column] = terms
    return _sequential_sums(matrix)


def _values(
    measure: _Measure,
    group: np.ndarray,
    position: np.ndarray,
    relevance: np.ndarray,
    n_groups: int,
    group_query: np.ndarray,
    discount: _Discount,
    ideal: _IdealGains,
) -> np.ndarray:
    """One measure's value for every (run, query) block."""
    within = position <= measure.cutoff if measure.cutoff is not None else np.ones(len(position), bool)
    if measure.kind == "nDCG":
        gain = np.maximum(relevance[within], 0).astype(np.float64)
        dcg = _per_group(group[within], gain / discount(position[within]), n_groups)
        ideal_dcg = ideal.dcg(measure.cutoff)[group_query]
        return np.divide(dcg, ideal_dcg, out=np.zeros(n_groups), where=ideal_dcg > 0)
    relevant = within & (relevance >= measure.rel)
    found = np.bincount(group[relevant], minlength=n_groups).astype(np.float64)
    if measure.kind == "P":
        return found / measure.cutoff
    if measure.kind == "RR":
        first = np.full(n_groups, np.inf)
        np.minimum.at(first, group[relevant], position[relevant].astype(np.float64))
        return np.where(np.isfinite(first), 1.0 / first, 0.0)
    num_rel = ideal.relevant(measure.rel)[group_query]
    if measure.kind == "R":
        return np.divide(found, num_rel, out=np.zeros(n_groups), where=num_rel > 0)
    # AP: the precision at each relevant document, in rank order, summed, over the relevant count.
    rank_among_relevant = np.arange(1, relevant.sum() + 1) - np.repeat(np.cumsum(found) - found, found.astype(np.int64))
    precisions = rank_among_relevant / position[relevant].astype(np.float64)
    total = _per_group(group[relevant], precisions, n_groups)
    return np.divide(total, num_rel, out=np.zeros(n_groups), where=num_rel > 0)


def _rows(
    run_names: pl.Series,
    judged_queries: pl.Series,
    groups: pl.DataFrame,
    group_query: np.ndarray,
    values: np.ndarray,
    measures: list[_Measure],
    count_missing_as_zero: bool,
) -> pl.DataFrame:
    """The per-query table: per run, its queries (sorted) x the measures (in the order asked)."""
    names = [m.name for m in measures]
    group_run = groups["run_name"].to_numpy()
    frames = []
    for name in run_names.to_list():
        own = np.flatnonzero(group_run == name)
        table = np.zeros((judged_queries.len(), len(measures)))
        table[group_query[own]] = values[own]
        if count_missing_as_zero:
            queries = np.arange(judged_queries.len())
        else:
            queries = np.sort(group_query[own])
        if queries.size == 0:
            continue
        frames.append(
            pl.DataFrame(
                {
                    "run_name": pl.repeat(name, queries.size * len(names), dtype=pl.String, eager=True),
                    "query_id": judged_queries.gather(np.repeat(queries, len(names))),
                    "measure": pl.Series(names * queries.size, dtype=pl.String),
                    "value": table[queries].reshape(-1),
                },
                schema=PER_QUERY_EVAL,
            )
        )
    return pl.concat(frames) if frames else pl.DataFrame(schema=PER_QUERY_EVAL)
