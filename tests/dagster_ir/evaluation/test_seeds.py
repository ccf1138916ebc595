"""Seeds: each (run, seed) evaluated alone, per-query means over seeds, the spread of per-seed means."""

import math

import polars as pl
import pytest

from dagster_ir.evaluation import average_seeds, evaluate_seeds, seed_spread

QRELS = pl.DataFrame(
    {"query_id": ["q1", "q2"], "doc_id": ["d1", "d2"], "relevance": [1, 1]}, schema_overrides={"relevance": pl.Int32}
)


def _run(name, seed, ranking):
    """ranking: query -> doc ids in rank order."""
    rows = [(q, d, float(10 - r), r + 1, name, seed) for q, docs in ranking.items() for r, d in enumerate(docs)]
    return pl.DataFrame(
        rows,
        schema={
            "query_id": pl.String,
            "doc_id": pl.String,
            "score": pl.Float64,
            "rank": pl.Int64,
            "run_name": pl.String,
            "seed": pl.Int64,
        },
        orient="row",
    )


def test_seed_averaged_values_and_spread_by_hand():
    # seed 0: q1 relevant at 1 (RR 1), q2 at 2 (RR 1/2); seed 1: q1 at 2 (1/2), q2 at 1 (1). bm25 has no seed.
    runs = pl.concat(
        [
            _run("m", 0, {"q1": ["d1", "x"], "q2": ["x", "d2"]}),
            _run("m", 1, {"q1": ["x", "d1"], "q2": ["d2", "x"]}),
            _run("bm25", None, {"q1": ["x", "y", "d1"], "q2": ["d2"]}),
        ]
    )
    per_seed = evaluate_seeds(runs, QRELS, ["RR@10"])
    assert per_seed.height == 6
    mean = average_seeds(per_seed).sort("run_name", "query_id")
    assert mean.filter(pl.col("run_name") == "m")["value"].to_list() == [0.75, 0.75]
    assert mean.filter(pl.col("run_name") == "bm25")["value"].to_list() == pytest.approx([1 / 3, 1.0])
    spread = {r["run_name"]: r for r in seed_spread(per_seed).iter_rows(named=True)}
    assert spread["m"]["seeds"] == 2 and spread["m"]["mean"] == 0.75 and spread["m"]["sd"] == 0.0
    assert spread["bm25"]["seeds"] == 1 and spread["bm25"]["sd"] is None


def test_spread_is_the_sample_sd_of_per_seed_means():
    runs = pl.concat(
        [
            _run("m", 0, {"q1": ["d1"], "q2": ["d2"]}),  # mean RR 1
            _run("m", 1, {"q1": ["x", "d1"], "q2": ["d2"]}),  # mean RR 0.75
            _run("m", 2, {"q1": ["x", "d1"], "q2": ["x", "d2"]}),
        ]
    )  # mean RR 0.5
    row = seed_spread(evaluate_seeds(runs, QRELS, ["RR@10"])).row(0, named=True)
    assert (row["seeds"], row["mean"], row["min"], row["max"]) == (3, 0.75, 0.5, 1.0)
    assert row["sd"] == pytest.approx(math.sqrt(((0.25**2) * 2) / 2))


def test_a_query_scored_twice_under_one_seed_is_an_error():
    run = _run("m", 0, {"q1": ["d1"]})
    with pytest.raises(ValueError, match="two units scored the same query"):
        evaluate_seeds(pl.concat([run, run]), QRELS, ["RR@10"])


def test_runs_without_a_seed_column_evaluate_as_one_seed():
    run = _run("m", 0, {"q1": ["d1"], "q2": ["x", "d2"]}).drop("seed")
    per_seed = evaluate_seeds(run, QRELS, ["RR@10"])
    assert per_seed["seed"].null_count() == 2
    assert average_seeds(per_seed)["value"].to_list() == [1.0, 0.5]


def test_significance_runs_on_seed_averaged_per_query_values():
    """The paired t-test compares per-query means over seeds with the baseline: one pair per query."""
    from scipy import stats

    from dagster_ir.evaluation import compare_to_baseline

    qrels = pl.DataFrame(
        {"query_id": [f"q{i}" for i in range(6)], "doc_id": ["d"] * 6, "relevance": [1] * 6},
        schema_overrides={"relevance": pl.Int32},
    )
    depth = {0: [1, 2, 1, 3, 1, 2], 1: [2, 1, 1, 1, 2, 1], 2: [1, 1, 4, 1, 1, 1]}  # rank of d per query, per seed
    bm25 = [3, 2, 5, 2, 4, 3]

    def ranking(ranks):
        return {f"q{i}": [f"x{j}" for j in range(r - 1)] + ["d"] for i, r in enumerate(ranks)}

    runs = [_run("m", seed, ranking(ranks)) for seed, ranks in depth.items()]
    runs.append(_run("bm25", None, ranking(bm25)))
    per_query = average_seeds(evaluate_seeds(pl.concat(runs), qrels, ["RR@10"]))
    expected_m = [sum(1 / depth[s][i] for s in depth) / 3 for i in range(6)]
    got = per_query.filter(pl.col("run_name") == "m").sort("query_id")["value"].to_list()
    assert got == pytest.approx(expected_m)
    row = compare_to_baseline(per_query, "bm25", ["RR@10"]).filter(pl.col("run_name") == "m").row(0, named=True)
    t, p = stats.ttest_rel(expected_m, [1 / r for r in bm25])
    assert row["n_common"] == 6  # queries, not queries x seeds
    assert row["t_statistic"] == pytest.approx(t) and row["p_value"] == pytest.approx(p)
    pooled = stats.ttest_rel([1 / depth[s][i] for s in depth for i in range(6)], [1 / r for r in bm25] * 3)
    assert row["p_value"] != pytest.approx(pooled.pvalue)  # not the test on seeds pooled as extra queries
