"""Evaluation: ir_measures per query, significance tests against a baseline, report tables, plots.

`evaluate_run` -> per-query table (PER_QUERY_EVAL) -> `build_report` (t-tests, bootstrap CIs,
paper-style tables, figures) -> `write_report`. The command line side is `cli.main_report`.

The names below are imported on first use (PEP 562), so that importing one light module of this
package (the command line's options, say) does not load ir_measures, SciPy and Matplotlib.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "DEFAULT_MEASURES": "dagster_ir.evaluation.measures",
    "EvaluationConfig": "dagster_ir.evaluation.measures",
    "Report": "dagster_ir.evaluation.report",
    "ReportBook": "dagster_ir.evaluation.report",
    "ReportConfig": "dagster_ir.evaluation.report",
    "ReportFigure": "dagster_ir.evaluation.report",
    "ReportFiles": "dagster_ir.evaluation.report",
    "SEED_SPREAD": "dagster_ir.evaluation.seeds",
    "SignificanceConfig": "dagster_ir.evaluation.significance",
    "adjust_p_values": "dagster_ir.evaluation.significance",
    "aggregate": "dagster_ir.evaluation.measures",
    "average_seeds": "dagster_ir.evaluation.seeds",
    "bootstrap_ci": "dagster_ir.evaluation.significance",
    "build_report": "dagster_ir.evaluation.report",
    "compare_to_baseline": "dagster_ir.evaluation.significance",
    "evaluate_run": "dagster_ir.evaluation.measures",
    "evaluate_seeds": "dagster_ir.evaluation.seeds",
    "figure_to_png_bytes": "dagster_ir.evaluation.plots",
    "measure_names": "dagster_ir.evaluation.measures",
    "paired_ttest": "dagster_ir.evaluation.significance",
    "parse_measures": "dagster_ir.evaluation.measures",
    "per_query_difference_plot": "dagster_ir.evaluation.plots",
    "recall_curve": "dagster_ir.evaluation.measures",
    "recall_curve_plot": "dagster_ir.evaluation.plots",
    "seed_spread": "dagster_ir.evaluation.seeds",
    "trec_eval_order": "dagster_ir.evaluation.measures",
    "write_report": "dagster_ir.evaluation.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
