"""Evaluation: ir_measures per query, significance tests against a baseline, report tables, plots.

`evaluate_run` -> per-query table (PER_QUERY_EVAL) -> `build_report` (t-tests, bootstrap CIs,
paper-style tables, figures) -> `write_report`. The command line side is `cli.main_report`.
"""

from dagster_ir.evaluation.measures import (
    DEFAULT_MEASURES,
    EvaluationConfig,
    aggregate,
    evaluate_run,
    measure_names,
    parse_measures,
    recall_curve,
    trec_eval_order,
)
from dagster_ir.evaluation.plots import figure_to_png_bytes, per_query_difference_plot, recall_curve_plot
from dagster_ir.evaluation.report import (
    Report,
    ReportBook,
    ReportConfig,
    ReportFigure,
    ReportFiles,
    build_report,
    write_report,
)
from dagster_ir.evaluation.seeds import SEED_SPREAD, average_seeds, evaluate_seeds, seed_spread
from dagster_ir.evaluation.significance import (
    SignificanceConfig,
    adjust_p_values,
    bootstrap_ci,
    compare_to_baseline,
    paired_ttest,
)

__all__ = [
    "DEFAULT_MEASURES",
    "EvaluationConfig",
    "Report",
    "ReportBook",
    "ReportConfig",
    "ReportFigure",
    "ReportFiles",
    "SEED_SPREAD",
    "SignificanceConfig",
    "adjust_p_values",
    "aggregate",
    "average_seeds",
    "bootstrap_ci",
    "build_report",
    "compare_to_baseline",
    "evaluate_run",
    "evaluate_seeds",
    "figure_to_png_bytes",
    "measure_names",
    "paired_ttest",
    "parse_measures",
    "per_query_difference_plot",
    "recall_curve",
    "recall_curve_plot",
    "seed_spread",
    "trec_eval_order",
    "write_report",
]
