import numpy as np
import polars as pl
import pytest
from scipy import stats

from dagster_ir.evaluation import SignificanceConfig, adjust_p_values, bootstrap_ci, compare_to_baseline, paired_ttest
from dagster_ir.schemas import COMPARISON_EVAL, PER_QUERY_EVAL


def per_query_table(runs: dict[str, dict[str, np.ndarray]]) -> pl.DataFrame:
    """{run: {measure: values per query q0..qn}} as a PER_QUERY_EVAL frame."""
    rows = [
        (run, f"q{i}", measure, float(value))
        for run, by_measure in runs.items()
        for measure, vector in by_measure.items()
        for i, value in enumerate(vector)
    ]
    return pl.DataFrame(rows, schema=PER_QUERY_EVAL, orient="row")


def row(comparison: pl.DataFrame, run: str, measure: str) -> dict:
    return comparison.filter((pl.col("run_name") == run) & (pl.col("measure") == measure)).row(0, named=True)


RNG = np.random.default_rng(7)
BASE = RNG.random(40)
BETTER = np.clip(BASE + 0.15 + RNG.normal(0, 0.05, 40), 0, 1)
NOISY = np.clip(BASE + RNG.normal(0, 0.2, 40), 0, 1)
FAST = SignificanceConfig(n_resamples=500)


def test_paired_ttest_equals_scipy():
    t, p = paired_ttest(NOISY, BASE)
    expected = stats.ttest_rel(NOISY, BASE)
    assert t == pytest.approx(expected.statistic, rel=1e-12)
    assert p == pytest.approx(expected.pvalue, rel=1e-12)


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # scipy, on the constant difference
def test_paired_ttest_is_undefined_for_equal_vectors_or_a_single_pair():
    assert np.isnan(paired_ttest(BASE, BASE)[1])
    assert paired_ttest(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 2.0])) == (np.inf, 0.0)  # as scipy
    assert np.isnan(paired_ttest(BASE[:1], BASE[:1] + 1)[1])
    with pytest.raises(ValueError, match="differ in shape"):
        paired_ttest(BASE, BASE[:3])


def test_comparison_p_values_equal_scipy_on_the_same_vectors():
    table = per_query_table({"bm25": {"AP": BASE}, "better": {"AP": BETTER}, "noisy": {"AP": NOISY}})
    comparison = compare_to_baseline(table, "bm25", config=FAST)
    assert comparison.schema == pl.Schema(COMPARISON_EVAL)
    assert comparison["run_name"].to_list() == ["bm25", "better", "noisy"]
    for run, vector in (("better", BETTER), ("noisy", NOISY)):
        got = row(comparison, run, "AP")
        assert got["p_value"] == pytest.approx(stats.ttest_rel(vector, BASE).pvalue, rel=1e-12)
        assert got["p_adjusted"] == got["p_value"]
        assert got["significant"] == (got["p_value"] < 0.05)
        assert got["mean"] == pytest.approx(vector.mean())
        assert got["delta"] == pytest.approx(vector.mean() - BASE.mean())
    assert row(comparison, "better", "AP")["significant"] is True
    assert row(comparison, "noisy", "AP")["significant"] is False


def test_the_baseline_row_has_no_test():
    comparison = compare_to_baseline(per_query_table({"bm25": {"AP": BASE}, "x": {"AP": NOISY}}), "bm25", config=FAST)
    base = row(comparison, "bm25", "AP")
    assert base["delta"] == 0.0 and base["p_value"] is None and base["delta_ci_low"] is None
    assert base["significant"] is False
    assert base["ci_low"] < base["mean"] < base["ci_high"]


def test_tests_use_the_queries_shared_with_the_baseline():
    table = per_query_table({"bm25": {"AP": BASE}, "x": {"AP": NOISY}})
    table = table.filter(~((pl.col("run_name") == "x") & pl.col("query_id").is_in(["q0", "q1", "q2"])))
    got = row(compare_to_baseline(table, "bm25", config=FAST), "x", "AP")
    assert (got["n_queries"], got["n_common"]) == (37, 37)
    assert got["p_value"] == pytest.approx(stats.ttest_rel(NOISY[3:], BASE[3:]).pvalue, rel=1e-12)
    assert got["delta"] == pytest.approx((NOISY[3:] - BASE[3:]).mean())
    assert got["mean"] == pytest.approx(NOISY[3:].mean())


def test_identical_runs_are_not_significant():
    got = row(compare_to_baseline(per_query_table({"b": {"AP": BASE}, "c": {"AP": BASE}}), "b", config=FAST), "c", "AP")
    assert got["p_value"] is None and got["significant"] is False and got["delta"] == 0.0


def test_bonferroni_and_holm_adjust_a_family_of_p_values():
    p = np.array([0.01, 0.04, 0.03, np.nan])
    np.testing.assert_allclose(adjust_p_values(p, "none"), p)
    np.testing.assert_allclose(adjust_p_values(p, "bonferroni"), [0.03, 0.12, 0.09, np.nan])
    # Holm: sorted 0.01*3, 0.03*2, 0.04*1 -> running max 0.03, 0.06, 0.06
    np.testing.assert_allclose(adjust_p_values(p, "holm"), [0.03, 0.06, 0.06, np.nan])
    np.testing.assert_allclose(adjust_p_values(np.array([0.5, 0.9]), "bonferroni"), [1.0, 1.0])


def test_the_correction_setting_changes_which_runs_are_significant():
    # two runs just below 0.05 each: significant alone, not after Bonferroni over the two
    runs = {"base": {"AP": BASE}}
    for name, target in (("r1", 0.03), ("r2", 0.04)):
        runs[name] = {"AP": _vector_with_p(target)}
    table = per_query_table(runs)
    plain = compare_to_baseline(table, "base", config=FAST)
    corrected = compare_to_baseline(table, "base", config=SignificanceConfig(n_resamples=500, correction="bonferroni"))
    assert plain.filter(pl.col("run_name") != "base")["significant"].to_list() == [True, True]
    assert corrected.filter(pl.col("run_name") != "base")["significant"].to_list() == [False, False]
    assert row(corrected, "r1", "AP")["p_adjusted"] == pytest.approx(2 * row(plain, "r1", "AP")["p_value"])


def _vector_with_p(target: float) -> np.ndarray:
    """BASE plus a shift chosen so that the paired t-test p-value is about `target`."""
    noise = np.random.default_rng(1).normal(0, 0.1, BASE.size)
    noise -= noise.mean()
    shift = stats.t.isf(target / 2, BASE.size - 1) * noise.std(ddof=1) / np.sqrt(BASE.size)
    return BASE + noise + shift


def test_bootstrap_ci_contains_the_mean_and_is_seeded():
    low, high = bootstrap_ci(NOISY, n_resamples=2000, seed=3)
    assert low < NOISY.mean() < high
    assert bootstrap_ci(NOISY, n_resamples=2000, seed=3) == (low, high)
    assert bootstrap_ci(NOISY, n_resamples=2000, seed=4) != (low, high)
    narrow = bootstrap_ci(NOISY, n_resamples=2000, seed=3, confidence=0.5)
    assert low < narrow[0] < narrow[1] < high


def test_bootstrap_ci_is_the_percentile_interval_of_resampled_means():
    rng = np.random.default_rng(11)
    indices = rng.integers(0, NOISY.size, size=(300, NOISY.size))
    expected = np.percentile(NOISY[indices].mean(axis=1), [2.5, 97.5])
    assert bootstrap_ci(NOISY, n_resamples=300, seed=11) == pytest.approx(tuple(expected), rel=1e-12)


def test_bootstrap_ci_of_stacked_columns_equals_each_alone():
    low, high = bootstrap_ci(np.column_stack([BASE, NOISY]), n_resamples=300, seed=2)
    assert (low[1], high[1]) == pytest.approx(bootstrap_ci(NOISY, n_resamples=300, seed=2), rel=1e-12)
    assert bootstrap_ci(np.full(5, 0.25), n_resamples=50) == (0.25, 0.25)


def test_comparison_intervals_match_bootstrap_ci_with_the_config():
    config = SignificanceConfig(n_resamples=400, seed=9, confidence=0.9)
    table = per_query_table({"b": {"AP": BASE}, "x": {"AP": NOISY}})
    got = row(compare_to_baseline(table, "b", config=config), "x", "AP")
    mean = bootstrap_ci(NOISY, n_resamples=400, seed=9, confidence=0.9)
    assert (got["ci_low"], got["ci_high"]) == pytest.approx(mean)
    delta = bootstrap_ci(NOISY - BASE, n_resamples=400, seed=9, confidence=0.9)
    assert (got["delta_ci_low"], got["delta_ci_high"]) == pytest.approx(delta)
    assert got["delta_ci_low"] < got["delta"] < got["delta_ci_high"]


def test_measures_keep_the_given_order_and_bad_names_are_refused():
    table = per_query_table({"b": {"AP": BASE, "nDCG@10": NOISY}, "x": {"AP": NOISY, "nDCG@10": BASE}})
    comparison = compare_to_baseline(table, "b", ["nDCG@10", "AP"], config=FAST)
    assert comparison["measure"].unique(maintain_order=True).to_list() == ["nDCG@10", "AP"]
    with pytest.raises(ValueError, match=r"baseline run 'bm25' not in .*\['b', 'x'\]"):
        compare_to_baseline(table, "bm25")
    with pytest.raises(ValueError, match=r"measures \['P@10'\] not in"):
        compare_to_baseline(table, "b", ["P@10"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0}, "alpha"),
        ({"correction": "sidak"}, "correction"),
        ({"n_resamples": 0}, "n_resamples"),
        ({"confidence": 1.0}, "confidence"),
    ],
)
def test_config_refuses_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SignificanceConfig(**kwargs)


def test_a_repeated_per_query_value_is_refused():
    table = per_query_table({"b": {"AP": BASE}, "x": {"AP": NOISY}})
    with pytest.raises(ValueError, match="more than one value for .*'run_name': 'x', 'query_id': 'q0'"):
        compare_to_baseline(pl.concat([table, table.filter(pl.col("run_name") == "x").head(1)]), "b", config=FAST)
