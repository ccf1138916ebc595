"""The Table-1-shaped table (significance vs naive and the best baseline) and the tau sensitivity plot."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from dagster_ir.evaluation import SignificanceConfig
from dagster_ir.methods.cet.report import best_baseline, cet_taus, table1, tau_sensitivity_plot, training_curves_plot
from dagster_ir.schemas import PER_QUERY_EVAL

N = 20
RNG = np.random.default_rng(0)
BASE = RNG.uniform(0.2, 0.6, N)
# naive; zhan a little worse; rance the best baseline (+0.05, noisy); cet +0.1 over naive on every query.
VALUES = {
    "naive": BASE,
    "zhan": BASE - 0.02 + RNG.normal(0, 0.003, N),
    "rocketqa": BASE + RNG.normal(0, 0.05, N),
    "rance": BASE + 0.05 + RNG.normal(0, 0.01, N),
    "cet": BASE + 0.1 + RNG.normal(0, 0.005, N),
    "cet-tau0.5": BASE + 0.08,
    "cet-tau2": BASE + 0.06,
}


def per_query(measures=("RR@10", "nDCG@10")) -> pl.DataFrame:
    rows = [(run, f"q{i}", m, float(v[i] + (0.01 if m == "nDCG@10" else 0.0)))
            for run, v in VALUES.items() for m in measures for i in range(N)]
    return pl.DataFrame(rows, schema=PER_QUERY_EVAL, orient="row")


def test_the_best_baseline_is_the_highest_of_zhan_rocketqa_rance() -> None:
    assert best_baseline(per_query(), "RR@10") == "rance"
    assert best_baseline(per_query().filter(pl.col("run_name") == "naive"), "RR@10") is None


def test_table1_marks_significant_improvements_over_naive_and_the_best_baseline() -> None:
    runs = ["naive", "zhan", "rocketqa", "rance", "cet"]
    table = table1(per_query(), runs, measures=["RR@10", "nDCG@10"], config=SignificanceConfig(n_resamples=200))
    assert table.best_baseline == "rance"
    frame = table.frame
    assert frame["system"].unique(maintain_order=True).to_list() == [f"dense + {r}" for r in runs]
    row = {(r["run_name"], r["measure"]): r for r in frame.iter_rows(named=True)}
    assert row["cet", "RR@10"]["mean"] == pytest.approx(float(VALUES["cet"].mean()))
    assert row["cet", "RR@10"]["better_than_naive"] and row["cet", "RR@10"]["better_than_best"]
    assert row["rance", "RR@10"]["better_than_naive"] and not row["rance", "RR@10"]["better_than_best"]
    assert not row["zhan", "RR@10"]["better_than_naive"]  # significantly *worse* is not marked
    assert row["naive", "RR@10"]["p_naive"] is None and row["rance", "nDCG@10"]["p_best"] is None
    markdown = table.to_markdown()
    assert "| Method | MRR@10 | NDCG@10 |" in markdown
    cet_line = next(line for line in markdown.splitlines() if line.startswith("| dense + cet |"))
    assert cet_line.count("**") == 4 and cet_line.count("†‡") == 2  # best in both columns, both marks
    alone = table1(per_query(), ["naive", "cet"], retriever="naive", measures=["RR@10"])
    assert alone.frame["system"].to_list() == ["naive", "naive + cet"]  # the retriever's own row
    with pytest.raises(ValueError, match="not in the per-query table"):
        table1(per_query(), ["naive", "dml"])


def test_tau_plot_puts_each_cet_run_at_its_tau() -> None:
    taus = {"cet": 1.0, "cet-tau0.5": 0.5, "cet-tau2": 2.0}
    figure = tau_sensitivity_plot(per_query(), taus, "RR@10", references=("naive",))
    line, naive = figure.axes[0].get_lines()
    assert line.get_xdata().tolist() == [0.5, 1.0, 2.0]
    expected = [VALUES[r].mean() for r in ("cet-tau0.5", "cet", "cet-tau2")]
    assert line.get_ydata().tolist() == pytest.approx(expected)
    assert naive.get_ydata()[0] == pytest.approx(VALUES["naive"].mean())
    with pytest.raises(ValueError, match="cet-tau9"):
        tau_sensitivity_plot(per_query(), {"cet-tau9": 9.0})


def test_taus_come_from_the_manifest_and_curves_plot_per_ranker() -> None:
    manifest = pl.DataFrame({"run_name": ["naive", "cet", "cet-tau2"], "method": ["naive", "cet", "cet"],
                             "tau": [None, 1.0, 2.0]})
    assert cet_taus(manifest) == {"cet": 1.0, "cet-tau2": 2.0}
    figure = training_curves_plot({"naive": [3.0, 2.0, 1.0], "cet": [1.0]}, smooth=2)
    assert [line.get_label() for line in figure.axes[0].get_lines()] == ["naive", "cet"]
    assert figure.axes[0].get_lines()[0].get_ydata().tolist() == [2.5, 1.5]
