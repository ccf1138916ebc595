"""Per-query evaluation of runs with ir_measures, with trec_eval's semantics.

Three choices make our numbers the numbers trec_eval prints:

* **Order.** trec_eval ignores the rank column of a run: it orders each query's documents by score,
  descending, and breaks ties by doc id, descending (byte order). ir_measures hands each measure to
  a provider, and not every provider breaks ties that way (msmarco's RR@k, which serves ``RR@10``,
  sorts tied documents by ascending doc id). So we apply trec_eval's order once, in Polars, and pass
  every provider strictly decreasing scores that encode it. Scores, never ranks, decide the order;
  the run's own ``rank`` column is not read.
* **Missing queries.** A query in the qrels that the run does not answer scores 0 on every measure,
  like ``trec_eval -c``: systems are compared on one common query set. `EvaluationConfig` can turn
  this off, in which case such queries are left out of that run's rows.
* **Unjudged queries.** Queries of the run that the qrels do not mention are ignored, as trec_eval
  ignores them.

The per-query table keeps one row per (run, query, measure); `aggregate` averages it. The measures
the reports use are computed by `dagster_ir.evaluation.vectorised` over whole runs at once, with
the same values as ir_measures (to the last bit) and the same three rules; any other goes to
ir_measures.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import ir_measures
import numpy as np
import polars as pl

from dagster_ir.evaluation.vectorised import evaluate_vectorised, vectorised_measures
from dagster_ir.schemas import PER_QUERY_EVAL, QRELS, RUN, SUMMARY_EVAL, validate

DEFAULT_MEASURES: list[str] = [
    "RR@10",
    "RR@100",
    "nDCG@10",
    "nDCG@20",
    "nDCG@100",
    "P@20",
    "R@100",
    "R@1000",
    "AP",
]

_RUN_COLUMNS = {name: RUN[name] for name in ("run_name", "query_id", "doc_id", "score")}


@dataclass(frozen=True)
class EvaluationConfig:
    """Settings of `evaluate_run`.

    count_missing_as_zero: a query in the qrels that a run does not answer scores 0 (``trec_eval -c``);
        when False it has no row for that run.
    vectorised: compute the measures `dagster_ir.evaluation.vectorised` covers (P@k, R@k, nDCG@k,
        RR and AP with or without cutoff) there, over the whole run at once, with the same values;
        when False, or when any measure asked for is another, all go through ir_measures.
    """

    count_missing_as_zero: bool = True
    vectorised: bool = True  # False: every measure through ir_measures (see `evaluation.vectorised`)


def parse_measures(measures: Iterable[str | ir_measures.Measure]) -> list[ir_measures.Measure]:
    """Parse ir_measures names (``"nDCG@10"``, ``"P(rel=2)@10"``); raise ValueError naming a bad one."""
    parsed = []
    for measure in measures:
        try:
            parsed.append(ir_measures.parse_measure(measure))
        except (ValueError, NameError) as error:
            raise ValueError(f"measure {measure!r}: {error}") from error
    if not parsed:
        raise ValueError("no measures given")
    return parsed


def measure_names(measures: Iterable[str | ir_measures.Measure]) -> list[str]:
    """The canonical ir_measures names (``"MRR@10"`` -> ``"RR@10"``), as used in the `measure` column."""
    return [str(measure) for measure in parse_measures(measures)]


def trec_eval_order(run: pl.DataFrame) -> pl.DataFrame:
    """Sort `run` as trec_eval does and add ``position`` (1-based, per run and query).

    Within a query: score descending, ties by doc id descending. `run` needs run_name, query_id,
    doc_id and score.
    """
    return run.sort(["run_name", "query_id", "score", "doc_id"], descending=[False, False, True, True]).with_columns(
        position=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("run_name", "query_id")
    )


def evaluate_run(
    run: pl.DataFrame,
    qrels: pl.DataFrame,
    measures: Sequence[str | ir_measures.Measure] = DEFAULT_MEASURES,
    config: EvaluationConfig = EvaluationConfig(),
) -> pl.DataFrame:
    """Per-query values of `measures` for every run in `run` (one or several run names).

    Returns PER_QUERY_EVAL rows (run_name, query_id, measure, value), measure being the canonical
    ir_measures name. See the module docstring for ordering and missing-query semantics.
    """
    parsed = parse_measures(measures)
    _check_run(run)
    _check_qrels(qrels)
    vectorised = vectorised_measures(parsed) if config.vectorised else None
    if vectorised is not None:
        return evaluate_vectorised(run.select(list(_RUN_COLUMNS)), qrels, vectorised, config.count_missing_as_zero)
    evaluator = ir_measures.evaluator(parsed, _qrels_dict(qrels))
    ordered = trec_eval_order(run.select(list(_RUN_COLUMNS)))
    names = [str(measure) for measure in parsed]
    frames = [
        _evaluate_one(evaluator, names, name, part, config)
        for (name,), part in ordered.partition_by("run_name", maintain_order=True, as_dict=True).items()
    ]
    if not frames:
        return pl.DataFrame(schema=PER_QUERY_EVAL)
    return pl.concat(frames)


def aggregate(per_query: pl.DataFrame) -> pl.DataFrame:
    """Mean value per (run_name, measure) of a per-query table, in order of first appearance."""
    validate(per_query, PER_QUERY_EVAL, "per-query evaluation")
    return (
        per_query.group_by("run_name", "measure", maintain_order=True)
        .agg(mean=pl.col("value").mean())
        .cast(SUMMARY_EVAL)
    )


def recall_curve(
    run: pl.DataFrame,
    qrels: pl.DataFrame,
    max_depth: int | None = None,
    config: EvaluationConfig = EvaluationConfig(),
) -> pl.DataFrame:
    """Mean recall@k for k = 1..max_depth, per run: columns (run_name, k, recall).

    Same semantics as ``R@k`` of `evaluate_run` (relevance >= 1 is relevant, trec_eval order,
    missing queries as `config` says), computed for every k at once. `max_depth` defaults to the
    deepest ranking in `run`.
    """
    _check_run(run)
    _check_qrels(qrels)
    ranked = trec_eval_order(run.select(list(_RUN_COLUMNS)))
    depth = max_depth if max_depth is not None else int(ranked["position"].max() or 1)
    if depth < 1:
        raise ValueError(f"max_depth must be >= 1, got {depth}")
    num_rel = qrels.group_by("query_id").agg(num_rel=(pl.col("relevance") >= 1).sum())
    relevant = qrels.filter(pl.col("relevance") >= 1).join(num_rel, on="query_id")
    hits = ranked.filter(pl.col("position") <= depth).join(relevant, on=["query_id", "doc_id"])
    curves = []
    for name in ranked["run_name"].unique(maintain_order=True):
        run_hits = hits.filter(pl.col("run_name") == name)
        answered = ranked.filter(pl.col("run_name") == name)["query_id"]
        n_queries = _n_judged_queries(num_rel["query_id"], answered, config)
        curves.append(_cumulative_recall(name, run_hits, n_queries, depth))
    return (
        pl.concat(curves)
        if curves
        else pl.DataFrame(schema={"run_name": pl.String, "k": pl.Int64, "recall": pl.Float64})
    )


def _evaluate_one(
    evaluator: ir_measures.providers.Evaluator,
    measures: list[str],
    name: str,
    ordered: pl.DataFrame,
    config: EvaluationConfig,
) -> pl.DataFrame:
    """Rows of one run, sorted by query id and then in the order `measures` were asked for."""
    column = {measure: i for i, measure in enumerate(measures)}
    metrics = evaluator.iter_calc(_run_dict(ordered))
    rows = sorted(
        ((m.query_id, str(m.measure), float(m.value)) for m in metrics),
        key=lambda row: (row[0], column[row[1]]),
    )
    frame = pl.DataFrame(rows, schema={"query_id": pl.String, "measure": pl.String, "value": pl.Float64}, orient="row")
    if not config.count_missing_as_zero:
        frame = frame.filter(pl.col("query_id").is_in(ordered["query_id"].unique().implode()))
    return frame.select(pl.lit(name, pl.String).alias("run_name"), pl.all())


def _run_dict(ordered: pl.DataFrame) -> dict[str, dict[str, float]]:
    """pytrec_eval's dict of dicts; scores are minus the trec_eval position (strictly decreasing)."""
    query_ids = ordered["query_id"].to_list()
    doc_ids = ordered["doc_id"].to_list()
    scores = (-ordered["position"].cast(pl.Float64)).to_list()
    bounds = _group_bounds(ordered["query_id"])
    return {query_ids[a]: dict(zip(doc_ids[a:b], scores[a:b])) for a, b in bounds}


def _qrels_dict(qrels: pl.DataFrame) -> dict[str, dict[str, int]]:
    ordered = qrels.sort("query_id", maintain_order=True)
    query_ids = ordered["query_id"].to_list()
    doc_ids = ordered["doc_id"].to_list()
    relevance = ordered["relevance"].to_list()
    bounds = _group_bounds(ordered["query_id"])
    return {query_ids[a]: dict(zip(doc_ids[a:b], relevance[a:b])) for a, b in bounds}


def _group_bounds(sorted_keys: pl.Series) -> list[tuple[int, int]]:
    """(start, end) of each run of equal values in an already grouped column."""
    if sorted_keys.len() == 0:
        return []
    change = sorted_keys.rle_id().to_numpy()
    starts = np.flatnonzero(np.diff(change, prepend=-1))
    ends = np.append(starts[1:], sorted_keys.len())
    return list(zip(starts.tolist(), ends.tolist()))


def _n_judged_queries(judged: pl.Series, answered: pl.Series, config: EvaluationConfig) -> int:
    if config.count_missing_as_zero:
        return judged.len()
    return int(judged.is_in(answered.unique().implode()).sum())


def _cumulative_recall(name: str, hits: pl.DataFrame, n_queries: int, depth: int) -> pl.DataFrame:
    positions = hits["position"].to_numpy()
    weights = 1.0 / hits["num_rel"].to_numpy()
    gained = np.bincount(positions, weights=weights, minlength=depth + 1)[1 : depth + 1]
    recall = np.cumsum(gained) / n_queries if n_queries else np.zeros(depth)
    return pl.DataFrame(
        {"run_name": [name] * depth, "k": np.arange(1, depth + 1), "recall": recall},
        schema={"run_name": pl.String, "k": pl.Int64, "recall": pl.Float64},
    )


def _check_run(run: pl.DataFrame) -> None:
    validate(run, _RUN_COLUMNS, "run")
    bad = run.filter(~pl.col("score").is_finite())
    if bad.height:
        row = bad.row(0, named=True)
        raise ValueError(
            f"run {row['run_name']!r}: score {row['score']} is not finite "
            f"(query {row['query_id']!r}, doc {row['doc_id']!r}); {bad.height} such rows"
        )
    _check_unique(run, ["run_name", "query_id", "doc_id"], "run")


def _check_qrels(qrels: pl.DataFrame) -> None:
    validate(qrels, QRELS, "qrels")
    _check_unique(qrels, ["query_id", "doc_id"], "qrels")


def _check_unique(frame: pl.DataFrame, key: list[str], table: str) -> None:
    if frame.select(key).n_unique() == frame.height:
        return
    duplicated = frame.filter(pl.struct(key).is_duplicated())
    if duplicated.height:
        where = ", ".join(f"{k}={v!r}" for k, v in duplicated.select(key).row(0, named=True).items())
        raise ValueError(f"{table}: duplicate rows for ({', '.join(key)}): first at {where}")
