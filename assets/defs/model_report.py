"""The methods report: every method's runs, evaluated like `evaluation_report`, in one document.

One document per collection, in sections shaped like the papers' tables, each with its own baseline:
first-stage retrieval (vs BM25), PHP rerankers (vs BERT), Model 1 fusion (vs BM25, Table 2), GHRM
(vs BM25; nDCG@20, P@20), the CET pooling-bias lab (Table 1: vs DML, and vs the best baseline chosen
on dev by the `cet` asset; Figure 4, the dev sweeps of tau and eta) and the neural baselines (vs BM25);
each paper's section also shows the baselines its table lists (`BASELINE_ROWS`), tested against that
section's baseline.

Trained runs arrive from every training unit of the collection (`assets.lib.partitions.units_in`):
each (run, seed) is evaluated over the queries its folds scored, the significance tests compare
per-query values averaged over seeds, and a table gives the mean and spread over seeds.

Sections are computed on the report's `split` (default `test`; every query under `protocol: cv`),
except those marked `every_query`: a method that rotates its own folds (GHRM's `ghrm_runs`) scores
every query with the model whose test fold held it, and its paper averages over all the test folds,
so such a section is computed over every judged query its own runs answer (each exactly once per
seed: a query held by two folds is an error), and shows a reference run only where it answers all
of them.
"""

from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import polars as pl

from assets.defs.evaluation import ReportSettings, report_title, restrict_to_split
from assets.defs.model1 import EXPLANATIONS_FILE, EXPLANATIONS_TITLE
from assets.lib.metadata import KEPT_COLUMNS, capped, recorded_kept, report_headline, results_table
from assets.lib.partitions import COLLECTION_OF_UNIT, collection_partitions, units_in
from assets.lib.project import collection_specs, training_units
from assets.lib.resources import DataDirResource
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
    recall_curve,
    recall_curve_plot,
    seed_spread,
    write_report,
)
from dagster_ir.evaluation.summary import write_summary
from dagster_ir.methods.cet.report import dev_best_baseline, pool_units, sweeps_plot
from dagster_ir.methods.ghrm.config import TrainingConfig as GHRMTraining
from dagster_ir.methods.model1 import BERT_SHORT_RUN, PAPER_PAIRS
from dagster_ir.retrieval.runs import append_candidates
from dagster_ir.retrieval.trec import write_qrels, write_runs
from dagster_ir.schemas import RUN

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
    every_query: bool = False  # over every judged query its own runs answer (all test folds), not the split
    # the paper's own tests (run, the run it is tested against): one more table per tested-against run
    pairs: tuple[tuple[str, str], ...] = ()
    fallback: str = ""  # the baseline when `baseline` is absent; the title then names the one used


FIRST_STAGE = "bm25"  # the candidate run the rerankers read by default (their `candidate_run` settings)


def with_first_stage(*names: str) -> tuple[str, ...]:
    """Each name followed by its interpolation with the first stage (`<name>+bm25`)."""
    return tuple(n for name in names for n in (name, f"{name}+{FIRST_STAGE}"))


# The neural baselines (`neural_baselines`) each paper's table lists, shown as rows of its section,
# each beside its interpolation with BM25.
BASELINE_ROWS = {
    "php": with_first_stage("drmm", "duet", "knrm", "conv-knrm"),  # PHP Table 3
    "ghrm": with_first_stage("matchpyramid", "drmm", "knrm", "pacrr", "co-pacrr", "bert-maxp"),  # GHRM Table 2
    "model1": with_first_stage("cedr-knrm"),  # Model 1 Table 2
}

# Inputs whose runs rerank BM25's top k: BM25's other candidates are appended below each of their rankings.
RERANKING_INPUTS = ("reranked_runs", "fusion_runs", "ghrm_runs", "neural_baselines")

TOP_K_NOTE = (
    "A reranked run holds the candidates' top k only (k in the heading: every row reranks the same); below k "
    "BM25's other candidates follow in BM25's order, so a measure deeper than k (RR@100, nDCG@100, AP) "
    "reads the reranked top k over BM25's own list, as BM25's row does."
)
# CET's rankers rerank the strong run's top k (`dense`; bm25+bert reranks BM25's): each is completed
# below k by the candidates it reranked (the `candidates` of CET's manifest), so its deep measures
# and dense's own compare the same lists below k.
CET_INPUT, CET_CANDIDATES = "cet_runs", "dense"
CET_TOP_K_NOTE = (
    "A CET ranker reranks its candidates' top k only (dense's, or BM25's for bm25+bert; k in the heading); below k "
    "the candidates' other documents follow in their own order, so a measure deeper than k (RR@100, "
    "nDCG@100, AP) reads the reranked top k over the candidate run's own list, as dense's row does."
)

INTERPOLATION_NOTE = (
    "Rows <model>+bm25 go beyond the papers, which report none: the model's and BM25's scores are "
    "min-max normalised per query and mixed as w * BM25 + (1 - w) * model, w in 0, 0.1, ..., 1 chosen "
    "on each training unit's validation queries (never on test); w = 1 is BM25's order."
)

MODEL1_NOTE = (
    "bm25(words|wp): BM25 over the Model 1 vocabularies (the paper's BM25 (word) and BM25 (bwps)); "
    "bert: the cross-encoder on the first 512 tokens (the paper's BERT-vanilla (short)); bert-vanilla: "
    "the same chunks as bert-model1, mean [CLS] (BERT-vanilla (full)). The tables after this one are "
    "the paper's tests: each row against the baseline of its tokens."
)

SECTIONS = (
    Section("First-stage retrieval", ("candidate_runs",), "bm25", tuple(DEFAULT_MEASURES)),
    Section(
        "PHP: BERT and PHP rerankers of BM25's top-k",
        ("reranked_runs",),
        "bert",
        tuple(TABLE_MEASURES),
        ("bm25", *BASELINE_ROWS["php"]),
        f"{TOP_K_NOTE} {INTERPOLATION_NOTE}",
    ),
    Section(
        "PHP: the pre-training baselines (Table 3) and ablations, against PHP",
        ("reranked_runs",),
        "php",
        tuple(TABLE_MEASURES),
        ("bm25",),
        f"{TOP_K_NOTE} {INTERPOLATION_NOTE}",
    ),
    Section(
        "Lexical translation: BM25 + Model 1 (Table 2)",
        ("fusion_runs",),
        "bm25",
        ("nDCG@10", "RR@10", "AP"),
        ("bm25", *with_first_stage(BERT_SHORT_RUN), *BASELINE_ROWS["model1"]),
        f"{MODEL1_NOTE} {TOP_K_NOTE} {INTERPOLATION_NOTE}",
        pairs=tuple(PAPER_PAIRS.items()),
    ),
    Section(
        "GHRM: every query, each scored by the model whose test fold held it (5 folds rotated 60/20/20)",
        ("ghrm_runs",),
        "bm25",
        ("nDCG@20", "P@20"),
        ("bm25", "ql", *with_first_stage("bert"), *BASELINE_ROWS["ghrm"]),
        INTERPOLATION_NOTE,
        every_query=True,
    ),
    Section(
        "CET: pooling bias (Table 1)",
        ("cet_runs",),
        "dml",
        tuple(TABLE_MEASURES),
        ("dense",),
        CET_TOP_K_NOTE,
        fallback="naive",
    ),
    Section(
        "Neural ranking baselines of BM25's top-k",
        ("neural_baselines",),
        "bm25",
        tuple(TABLE_MEASURES),
        ("bm25", *with_first_stage("bert")),
        f"{TOP_K_NOTE} {INTERPOLATION_NOTE}",
    ),
)


@dg.asset(
    group_name=GROUP,
    partitions_def=collection_partitions,
    code_version="9",  # 9: every trained row's kept weights per unit; 8: one k per section in its heading, CET below k
    deps=[dg.AssetDep("model1_runs", partition_mapping=COLLECTION_OF_UNIT)],
    ins=units_in("reranked_runs", "ghrm_sweeps", "fusion_runs", "neural_baselines", "cet_runs", "cet", "cross_encoder"),
)
def model_report(
    context: dg.AssetExecutionContext,
    config: ReportSettings,
    data: DataDirResource,
    candidate_runs: pl.DataFrame,
    reranked_runs: pl.DataFrame,
    fusion_runs: pl.DataFrame,
    ghrm_runs: pl.DataFrame,
    cet_runs: pl.DataFrame,
    cet: pl.DataFrame,
    ghrm_sweeps: pl.DataFrame,
    cross_encoder: pl.DataFrame,
    qrels: pl.DataFrame,
    neural_baselines: pl.DataFrame,
    query_splits: pl.DataFrame,
    word2vec: pl.DataFrame,
) -> pl.DataFrame:
    """Per-query values of every method's runs and a report in sections shaped like the papers' tables."""
    inputs = {
        "candidate_runs": candidate_runs,
        "reranked_runs": reranked_runs,
        "fusion_runs": fusion_runs,
        "ghrm_runs": ghrm_runs,
        "cet_runs": cet_runs,
        "neural_baselines": neural_baselines,
    }
    explained = _explanations_file(data, context.partition_key)
    appendices = [(EXPLANATIONS_TITLE, explained.read_text(encoding="utf-8"))] if explained.exists() else []
    book, per_query, runs = methods_book(
        context.partition_key,
        config,
        inputs,
        qrels,
        query_splits,
        word2vec,
        ghrm_sweeps=ghrm_sweeps,
        cet=cet,
        kept=kept_of(
            cross_encoder,
            cet,
            recorded_kept(
                context.instance,
                [
                    ("ghrm_runs", context.partition_key),
                    *(
                        (asset, unit)  # the collection's units (the assets share their partitions)
                        for unit in context.asset_partition_keys_for_input("neural_baselines")
                        for asset in TRAINED_UNIT_ASSETS
                    ),
                ],
            ),
        ),
        appendices=appendices,
    )
    files = write_report(book, data.files("reports", context.partition_key, "methods"))
    write_summary(book, files.markdown.parent)  # the tables as data, for `dagster-ir reproduce`
    run_files = write_run_files(runs, qrels, files.markdown.parent)
    summary = aggregate(per_query)
    context.add_output_metadata(
        capped(
            {
                "report": report_headline(
                    book, data.relative(files.html)
                ),  # main tables, < 64 KB; the full report is the file
                "html": dg.MetadataValue.path(data.relative(files.html)),
                "markdown": dg.MetadataValue.path(data.relative(files.markdown)),
                "run files": dg.MetadataValue.path(data.relative(run_files)),
                "results": results_table(summary, ("nDCG@10", "RR@10")),  # one table, not a chart per run x measure
            }
        )
    )
    return per_query


def methods_book(
    collection: str,
    config: ReportSettings,
    inputs: dict[str, pl.DataFrame],
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    word2vec: pl.DataFrame,
    *,
    ghrm_sweeps: pl.DataFrame | None = None,
    cet: pl.DataFrame | None = None,
    kept: pl.DataFrame | None = None,
    appendices: list | None = None,
) -> tuple[ReportBook, pl.DataFrame, pl.DataFrame]:
    """The methods report of `collection`, its per-query values and the runs it evaluated (RUN plus
    `seed`, a reranker's top k completed below by BM25's other candidates), from the runs of `inputs`
    (asset name -> frame; `candidate_runs` required). `kept` (`kept_of`: run_name, chosen_epoch,
    start_score, dev_score per trained run and unit) says per row which weights each unit kept.
    An input that is absent gets no section:
    `dagster-ir reproduce --assets` reports the assets it made this way, `model_report` every one."""
    ghrm_sweeps = pl.DataFrame() if ghrm_sweeps is None else ghrm_sweeps
    cet = pl.DataFrame() if cet is None else cet
    candidate_runs = inputs["candidate_runs"]
    every, per_seed, qrels = evaluated_runs(collection, config, inputs, qrels, query_splits, cet)
    protocol = collection_specs()[collection].protocol.kind
    per_query, spread = average_seeds(per_seed), seed_spread(per_seed)
    significance = config.significance()
    curves = recall_curve(candidate_runs.filter(pl.col("query_id").is_in(qrels["query_id"].implode())), qrels)
    recall = ReportFigure.from_figure("recall", "Recall by depth of the first-stage runs", recall_curve_plot(curves))
    figures = {GHRM_SECTION: [sweeps_figure(ghrm_sweeps)]} if ghrm_sweeps.height else {}
    cet = pool_units(cet)  # one row per ranker, dev scores averaged over the units
    figures.update(cet_figures(cet))
    sections = _sections(
        per_query,
        inputs,
        significance,
        recall,
        spread,
        depths=candidate_depths(inputs),
        every=every,
        figures=figures,
        cet_best=dev_best_baseline(cet),
        vectors=vectors_note(word2vec),
        kept=kept_weights(pl.DataFrame() if kept is None else kept),
    )
    book = ReportBook.of(report_title(collection, config.split, protocol, qrels), sections, appendices or [])
    return book, per_query, every[0]


def evaluated_runs(
    collection: str,
    config: ReportSettings,
    inputs: dict[str, pl.DataFrame],
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    cet: pl.DataFrame | None = None,
) -> tuple[tuple[pl.DataFrame, pl.DataFrame], pl.DataFrame, pl.DataFrame]:
    """What the methods report measures: ((every run with `seed`, a reranker's top k completed below
    by the candidates it reranked, over all queries; all qrels), the per-query values of each run and
    seed on the report's split (PER_QUERY_EVAL plus `seed`), that split's qrels)."""
    cet = pl.DataFrame() if cet is None else cet
    candidate_runs = inputs["candidate_runs"]
    first_stage = candidate_runs.filter(pl.col("run_name") == FIRST_STAGE).select(list(RUN))
    runs = pl.concat(
        [
            complete_below_k(_with_seed(run), first_stage)
            if name in RERANKING_INPUTS
            else complete_cet_below_k(_with_seed(run), candidate_runs, cet)
            if name == CET_INPUT
            else _with_seed(run)
            for name, run in inputs.items()
        ]
    )
    if runs.select(pl.struct("run_name", "seed", "query_id", "doc_id").is_duplicated().any()).item():
        clashes = runs.filter(pl.struct("run_name", "seed", "query_id", "doc_id").is_duplicated())["run_name"]
        raise ValueError(f"model_report: run names used by more than one input: {clashes.unique().to_list()}")
    protocol = collection_specs()[collection].protocol.kind
    every = (runs, qrels)  # what the every_query sections read
    runs, qrels = restrict_to_split(runs, qrels, query_splits, config.split, "model_report", protocol)
    measures = list(dict.fromkeys([*config.measures, *(m for s in SECTIONS for m in s.measures)]))
    return every, evaluate_seeds(runs, qrels, measures), qrels


def write_run_files(runs: pl.DataFrame, qrels: pl.DataFrame, report_dir: Path) -> Path:
    """The runs a report evaluated as TREC files, `<report_dir>/runs/<run>[.seed-<s>].run` (every query
    each answers), and the collection's judgments as `<report_dir>/qrels.txt`: what trec_eval,
    ir_measures or `dagster-ir report --qrels ... --run ...` read. Returns the runs folder."""
    folder = report_dir / "runs"
    write_runs(runs, folder)
    write_qrels(qrels, report_dir / "qrels.txt")
    return folder


VECTOR_SOURCES = {
    "minilm": "the bundled MiniLM's input embeddings, each word's word pieces mean-pooled",
    "trained": "CBOW word2vec trained on this collection",
}
WORD_INPUTS = ("ghrm_runs", "neural_baselines", "reranked_runs", "fusion_runs")  # sections that show word-based models


def vectors_note(word2vec: pl.DataFrame) -> str:
    """A sentence naming the word vectors the word-based models (GHRM, KNRM, DRMM, ...) read."""
    if word2vec.height == 0 or "source" not in word2vec.columns:
        return ""
    source = str(word2vec["source"][0])
    described = VECTOR_SOURCES.get(source, f"the file {source}")
    return f"Word vectors of GHRM and the interaction baselines: {described} ({int(word2vec['dim'][0])}-d)."


def beside_pure(names: list[str]) -> list[str]:
    """`names` with every `<model>+bm25` moved right after `<model>` (when that is among them)."""
    suffix = f"+{FIRST_STAGE}"
    mixed = {n for n in names if n.endswith(suffix) and n[: -len(suffix)] in names}
    ordered = []
    for name in names:
        if name in mixed:
            continue
        ordered.append(name)
        if f"{name}{suffix}" in mixed:
            ordered.append(f"{name}{suffix}")
    return ordered


def candidate_depths(inputs: dict[str, pl.DataFrame]) -> dict[str, int]:
    """The depth k each reranked run reranks (of the inputs in `RERANKING_INPUTS` and CET's): its most
    documents for one query (and seed), read before the candidates below k are appended."""
    depths: dict[str, int] = {}
    for name, run in inputs.items():
        if (name not in RERANKING_INPUTS and name != CET_INPUT) or run.height == 0:
            continue
        keys = ["run_name", "query_id", *(["seed"] if "seed" in run.columns else [])]
        counts = run.group_by(keys).len().group_by("run_name").agg(pl.col("len").max())
        depths.update(dict(counts.iter_rows()))
    return depths


KEPT_PREFIX = "Weights kept, chosen on each unit's validation queries: "  # starts a section's `kept_weights` notes
# unit-partitioned trained assets whose `KEPT_WEIGHTS` metadata the report reads (ghrm_runs: per collection)
TRAINED_UNIT_ASSETS = ("neural_baselines", "neural_model1", "bert_model1", "bert_vanilla")


def kept_of(*frames: pl.DataFrame | None) -> pl.DataFrame:
    """The weights kept per trained run and unit, as one frame (KEPT_COLUMNS) for `kept_weights`: from
    manifests with run_name, chosen_epoch, start_score and dev_score per unit (the fine-tuned
    cross-encoders', CET's) and the `KEPT_WEIGHTS` rows other trained assets recorded. Frames that
    lack those columns (absent inputs, manifests written before they existed) add nothing."""
    needed = set(KEPT_COLUMNS) - {"unit"}
    parts = [
        frame.with_columns(unit=pl.lit(None, pl.String)) if "unit" not in frame.columns else frame
        for frame in frames
        if frame is not None and frame.height and needed <= set(frame.columns)
    ]
    columns = list(KEPT_COLUMNS)
    return (
        pl.concat([part.select(columns).cast(KEPT_COLUMNS) for part in parts])  # type: ignore[arg-type]
        if parts
        else pl.DataFrame(schema=KEPT_COLUMNS)
    )


def kept_weights(manifest: pl.DataFrame) -> dict[str, str]:
    """Per trained run, which weights its units kept: `bert: start kept in 1 of 3 units (per unit: start,
    epoch 2, epoch 1), mean validation score: start 0.412, kept weights 0.415`, from a manifest
    with run_name, chosen_epoch (0: the untrained start), start_score and dev_score (the kept
    weights') per unit, in the order of its `unit` column when it has one; runs whose start was
    never scored are left out."""
    needed = {"run_name", "chosen_epoch", "start_score", "dev_score"}
    if manifest.height == 0 or not needed <= set(manifest.columns):
        return {}
    if "unit" in manifest.columns:
        manifest = manifest.sort("unit", nulls_last=True, maintain_order=True)
    pooled = (
        manifest.filter(pl.col("start_score").is_not_null())
        .group_by("run_name", maintain_order=True)
        .agg(
            units=pl.len(),
            start_kept=(pl.col("chosen_epoch") == 0).sum(),
            epochs=pl.col("chosen_epoch"),
            start=pl.col("start_score").mean(),
            kept_score=pl.col("dev_score").mean(),
        )
    )
    notes = {}
    for name, units, kept, epochs, start, best in pooled.select(
        "run_name", "units", "start_kept", "epochs", "start", "kept_score"
    ).iter_rows():
        each = ", ".join("start" if e == 0 else f"epoch {e}" for e in epochs)
        notes[name] = (  # no "; " inside: the notes join the rows' sentences with it
            f"{name}: start kept in {kept} of {units} unit{'' if units == 1 else 's'} (per unit: {each}), "
            f"mean validation score: start {start:.3f}, kept weights {best:.3f}"
        )
    return notes


def depth_heading(names: list[str], depths: dict[str, int], title: str = "") -> str:
    """What a section's heading says of its rows' depth: `, k = <k>` when every reranked row
    reranks the same k ("" when none reranks). Rows that rerank different depths are refused: a
    comparison across depths is not like with like (a ValueError naming each depth's rows)."""
    by_depth: dict[int, list[str]] = {}
    for name in names:
        if name in depths:
            by_depth.setdefault(depths[name], []).append(name)
    if len(by_depth) > 1:
        said = "; ".join(f"top {k}: {', '.join(rows)}" for k, rows in sorted(by_depth.items()))
        raise ValueError(
            f"model_report: the rows of {title!r} rerank different depths ({said}); set the methods' depths "
            "alike in the collection's settings (one k per section)"
        )
    return f", k = {next(iter(by_depth))}" if by_depth else ""


def complete_below_k(run: pl.DataFrame, first_stage: pl.DataFrame) -> pl.DataFrame:
    """`run` (RUN plus seed) with the first stage's other candidates below each (run, seed, query) ranking."""
    if first_stage.height == 0 or run.height == 0:
        return run
    return append_candidates(run, first_stage, keys=("seed",)).select(run.columns)


def complete_cet_below_k(run: pl.DataFrame, candidate_runs: pl.DataFrame, manifest: pl.DataFrame) -> pl.DataFrame:
    """CET's rankings (RUN plus seed), each completed below k by the candidate run it reranked: the
    manifest's `candidates` of its run name, the strong run (`dense`) where the manifest names none."""
    if run.height == 0:
        return run
    named = (
        dict(manifest.select("run_name", "candidates").unique("run_name").iter_rows())
        if {"run_name", "candidates"} <= set(manifest.columns)
        else {}
    )
    source = pl.col("run_name").replace_strict(named, default=CET_CANDIDATES, return_dtype=pl.String)
    parts = []
    for (candidates,), part in run.with_columns(_candidates=source).partition_by("_candidates", as_dict=True).items():
        tail = candidate_runs.filter(pl.col("run_name") == (candidates or CET_CANDIDATES)).select(list(RUN))
        parts.append(complete_below_k(part.drop("_candidates"), tail))
    return pl.concat(parts, how="vertical_relaxed").select(run.columns)


def _explanations_file(data: DataDirResource, collection: str):
    """The worked Model 1 examples of the collection's first training unit."""
    units = [key for key, unit in training_units().items() if unit.collection == collection]
    return data.files("model1_runs", units[0]) / EXPLANATIONS_FILE


def _with_seed(run: pl.DataFrame) -> pl.DataFrame:
    """RUN columns plus `seed` (the training unit's; null for a run that was not trained per seed)."""
    seed = pl.col("seed").cast(pl.Int64) if "seed" in run.columns else pl.lit(None, dtype=pl.Int64).alias("seed")
    return run.select("query_id", "doc_id", "score", "rank", "run_name", seed)


def sweeps_figure(ghrm_sweeps: pl.DataFrame) -> ReportFigure:
    """GHRM's sweeps over every unit (Figures 3-5 on validation queries), the chosen values ringed."""
    from dagster_ir.methods.ghrm.sweeps import choose, sweep_caption, sweep_figure  # torch: loaded when the step runs

    measure = GHRM_SELECTION_MEASURE
    measures = ghrm_sweeps["measure"].unique(maintain_order=True).to_list()
    chosen = choose(ghrm_sweeps, measure)
    return ReportFigure.from_figure(
        "ghrm_sweeps",
        sweep_caption(ghrm_sweeps, chosen, measure, measures),
        sweep_figure(ghrm_sweeps, chosen, measures),
    )


def cet_figures(cet: pl.DataFrame) -> dict:
    """Figure 4 (the `cet` manifest's dev sweeps of tau and eta) for the CET section, when it has any."""
    if not {"sweep", "dev_mrr10"} <= set(cet.columns):
        return {}
    if cet.filter(pl.col("sweep").is_in(["tau", "eta"]) & pl.col("dev_mrr10").is_not_null()).height == 0:
        return {}
    caption = (
        "Figure 4 on dev: MRR@10 of CET against tau and of RocketQA against eta (a quantile of naive's "
        "scores; the raw threshold in brackets), the chosen values ringed, naive dashed"
    )
    return {CET_SECTION: [ReportFigure.from_figure("cet_sweeps", caption, sweeps_plot(cet))]}


def every_query_rows(
    section: Section, inputs: dict, runs: pl.DataFrame, qrels: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, str]:
    """Seed-averaged per-query values of an `every_query` section over every judged query its own runs
    answer, their spread over seeds, and a note.

    Each query counts once per run and seed: a run that answers a query from two folds (column
    `fold`) is an error. A reference run (`extra_runs`) is shown only if it answers every one of those
    queries.
    """
    keys = ["run_name", "query_id", "fold", "seed"]
    own = pl.concat(
        [inputs[i].select([k for k in keys if k in inputs[i].columns]) for i in section.inputs], how="diagonal_relaxed"
    )
    if "fold" in own.columns:
        by = [k for k in ("run_name", "seed", "query_id") if k in own.columns]
        twice = own.group_by(by).agg(pl.col("fold").n_unique()).filter(pl.col("fold") > 1)
        if twice.height:
            raise ValueError(
                f"model_report: {section.inputs} score {twice.height} queries from more than one fold "
                f"(e.g. {twice.select('run_name', 'query_id').row(0)}); a cross-validated run "
                "scores each query once"
            )
    held = qrels.filter(pl.col("query_id").is_in(own["query_id"].unique().implode()))
    judged = held["query_id"].unique()
    names = own["run_name"].unique(maintain_order=True).to_list()
    left_out = []
    for name in section.extra_runs:
        answered = runs.filter(pl.col("run_name") == name)["query_id"].unique()
        if name in names or answered.len() == 0:
            continue
        (names if judged.is_in(answered.implode()).all() else left_out).append(name)
    chosen = runs.filter(pl.col("run_name").is_in(names) & pl.col("query_id").is_in(judged.implode()))
    per_seed = evaluate_seeds(chosen, held, list(section.measures))
    folds = own["fold"].n_unique() if "fold" in own.columns else 1
    note = f"Over all {judged.len()} judged queries of {folds} test folds, each scored once."
    if left_out:
        note += f" Not shown: {', '.join(left_out)} (scored on some of these queries only)."
    return average_seeds(per_seed), seed_spread(per_seed), note


def _sections(
    per_query: pl.DataFrame,
    inputs: dict,
    significance: SignificanceConfig,
    recall: ReportFigure | None,
    spread: pl.DataFrame | None = None,
    *,
    every: tuple[pl.DataFrame, pl.DataFrame] | None = None,
    figures: dict | None = None,
    cet_best: str | None = None,
    vectors: str = "",
    depths: dict[str, int] | None = None,
    kept: dict[str, str] | None = None,
) -> list:
    """One report per section whose runs are present, plus CET against `cet_best`, its best baseline
    chosen on dev; `spread` (mean and sd over seeds) adds a seed table to a section whose runs have
    several seeds.

    `every` (runs with `seed`, qrels, of all queries) feeds the `every_query` sections; without it they
    use `per_query`. `figures` maps a section title to extra figures shown with it; `vectors` (a
    sentence naming the word vectors) joins the notes of the sections that show word-based models.
    `depths` (a reranked run's name -> the candidates it reranks, `candidate_depths`) puts the section's
    k in its heading, or each depth where its rows rerank different ones. `kept` (a trained row's name ->
    which weights its units kept, `kept_weights`) joins the notes of the sections showing that row.
    """
    reports = []
    config = ReportConfig(significance=significance)
    for section in SECTIONS:
        own = [
            n
            for i in section.inputs
            if i in inputs
            for n in inputs[i]["run_name"].unique(maintain_order=True).to_list()
        ]
        table, section_spread, fold_note = per_query, spread, ""
        if section.every_query and every is not None and own:
            table, section_spread, fold_note = every_query_rows(section, inputs, *every)
        present = set(table["run_name"].unique().to_list())
        names = own + [n for n in section.extra_runs if n not in own and n in present]
        baseline, title = section.baseline, section.title
        if section.fallback:
            baseline = baseline if baseline in names else section.fallback
            title = f"{title}, against {baseline}"
        if not own or baseline not in names or len(names) < 2:
            continue  # a method whose runs are absent gets no section
        names = beside_pure(names)
        title += depth_heading(names, depths or {}, title)
        rows = (
            table.filter(pl.col("run_name").is_in(names) & pl.col("measure").is_in(list(section.measures)))
            .with_columns(
                _order=pl.col("run_name").replace_strict(names, list(range(len(names))), return_dtype=pl.Int64)
            )
            .sort("_order", maintain_order=True)
            .drop("_order")
        )
        notes = f"Paired two-sided t-test against {baseline}; {significance.correction} correction."
        notes = f"{notes} {fold_note} {section.note}".strip()
        if vectors and any(i in WORD_INPUTS for i in section.inputs):
            notes = f"{notes} {vectors}"
        if said := [kept[n] for n in names if n in (kept or {})]:
            notes = f"{notes} {KEPT_PREFIX}{'; '.join(said)}."
        first_stage = section.inputs == ("candidate_runs",)
        extra = ([recall] if recall else []) if first_stage else list((figures or {}).get(section.title, []))
        reports.append(
            build_report(
                rows, baseline, list(section.measures), title, notes, config, extra_figures=extra, spread=section_spread
            )
        )
        reports += _pair_reports(section, rows, present, significance, config, section_spread)
        if section.title == CET_SECTION and cet_best is not None and cet_best in names and cet_best != baseline:
            notes = (
                f"Paired two-sided t-test against the best baseline, {cet_best}, chosen by MRR@10 on the dev "
                "queries (never on this split)."
            )
            reports.append(
                build_report(
                    rows,
                    cet_best,
                    list(section.measures),
                    f"CET: pooling bias, against the best baseline on dev ({cet_best})",
                    notes,
                    config,
                    spread=spread,
                )
            )
    return reports


def _pair_reports(
    section: Section,
    rows: pl.DataFrame,
    present: set,
    significance: SignificanceConfig,
    config: ReportConfig,
    spread: pl.DataFrame | None,
) -> list:
    """One table per run the paper tests against (its `pairs`), with the runs it tests against it."""
    against: dict[str, list[str]] = {}
    for run, baseline in section.pairs:
        if run in present and baseline in present:
            against.setdefault(baseline, []).append(run)
    reports = []
    for baseline, runs in against.items():
        chosen = rows.filter(pl.col("run_name").is_in([baseline, *runs]))
        notes = (
            f"The paper's test: {', '.join(runs)} against {baseline}, paired two-sided t-test; "
            f"{significance.correction} correction."
        )
        reports.append(
            build_report(
                chosen,
                baseline,
                list(section.measures),
                f"{section.title}: the paper's test against {baseline}",
                notes,
                config,
                spread=spread,
            )
        )
    return reports


GHRM_SECTION = next(s.title for s in SECTIONS if s.inputs == ("ghrm_runs",))
CET_SECTION = next(s.title for s in SECTIONS if s.inputs == ("cet_runs",))
GHRM_SELECTION_MEASURE = GHRMTraining().selection_measure  # what the sweeps choose by, as GHRM picks epochs

model_report_assets = [model_report]
