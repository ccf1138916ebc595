import matplotlib.figure
import polars as pl

from assets.model_report import _sections
from dagster_ir.evaluation import ReportFigure, SignificanceConfig
from dagster_ir.schemas import PER_QUERY_EVAL


def _runs(*names):
    return pl.DataFrame({"run_name": list(names)})


def test_sections_pick_their_runs_and_baselines():
    runs = {"bm25": 0.3, "dense": 0.5, "ghrm": 0.35, "bert": 0.4, "php": 0.45, "naive": 0.2, "zhan": 0.25, "cet": 0.3}
    measures = ["RR@10", "RR@100", "nDCG@10", "nDCG@100", "nDCG@20", "P@20", "AP", "R@100", "R@1000"]
    rows = [(run, f"q{i}", m, v + 0.01 * i) for run, v in runs.items() for i in range(5) for m in measures]
    per_query = pl.DataFrame(rows, schema=list(PER_QUERY_EVAL), orient="row").cast(PER_QUERY_EVAL)
    inputs = {"candidate_runs": _runs("bm25", "dense"), "reranked_runs": _runs("bert", "php"),
              "fusion_runs": _runs(), "ghrm_runs": _runs("ghrm"), "cet_runs": _runs("naive", "zhan", "cet")}
    recall = ReportFigure.from_figure("recall", "Recall", matplotlib.figure.Figure())
    reports = _sections(per_query, inputs, SignificanceConfig(n_resamples=100), recall)
    shown = {r.title: (r.baseline, sorted(r.comparison["run_name"].unique())) for r in reports}
    assert shown["First-stage retrieval"] == ("bm25", ["bm25", "dense"])
    assert shown["PHP: BERT and PHP rerankers of BM25's top-k"] == ("bert", ["bert", "bm25", "php"])
    assert shown["CET: pooling bias (Table 1), against naive"] == ("naive", ["cet", "dense", "naive", "zhan"])
    assert shown["CET: pooling bias, against the best baseline (zhan)"][0] == "zhan"
    assert shown["GHRM (5 folds rotated 60/20/20)"] == ("bm25", ["bert", "bm25", "ghrm"])  # ql absent here
    assert not any("Model 1" in title for title in shown)  # no runs, no section


def test_sections_show_the_spread_over_seeds_when_a_run_has_several():
    from dagster_ir.evaluation import seed_spread

    measures = ["RR@10", "RR@100", "nDCG@10", "nDCG@100", "nDCG@20", "P@20", "AP", "R@100", "R@1000"]
    rows = [(run, f"q{i}", m, v + 0.1 * i, seed) for run, v, seeds in (("bm25", 0.3, [None]), ("dense", 0.4, [None]),
                                                                      ("bert", 0.5, [0, 1]), ("php", 0.6, [0, 1]))
            for seed in seeds for i in range(3) for m in measures]
    per_seed = pl.DataFrame(rows, schema={**PER_QUERY_EVAL, "seed": pl.Int64}, orient="row")
    per_seed = per_seed.with_columns(value=pl.col("value") + pl.col("seed").fill_null(0) * 0.02)
    per_query = per_seed.group_by("run_name", "query_id", "measure", maintain_order=True).agg(pl.col("value").mean())
    inputs = {"candidate_runs": _runs("bm25", "dense"), "reranked_runs": _runs("bert", "php"),
              "fusion_runs": _runs(), "ghrm_runs": _runs(), "cet_runs": _runs()}
    recall = ReportFigure.from_figure("recall", "Recall", matplotlib.figure.Figure())
    reports = _sections(per_query.select(list(PER_QUERY_EVAL)), inputs, SignificanceConfig(n_resamples=100), recall,
                        seed_spread(per_seed))
    php_section = next(r for r in reports if r.title.startswith("PHP"))
    table = php_section.seed_table()
    cells = {label: cells[0].text for label, cells in table.rows}
    assert cells["php"] == "0.7100 ± 0.0141 (2)" and cells["bm25"] == "0.4000 (1)"
    assert "± the sample standard deviation" in php_section.to_terminal()
    first_stage = next(r for r in reports if r.title == "First-stage retrieval")
    assert first_stage.seed_table() is None  # no run there has several seeds
