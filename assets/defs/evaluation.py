"""The evaluation report: ir_measures per run and query, paired t-tests against a baseline, tables, plots."""

import dagster as dg
import polars as pl

from assets.lib.metadata import capped, report_headline, results_table
from assets.lib.partitions import collection_partitions
from assets.lib.project import collection_specs
from assets.lib.resources import DataDirResource
from dagster_ir.collections import report_query_ids, split_query_ids
from dagster_ir.evaluation import (
    DEFAULT_MEASURES,
    ReportConfig,
    ReportFigure,
    SignificanceConfig,
    aggregate,
    build_report,
    evaluate_run,
    recall_curve,
    recall_curve_plot,
    write_report,
)

GROUP = "evaluation"


class ReportSettings(dg.Config):
    """Which queries and measures; the significance settings map onto SignificanceConfig."""

    measures: list[str] = list(DEFAULT_MEASURES)
    # "test", "dev", ... or "all": the queries the report is computed on. Under `protocol: cv` the
    # test queries are every query (each lies in exactly one rotation's test fold).
    split: str = "test"
    correction: str = "none"  # "none" | "bonferroni" | "holm"
    alpha: float = 0.05
    bootstrap_resamples: int = 10_000
    seed: int = 0

    def significance(self) -> SignificanceConfig:
        return SignificanceConfig(
            alpha=self.alpha, correction=self.correction, n_resamples=self.bootstrap_resamples, seed=self.seed
        )


class EvaluationReportConfig(ReportSettings):
    """ReportSettings plus the baseline every run is compared with."""

    baseline: str = "bm25"


def restrict_to_split(
    runs: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    split: str,
    asset: str,
    protocol: str = "fixed",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Runs and qrels of the queries in `split` ("all" keeps every query; "test" under the cv
    protocol keeps every query too, since each is in one rotation's test fold)."""
    if split == "all":
        return runs, qrels
    if split == "test":
        chosen = pl.Series("query_id", report_query_ids(query_splits, protocol), dtype=pl.String)
        if chosen.len() == 0:
            raise ValueError(f"{asset}: no queries in split 'test'")
    else:
        chosen = split_query_ids(query_splits, split, where=asset)
    keep = pl.col("query_id").is_in(chosen.implode())
    return runs.filter(keep), qrels.filter(keep)


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="1")
def evaluation_report(
    context: dg.AssetExecutionContext,
    config: EvaluationReportConfig,
    data: DataDirResource,
    candidate_runs: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
) -> pl.DataFrame:
    """Per-query ir_measures values of every run (catalog view) and a Markdown/HTML report against the baseline."""
    protocol = collection_specs()[context.partition_key].protocol.kind
    runs, qrels = restrict_to_split(candidate_runs, qrels, query_splits, config.split, "evaluation_report", protocol)
    per_query = evaluate_run(runs, qrels, config.measures)
    significance = config.significance()
    curves = recall_curve(runs, qrels)
    report = build_report(
        per_query,
        baseline=config.baseline,
        measures=config.measures,
        title=report_title(context.partition_key, config.split, protocol, qrels),
        notes=f"Paired two-sided t-test against {config.baseline}; {significance.correction} correction.",
        config=ReportConfig(significance=significance),
        extra_figures=[ReportFigure.from_figure("recall", "Recall by depth", recall_curve_plot(curves))],
    )
    files = write_report(report, data.files("reports", context.partition_key))
    summary = aggregate(per_query)
    context.add_output_metadata(
        capped(
            {
                "report": report_headline(
                    report, data.relative(files.html)
                ),  # main tables, < 64 KB; the full report is the file
                "html": dg.MetadataValue.path(data.relative(files.html)),
                "markdown": dg.MetadataValue.path(data.relative(files.markdown)),
                "results": results_table(
                    summary, ("nDCG@10", "RR@10", "R@1000")
                ),  # one table, not a chart per run x measure
            }
        )
    )
    return per_query


def report_title(collection: str, split: str, protocol: str, qrels: pl.DataFrame) -> str:
    """ "<collection>: <which> queries (<n> judged)", saying when the test queries are every test fold."""
    which = "test-fold (every)" if split == "test" and protocol == "cv" else split
    return f"{collection}: {which} queries ({qrels['query_id'].n_unique()} judged)"


evaluation_assets = [evaluation_report]
