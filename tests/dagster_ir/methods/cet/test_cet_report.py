"""The Table-1-shaped table (significance vs DML and the dev-chosen best baseline), Figure 4 and the tau plot."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from dagster_ir.evaluation import SignificanceConfig
from dagster_ir.methods.cet.report import (
    best_baseline,
    cet_taus,
    dev_best_baseline,
    pool_units,
    sweeps_plot,
    table1,
    tau_sensitivity_plot,
    training_curves_plot,
)
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
    "dml": BASE + 0.01 + RNG.normal(0, 0.005, N),
    "cet": BASE + 0.1 + RNG.normal(0, 0.005, N),
    "cet-tau0.5": BASE + 0.08,
    "cet-tau2": BASE + 0.06,
    "bm25+bert": BASE - 0.05,
}


def per_query(measures=("RR@10", "nDCG@10")) -> pl.DataFrame:
    rows = [
        (run, f"q{i}", m, float(v[i] + (0.01 if m == "nDCG@10" else 0.0)))
        for run, v in VALUES.items()
        for m in measures
        for i in range(N)
    ]
    return pl.DataFrame(rows, schema=PER_QUERY_EVAL, orient="row")


def lab_manifest() -> pl.DataFrame:
    """What the lab's manifest says on dev: zhan is the best baseline there (whatever test says)."""
    rows = [  # run_name, method, tau, table, sweep, sweep_value, dev_mrr10, notes
        ("naive", "naive", None, True, "", None, 0.30, "{}"),
        ("zhan", "zhan", None, True, "", None, 0.36, "{}"),
        ("rocketqa-q0.5", "rocketqa", None, False, "eta", 0.5, 0.31, '{"eta": -1.5}'),
        ("rocketqa-q0.9", "rocketqa", None, False, "eta", 0.9, 0.34, '{"eta": 0.25}'),
        ("rance", "rance", None, True, "", None, 0.33, "{}"),
        ("dml", "dml", None, True, "", None, 0.36, "{}"),
        ("cet", "cet", 1.0, True, "tau", 1.0, 0.40, "{}"),
        ("cet-tau0.5", "cet", 0.5, False, "tau", 0.5, 0.38, "{}"),
        ("cet-tau2", "cet", 2.0, False, "tau", 2.0, 0.39, "{}"),
        ("rocketqa", "rocketqa", None, True, "", None, 0.34, '{"eta": 0.25, "eta_quantile": 0.9}'),
        ("bm25+bert", "zhan", None, True, "", None, None, "{}"),
    ]
    schema = {
        "run_name": pl.String,
        "method": pl.String,
        "tau": pl.Float64,
        "table": pl.Boolean,
        "sweep": pl.String,
        "sweep_value": pl.Float64,
        "dev_mrr10": pl.Float64,
        "notes": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def test_the_best_baseline_is_chosen_on_dev_never_on_the_reported_values() -> None:
    assert best_baseline(per_query(), "RR@10") == "rance"  # on these (test) values rance leads
    assert dev_best_baseline(lab_manifest()) == "zhan"  # on dev zhan and dml tie at 0.36: the first listed
    no_dev = lab_manifest().with_columns(dev_mrr10=pl.lit(None, pl.Float64))
    assert dev_best_baseline(no_dev) is None
    assert best_baseline(per_query().filter(pl.col("run_name") == "naive"), "RR@10") == "naive"
    assert best_baseline(per_query().filter(pl.col("run_name") == "cet"), "RR@10") is None


def test_table1_marks_significant_improvements_over_dml_and_the_dev_best_baseline() -> None:
    runs = ["bm25+bert", "naive", "zhan", "rocketqa", "rance", "dml", "cet"]
    table = table1(
        per_query(),
        runs,
        measures=["RR@10", "nDCG@10"],
        best=dev_best_baseline(lab_manifest()),
        config=SignificanceConfig(n_resamples=200),
    )
    assert table.best_baseline == "zhan" and table.reference == "dml"
    frame = table.frame
    assert frame["system"].unique(maintain_order=True).to_list() == ["bm25 + bert", *(f"dense + {r}" for r in runs[1:])]
    row = {(r["run_name"], r["measure"]): r for r in frame.iter_rows(named=True)}
    assert row["cet", "RR@10"]["mean"] == pytest.approx(float(VALUES["cet"].mean()))
    assert row["cet", "RR@10"]["better_than_reference"] and row["cet", "RR@10"]["better_than_best"]
    assert row["rance", "RR@10"]["better_than_reference"] and row["rance", "RR@10"]["better_than_best"]
    assert not row["naive", "RR@10"]["better_than_reference"]  # significantly *worse* is not marked
    assert row["dml", "RR@10"]["p_reference"] is None and row["zhan", "nDCG@10"]["p_best"] is None
    markdown = table.to_markdown()
    assert "| Method | MRR@10 | NDCG@10 |" in markdown and "best baseline on dev (zhan)" in markdown
    cet_line = next(line for line in markdown.splitlines() if line.startswith("| dense + cet |"))
    assert cet_line.count("**") == 4 and cet_line.count("†‡") == 2  # best in both columns, both marks
    alone = table1(per_query(), ["naive", "cet"], retriever="naive", reference="naive", measures=["RR@10"])
    assert alone.frame["system"].to_list() == ["naive", "naive + cet"]  # the retriever's own row
    assert alone.frame["p_best"].is_null().all()  # no best baseline given: no ‡
    with pytest.raises(ValueError, match="not in the per-query table"):
        table1(per_query().filter(pl.col("run_name") != "dml"), ["naive", "cet"])


def test_figure4_plots_the_dev_sweeps_and_rings_the_chosen_values() -> None:
    figure = sweeps_plot(lab_manifest())
    tau_axis, eta_axis = figure.axes[:2]
    tau_line = tau_axis.get_lines()[0]
    assert tau_line.get_xdata().tolist() == [0.5, 1.0, 2.0]
    assert tau_line.get_ydata().tolist() == pytest.approx([0.38, 0.40, 0.39])
    eta_line, ring = eta_axis.get_lines()[:2]
    assert eta_line.get_xdata().tolist() == [0.5, 0.9] and eta_line.get_ydata().tolist() == pytest.approx([0.31, 0.34])
    assert ring.get_xdata().tolist() == [0.9]  # rocketqa's chosen eta
    assert [t.get_text() for t in eta_axis.get_xticklabels()] == ["0.5\n(-1.5)", "0.9\n(0.25)"]
    assert eta_axis.get_lines()[-1].get_ydata()[0] == pytest.approx(0.30)  # naive's dev value, dashed
    with pytest.raises(ValueError, match="no tau or eta sweep"):
        sweeps_plot(lab_manifest().filter(pl.col("sweep") == ""))


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
    manifest = pl.DataFrame(
        {"run_name": ["naive", "cet", "cet-tau2"], "method": ["naive", "cet", "cet"], "tau": [None, 1.0, 2.0]}
    )
    assert cet_taus(manifest) == {"cet": 1.0, "cet-tau2": 2.0}
    figure = training_curves_plot({"naive": [3.0, 2.0, 1.0], "cet": [1.0]}, smooth=2)
    assert [line.get_label() for line in figure.axes[0].get_lines()] == ["naive", "cet"]
    assert figure.axes[0].get_lines()[0].get_ydata().tolist() == [2.5, 1.5]


def test_units_pool_into_one_row_per_ranker_with_the_mean_dev_score() -> None:
    one = pl.DataFrame(
        {
            "run_name": ["naive", "zhan", "rance"],
            "dev_mrr10": [0.30, 0.20, None],
            "notes": ["a", "b", "c"],
            "unit": ["c/fold-0/seed-0"] * 3,
        }
    )
    other = one.with_columns(dev_mrr10=pl.Series([0.10, 0.40, 0.5]), notes=pl.lit("z"), unit=pl.lit("c/fold-1/seed-0"))
    pooled = pool_units(pl.concat([one, other]))
    assert pooled.columns == one.columns and pooled["run_name"].to_list() == ["naive", "zhan", "rance"]
    assert pooled["dev_mrr10"].to_list() == pytest.approx([0.20, 0.30, 0.5])  # a missing score is left out
    assert pooled["notes"].to_list() == ["a", "b", "c"]  # the first unit's
    assert dev_best_baseline(pooled) == "rance" and dev_best_baseline(one) == "naive"
    assert pool_units(one).equals(one) and pool_units(one.drop("unit")).equals(one.drop("unit"))
