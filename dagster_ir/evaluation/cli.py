"""The domain side of `dagster-ir report`: print (and optionally write) an evaluation report.

    dagster-ir report --per-query per_query.parquet --baseline bm25
    dagster-ir report --qrels qrels.txt --run bm25.run --run ce=rerank.run --baseline bm25 --out report/

Per-query values come either from a Parquet file with PER_QUERY_EVAL columns (run_name, query_id,
measure, value) or from TREC run files evaluated against a TREC qrels file; a run is named by the
tag column of its file unless given as NAME=PATH.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # Polars, ir_measures, SciPy and Matplotlib load when a report is built, not for --help
    import polars as pl

    from dagster_ir.evaluation.report import Report, ReportConfig, ReportFigure


def load_per_query(path: str | os.PathLike[str]) -> pl.DataFrame:
    """Read a per-query evaluation table from Parquet; the error names the file if it is not one."""
    import polars as pl

    from dagster_ir.schemas import PER_QUERY_EVAL, validate

    try:
        frame = pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as error:
        raise ValueError(f"{path}: cannot read it as Parquet ({error})") from error
    validate(frame, PER_QUERY_EVAL, f"per-query evaluation {path}")
    return frame


def read_runs(specs: Sequence[str]) -> pl.DataFrame:
    """Read TREC run files given as PATH or NAME=PATH into one RUN frame; run names must differ."""
    import polars as pl

    from dagster_ir.retrieval.trec import read_run

    runs, seen = [], {}
    for spec in specs:
        name, _, path = spec.rpartition("=") if "=" in spec else (None, "", spec)
        run = read_run(path, run_name=name or None)
        for run_name in run["run_name"].unique().to_list():
            if run_name in seen:
                raise ValueError(f"run name {run_name!r} in both {seen[run_name]} and {path}; name one NAME=PATH")
            seen[run_name] = path
        runs.append(run)
    return pl.concat(runs)


def print_report(
    per_query: pl.DataFrame | str | os.PathLike[str],
    baseline: str,
    measures: Sequence[str] | None = None,
    *,
    title: str = "Evaluation",
    config: ReportConfig | None = None,
    extra_figures: Sequence[ReportFigure] = (),
    file: TextIO | None = None,
) -> Report:
    """Build the report of a per-query table (a frame or a Parquet path), print it as text, return it."""
    import polars as pl

    from dagster_ir.evaluation.measures import measure_names
    from dagster_ir.evaluation.report import ReportConfig, build_report

    config = config if config is not None else ReportConfig()
    frame = per_query if isinstance(per_query, pl.DataFrame) else load_per_query(per_query)
    chosen = measure_names(measures) if measures else None
    report = build_report(frame, baseline, chosen, title=title, config=config, extra_figures=extra_figures)
    print(report.to_terminal(), end="", file=file or sys.stdout)
    return report


def main_report(argv: Sequence[str] | None = None) -> int:
    """Entry point of `dagster-ir report`; returns the exit status (1 on bad input, with a message)."""
    from dagster_ir.evaluation.report import write_report

    args = _parse_args(argv)
    try:
        config = _config(args)
        per_query, figures = _per_query(args)
        report = print_report(
            per_query, args.baseline, args.measures, title=args.title, config=config, extra_figures=figures
        )
        if args.out:
            files = write_report(report, args.out)
            print(f"\nwrote {files.markdown}, {files.html}, {files.text} and {len(files.figures)} figures")
    except (ValueError, OSError) as error:  # SchemaError and TrecFormatError are ValueErrors
        print(f"dagster-ir report: error: {error}", file=sys.stderr)
        return 1
    return 0


def _config(args: argparse.Namespace) -> ReportConfig:
    from dagster_ir.evaluation.measures import measure_names
    from dagster_ir.evaluation.report import ReportConfig
    from dagster_ir.evaluation.significance import SignificanceConfig

    significance = SignificanceConfig(
        alpha=args.alpha, correction=args.correction, n_resamples=args.resamples, seed=args.seed
    )
    plot_measure = measure_names([args.plot_measure])[0] if args.plot_measure else None
    return ReportConfig(significance=significance, difference_plot_measure=plot_measure)


def _per_query(args: argparse.Namespace) -> tuple[pl.DataFrame, tuple[ReportFigure, ...]]:
    """Per-query values from the arguments, plus a recall-curve figure when runs are written out."""
    from dagster_ir.evaluation.measures import DEFAULT_MEASURES, EvaluationConfig, evaluate_run, recall_curve
    from dagster_ir.evaluation.plots import recall_curve_plot
    from dagster_ir.evaluation.report import ReportFigure
    from dagster_ir.retrieval.trec import read_qrels

    if args.per_query:
        return load_per_query(args.per_query), ()
    evaluation = EvaluationConfig(count_missing_as_zero=not args.skip_missing)
    runs, qrels = read_runs(args.run), read_qrels(args.qrels)
    per_query = evaluate_run(runs, qrels, args.measures or DEFAULT_MEASURES, evaluation)
    if not args.out:
        return per_query, ()
    curve = recall_curve_plot(recall_curve(runs, qrels, config=evaluation))
    return per_query, (ReportFigure.from_figure("recall_curves", "Mean recall@k by depth k.", curve),)


def _parser(*, collection_default: str | None = None) -> argparse.ArgumentParser:
    """The report's options. With `collection_default` (the pipeline's `dagster-ir report`), the help
    also names `--collection`, and neither a source nor `--baseline` is required (the command fills
    them in from the collection's stored report)."""
    in_pipeline = collection_default is not None
    parser = argparse.ArgumentParser(
        prog="dagster-ir report",
        description="Compare runs with a baseline: measures, significance, tables.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        + "\n".join(
            f"  {line}"
            for line in (
                ["dagster-ir report --collection cranfield --measures nDCG@10 AP --correction holm"]
                if in_pipeline
                else []
            )
            + ["dagster-ir report --qrels qrels.txt --run bm25.run --run ce=rerank.run --baseline bm25 --out report/"]
        ),
    )
    if in_pipeline:
        parser.add_argument(
            "--collection",
            default=collection_default,
            help=f"the collection whose stored evaluation and methods reports are printed "
            f"(default {collection_default})",
        )
    source = parser.add_mutually_exclusive_group(required=not in_pipeline)
    source.add_argument("--per-query", type=Path, help="Parquet file: run_name, query_id, measure, value")
    source.add_argument("--qrels", type=Path, help="TREC qrels file to evaluate --run files against")
    parser.add_argument("--run", action="append", default=[], metavar="[NAME=]PATH", help="TREC run file")
    if in_pipeline:
        parser.add_argument("--baseline", default="bm25", help="run name the others are tested against (default bm25)")
    else:
        parser.add_argument("--baseline", required=True, help="run name the others are tested against")
    parser.add_argument("--measures", nargs="+", metavar="MEASURE", help="ir_measures names (default: all)")
    parser.add_argument("--correction", choices=["none", "bonferroni", "holm"], default="none")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--plot-measure", help="measure of the per-query difference plots (default: first)")
    parser.add_argument(
        "--skip-missing", action="store_true", help="leave out queries a run misses instead of scoring 0 (-c)"
    )
    parser.add_argument("--title", default="Evaluation")
    parser.add_argument("--out", type=Path, help="also write report.md, report.html, report.txt and figures here")
    return parser


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.qrels and not args.run:
        parser.error("--qrels needs at least one --run")
    if args.per_query and (args.run or args.skip_missing):
        parser.error("--run and --skip-missing go with --qrels, not --per-query")
    return args
