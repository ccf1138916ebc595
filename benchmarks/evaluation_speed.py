"""Speed of `evaluate_run` against ir_measures called directly, on one synthetic 1M-line run.

Both sides compute DEFAULT_MEASURES over the same run and qrels in this process. ir_measures gets
its inputs ready-made (built before the clock starts) in two forms: pandas DataFrames, what most
users pass, and pytrec_eval's dict of dicts, its fastest input. Our time includes validation,
trec_eval ordering and the conversion from Polars (`evaluate_run` computes these measures in
`dagster_ir.evaluation.vectorised`). The run's scores are distinct (in float32 too, as trec_eval
keeps them), so ir_measures' own order is trec_eval's, and every per-query value of ours is
compared with ir_measures' (`iter_calc` on the dicts, outside the clock): the count of values that
differ at all is printed.

    .venv/bin/python benchmarks/evaluation_speed.py [--queries 1000] [--depth 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import ir_measures
import numpy as np
import polars as pl
from ratios import print_ratio  # benchmarks/ratios.py: the line format make bench reads

from dagster_ir.evaluation import DEFAULT_MEASURES, aggregate, evaluate_run


def synthetic_run(n_queries: int, depth: int, seed: int = 0) -> pl.DataFrame:
    """`depth` scored documents for each of `n_queries` queries, drawn from a 10x larger pool."""
    rng = np.random.default_rng(seed)
    query_ids = np.repeat(np.arange(n_queries), depth).astype(str)
    doc_ids = np.concatenate([rng.choice(depth * 10, depth, replace=False) for _ in range(n_queries)])
    scores = rng.permutation(n_queries * depth) / (n_queries * depth)  # distinct, in float32 too
    run = pl.DataFrame({"query_id": query_ids, "doc_id": doc_ids.astype(str), "score": scores})
    return run.with_columns(
        rank=pl.col("score").rank("ordinal", descending=True).over("query_id").cast(pl.Int32),
        run_name=pl.lit("synthetic"),
    )


def synthetic_qrels(run: pl.DataFrame, per_query: int = 20, seed: int = 1) -> pl.DataFrame:
    """`per_query` judged documents per query from the run, graded 0..2."""
    rng = np.random.default_rng(seed)
    judged = run.group_by("query_id").agg(pl.col("doc_id").sample(per_query, seed=seed)).explode("doc_id")
    return judged.with_columns(relevance=pl.Series(rng.integers(0, 3, judged.height), dtype=pl.Int32))


def timed(function: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Best wall time of `repeat` calls (the machine is shared) and the last result."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="report the best of this many calls")
    args = parser.parse_args()

    run = synthetic_run(args.queries, args.depth)
    qrels = synthetic_qrels(run)
    measures = [ir_measures.parse_measure(m) for m in DEFAULT_MEASURES]
    run_pd, qrels_pd = run.select("query_id", "doc_id", "score").to_pandas(), qrels.to_pandas()
    run_dict = {q: dict(zip(d, s)) for q, d, s in run.group_by("query_id").agg("doc_id", "score").iter_rows()}
    qrels_dict = {q: dict(zip(d, r)) for q, d, r in qrels.group_by("query_id").agg("doc_id", "relevance").iter_rows()}

    ours_s, per_query = timed(lambda: evaluate_run(run, qrels, DEFAULT_MEASURES), args.repeat)
    pandas_s, direct = timed(lambda: ir_measures.calc_aggregate(measures, qrels_pd, run_pd), args.repeat)
    dict_s, _ = timed(lambda: ir_measures.calc_aggregate(measures, qrels_dict, run_dict), args.repeat)

    theirs = {(m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc(measures, qrels_dict, run_dict)}
    mine = {(q, m): v for _, q, m, v in per_query.iter_rows()}
    if mine.keys() != theirs.keys():
        raise SystemExit(f"per-query rows differ: {len(mine.keys() ^ theirs.keys())} (query, measure) pairs")
    differing = sum(mine[key] != theirs[key] for key in mine)
    ours = dict(aggregate(per_query).select("measure", "mean").iter_rows())
    worst = max(abs(ours[str(m)] - direct[m]) for m in measures)
    print(f"run: {run.height:,} lines, {args.queries} queries; qrels: {qrels.height:,} lines")
    print(f"evaluate_run (polars in)            {ours_s:7.2f} s")
    print(f"ir_measures.calc_aggregate (pandas) {pandas_s:7.2f} s   speed ours/direct = {pandas_s / ours_s:.2f}")
    print(f"ir_measures.calc_aggregate (dicts)  {dict_s:7.2f} s   speed ours/direct = {dict_s / ours_s:.2f}")
    print(f"largest difference of a mean vs ir_measures: {worst:.2e}")
    print(f"per-query values: {len(mine):,}, differing from ir_measures' (iter_calc, dicts): {differing}")
    print_ratio("evaluation speed, ours / ir_measures (pandas)", pandas_s / ours_s)
    print_ratio("evaluation speed, ours / ir_measures (dicts)", dict_s / ours_s)


if __name__ == "__main__":
    main()
