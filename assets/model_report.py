"""The methods report: every method's runs, evaluated like `evaluation_report`, in one document.

One document per collection, in sections shaped like the papers' tables, each with its own baseline:
first-stage retrieval (vs BM25), PHP rerankers (vs BERT), Model 1 fusion (vs BM25, Table 2), GHRM
(vs BM25; nDCG@20, P@20) and the CET pooling-bias lab (vs naive, Table 1, and vs the best baseline).

Trained runs arrive from every training unit of the collection (`assets.partitions.units_in`):
each (run, seed) is evaluated over the queries its folds scored, the significance tests compare
per-query values averaged over seeds, and a table gives the mean and spread over seeds.
"""

from dataclasses import dataclass

import dagster as dg
import polars as pl

from assets.evaluation import ReportSettings, inline_figures, report_title, restrict_to_split
from assets.model1 import EXPLANATIONS_FILE, EXPLANATIONS_TITLE
from assets.partitions import collection_partitions, units_in
from assets.project import collection_specs
from assets.resources import DataDirResource
from dagster_ir.evaluation import (
    DEFAULT_MEASURES,
    ReportBook,
    ReportConfig,
    ReportFigure,
    SignificanceConfig,
    aggregate,
    average_seeds,
    build_report,
    evaluate_seeds,
    seed_spread,
    recall_curve,
    recall_curve_plot,
    write_report,
)
from dagster_ir.methods.cet.report import best_baseline

GROUP = "methods_report"
TABLE_MEASURES = ["RR@10", "RR@100", "nDCG@10", "nDCG@100"]  # the PHP and CET papers' columns


@dataclass(frozen=True)
class Section:
    """One table of the report: the runs of some inputs, compared with one baseline."""

    title: str
    inputs: tuple[str, ...]  # which run assets feed it
    baseline: str
    measures: tuple[str, ...]
    extra_runs: tuple[str, ...] = ()  # runs of other inputs shown for reference (e.g. bm25)
    note: str = ""  # a sentence printed under the title


TOP_K_NOTE = ("A reranked run holds the candidates' top k only (demo 20; the paper profiles rerank deeper): "
              "measures deeper than k count the documents below k as not retrieved, so compare them at depths up to k.")

SECTIONS = (
    Section("First-stage retrieval", ("candidate_runs",), "bm25", tuple(DEFAULT_MEASURES)),
    Section("PHP: BERT and PHP rerankers of BM25's top-k", ("reranked_runs",), "bert", tuple(TABLE_MEASURES), ("bm25",),
            TOP_K_NOTE),
    Section("Lexical translation: BM25 + Model 1 (Table 2)", ("fusion_runs",), "bm25", ("nDCG@10", "RR@10", "AP"), ("bm25", "bert")),
    Section("GHRM (5 folds rotated 60/20/20)", ("ghrm_runs",), "bm25", ("nDCG@20", "P@20"), ("bm25", "ql", "bert")),
    Section("CET: pooling bias (Table 1), against naive", ("cet_runs",), "naive", tuple(TABLE_MEASURES), ("dense",),
            TOP_K_NOTE),
)


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="2", deps=["model1_runs"],
          ins=units_in("reranked_runs"))
def model_report(
    context: dg.AssetExecutionContext,
    config: ReportSettings,
    data: DataDirResource,
    candidate_runs: pl.DataFrame,
    reranked_runs: pl.DataFrame,
    fusion_runs: pl.DataFrame,
    ghrm_runs: pl.DataFrame,
    cet_runs: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
) -> pl.DataFrame:
    """Per-query values of every method's runs and a report in sections shaped like the papers' tables."""
    inputs = {"candidate_runs": candidate_runs, "reranked_runs": reranked_runs, "fusion_runs": fusion_runs,
              "ghrm_runs": ghrm_runs, "cet_runs": cet_runs}
    runs = pl.concat([_with_seed(run) for run in inputs.values()])
    if runs.select(pl.struct("run_name", "seed", "query_id", "doc_id").is_duplicated().any()).item():
        clashes = runs.filter(pl.struct("run_name", "seed", "query_id", "doc_id").is_duplicated())["run_name"]
        raise ValueError(f"model_report: run names used by more than one input: {clashes.unique().to_list()}")
    protocol = collection_specs()[context.partition_key].protocol.kind
    runs, qrels = restrict_to_split(runs, qrels, query_splits, config.split, "model_report", protocol)
    measures = list(dict.fromkeys([*config.measures, *(m for s in SECTIONS for m in s.measures)]))
    per_seed = evaluate_seeds(runs, qrels, measures)
    per_query, spread = average_seeds(per_seed), seed_spread(per_seed)
    significance = config.significance()
    curves = recall_curve(candidate_runs.filter(pl.col("query_id").is_in(qrels["query_id"].implode())), qrels)
    recall = ReportFigure.from_figure("recall", "Recall by depth of the first-stage runs", recall_curve_plot(curves))
    sections = _sections(per_query, inputs, significance, recall, spread)
    explained = data.files("model1_runs", context.partition_key) / EXPLANATIONS_FILE
    appendices = [(EXPLANATIONS_TITLE, explained.read_text(encoding="utf-8"))] if explained.exists() else []
    book = ReportBook.of(report_title(context.partition_key, config.split, protocol, qrels), sections, appendices)
    files = write_report(book, data.files("reports", context.partition_key, "methods"))
    summary = aggregate(per_query)
    context.add_output_metadata(
        {
            "report": dg.MetadataValue.md(book.to_markdown(None) + inline_figures(book)),
            "html": dg.MetadataValue.path(str(files.html)),
            "markdown": dg.MetadataValue.path(str(files.markdown)),
            **{f"{r['run_name']} {r['measure']}": round(r["mean"], 4)
               for r in summary.iter_rows(named=True) if r["measure"] in ("nDCG@10", "RR@10")},
        }
    )
    return per_query


def _with_seed(run: pl.DataFrame) -> pl.DataFrame:
    """RUN columns plus `seed` (the training unit's; null for a run that was not trained per seed)."""
    seed = pl.col("seed").cast(pl.Int64) if "seed" in run.columns else pl.lit(None, dtype=pl.Int64).alias("seed")
    return run.select("query_id", "doc_id", "score", "rank", "run_name", seed)


def _sections(per_query: pl.DataFrame, inputs: dict, significance: SignificanceConfig, recall: ReportFigure,
              spread: pl.DataFrame | None = None) -> list:
    """One report per section whose runs are present, plus CET against its best baseline; `spread`
    (mean and sd over seeds) adds a seed table to a section whose runs have several seeds."""
    reports = []
    config = ReportConfig(significance=significance)
    for section in SECTIONS:
        own = [n for i in section.inputs for n in inputs[i]["run_name"].unique(maintain_order=True).to_list()]
        present = set(per_query["run_name"].unique().to_list())
        names = own + [n for n in section.extra_runs if n not in own and n in present]
        if not own or section.baseline not in names or len(names) < 2:
            continue  # a method whose runs are absent gets no section
        rows = per_query.filter(pl.col("run_name").is_in(names) & pl.col("measure").is_in(list(section.measures)))
        notes = f"Paired two-sided t-test against {section.baseline}; {significance.correction} correction."
        notes = f"{notes} {section.note}".strip()
        extra = [recall] if section.inputs == ("candidate_runs",) else []
        reports.append(build_report(rows, section.baseline, list(section.measures), section.title, notes,
                                    config, extra_figures=extra, spread=spread))
        if section.baseline == "naive":
            best = best_baseline(rows, "RR@10")
            if best is not None:
                notes = f"Paired two-sided t-test against the best baseline by RR@10, {best}."
                reports.append(build_report(rows, best, list(section.measures),
                                            f"CET: pooling bias, against the best baseline ({best})", notes, config,
                                            spread=spread))
    return reports


model_report_assets = [model_report]
