"""CET assets: the pooling-bias lab and the coupled relevance/selection rankers trained against it.

qrels + candidate_runs -> sparse_qrels -> false_negative_analysis
                                       -> cet, per training unit (R and S checkpoints of naive, zhan, rocketqa[-q<x>], rance, dml,
                                               cet[-tau<x>]; each ranker's dev MRR@10, which picks eta and the
                                               best baseline)
                                            -> cet_runs, per training unit (each Table 1 ranker reranking its
                                               candidates' top-k on the unit's test queries: the strong run, the
                                               basic one for bm25+bert)

`sparse_qrels` labels every query some unit trains or validates on (under `cv`, every query);
`cet` trains on the unit's training queries and chooses (eta, the best baseline, checkpoints) on
its validation queries; `cet_runs` scores the unit's test queries, so under `cv` the collection's
report covers every judged query once per seed, as for the other trained methods.

The sparse labels are what training sees; `cet_runs` is evaluated later against the dense judgments
(`qrels`), so the report shows what false negatives cost and what CET recovers.

`cet` trains the lab under torchrun (DDP over `torchrun.nproc_per_node` processes, one per GPU of
the host by default, and `torchrun.nnodes` nodes) when that is more than one process, else in the
step's own process (`dagster_ir.methods.cet.job`).
"""

import base64
import json
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

import dagster as dg
import polars as pl

from assets.defs.automation import TRAINING_POOL
from assets.lib.metadata import by_content
from assets.lib.partitions import collection_partitions, training_unit, unit_ins, unit_partitions
from assets.lib.project import training_units
from assets.lib.resources import DataDirResource
from assets.lib.settings import UNIT_SETTINGS, with_settings
from assets.lib.torchrun import TorchrunSettings, is_distributed, run_train_job
from dagster_ir.collections import offset_seeds, unit_queries
from dagster_ir.evaluation import SignificanceConfig, aggregate, evaluate_run, figure_to_png_bytes
from dagster_ir.lazy import lazy_module
from dagster_ir.methods.cet.report import (
    TABLE1_MEASURES,
    dev_best_baseline,
    sweeps_plot,
    table1,
    training_curves_plot,
)
from dagster_ir.negatives.pooling import (
    PoolingConfig,
    false_negative_plot,
    simulate_sparse_labels,
)
from dagster_ir.negatives.pooling import (
    false_negative_analysis as analyse_false_negatives,
)
from dagster_ir.neural.device import Placement, default_processes, resolve_placement
from dagster_ir.neural.training import TrainResult
from dagster_ir.schemas import RUN

if TYPE_CHECKING:
    from dagster_ir.methods.cet.model import LabConfig

cet_job = lazy_module("dagster_ir.methods.cet.job")

GROUP = "cet"


def _given(**values) -> dict:
    return {k: v for k, v in values.items() if v is not None}


def _split_ids(query_splits: pl.DataFrame, splits: list[str]) -> list[str]:
    ids = query_splits.filter(pl.col("split").is_in(splits))["query_id"].to_list()
    if not ids:
        raise ValueError(f"no queries in splits {splits} (have {query_splits['split'].unique().sort().to_list()})")
    return ids


def _named_run(candidate_runs: pl.DataFrame, name: str) -> pl.DataFrame:
    run = candidate_runs.filter(pl.col("run_name") == name)
    if run.height == 0:
        raise ValueError(
            f"no candidate run named {name!r} (have {candidate_runs['run_name'].unique().sort().to_list()})"
        )
    return run


def _figure(figure, caption: str) -> dg.MetadataValue:
    encoded = base64.b64encode(figure_to_png_bytes(figure)).decode()
    return dg.MetadataValue.md(f"![{caption}](data:image/png;base64,{encoded})")


# --- the pooling-bias lab --------------------------------------------------------------------------


class SparseQrelsConfig(dg.Config):
    """Maps onto `dagster_ir.negatives.pooling.PoolingConfig`; `splits` are the queries that get labels
    (None: the training and validation queries of the collection's units, under `cv` every query)."""

    pool_run: str = "bm25"
    pool_depth: int = 10
    max_labels: int = 1
    selection: str = "random"  # "random" | "top"
    seed: int = 42
    splits: list[str] | None = None

    def to_domain(self) -> PoolingConfig:
        return PoolingConfig(
            pool_run=self.pool_run,
            pool_depth=self.pool_depth,
            max_labels=self.max_labels,
            selection=self.selection,
            seed=self.seed,
        )


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="1")
def sparse_qrels(
    context: dg.AssetExecutionContext,
    config: SparseQrelsConfig,
    candidate_runs: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
) -> pl.DataFrame:
    """Simulated sparse training labels: at most m relevant documents per query inside a basic retriever's top-k."""
    domain = config.to_domain()
    ids = (
        _split_ids(query_splits, config.splits)
        if config.splits is not None
        else _trained_ids(query_splits, context.partition_key)
    )
    labels = simulate_sparse_labels(_named_run(candidate_runs, domain.pool_run), qrels, ids, domain)
    counts = labels.counts
    context.add_output_metadata(
        {
            **asdict(counts),
            "label_coverage": round(counts.labels / max(counts.relevant, 1), 4),  # share of relevant pairs labelled
            "config": dg.MetadataValue.json(asdict(domain)),
        }
    )
    return labels.qrels


def _trained_ids(query_splits: pl.DataFrame, collection: str) -> list[str]:
    """The queries some training unit of `collection` trains or validates on, in query_splits order."""
    used: set[str] = set()
    for unit in training_units().values():
        if unit.collection == collection:
            roles = unit_queries(query_splits, unit)
            used.update(roles.train, roles.validation)
    if not used:
        raise ValueError(f"sparse_qrels: no training or validation queries in the units of {collection!r}")
    return [q for q in query_splits["query_id"].to_list() if q in used]


class FalseNegativeConfig(dg.Config):
    """Which retrievers (empty: every candidate run), depths and queries the analysis covers."""

    runs: list[str] = []
    depths: list[int] = [10, 20, 50, 100, 200, 1000]
    n_per_positive: int = 1
    seed: int = 42
    split: str = "train/model"


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="1")
def false_negative_analysis(
    context: dg.AssetExecutionContext,
    config: FalseNegativeConfig,
    candidate_runs: pl.DataFrame,
    qrels: pl.DataFrame,
    sparse_qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
) -> pl.DataFrame:
    """Share of sampled negatives that are in fact relevant, per retriever and depth (the paper's Figure 1)."""
    runs = candidate_runs
    if config.runs:
        runs = pl.concat([_named_run(candidate_runs, name) for name in config.runs])
    table = analyse_false_negatives(
        runs,
        sparse_qrels,
        qrels,
        _split_ids(query_splits, [config.split]),
        config.depths,
        config.n_per_positive,
        config.seed,
    )
    context.add_output_metadata(
        {
            "plot": _figure(
                false_negative_plot(table, f"{context.partition_key}: false negatives by depth"),
                "false-negative share and recall by depth",
            ),
            "table": dg.MetadataValue.md(_markdown(table)),
            **{f"{r['run_name']}@{r['depth']}": round(r["expected_share"], 4) for r in table.iter_rows(named=True)},
        }
    )
    return table


def _markdown(frame: pl.DataFrame) -> str:
    rows = [[f"{v:.4f}" if isinstance(v, float) else str(v) for v in row] for row in frame.rows()]
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * frame.width]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


# --- training ----------------------------------------------------------------------------------------


class CetConfig(dg.Config):
    """Maps onto `dagster_ir.methods.cet.model.LabConfig`: a profile ("demo" | "paper") plus overrides.

    None keeps the profile's value; `layers` 0 means every backbone layer; `max_weight` 0 means no
    clamp (the paper's setting); `eta` None sweeps `eta_quantiles` on dev.
    """

    profile: str = "demo"
    methods: list[str] | None = None  # of naive, zhan, rocketqa, rance, dml, cet
    taus: list[float] | None = None  # extra CET rankers cet-tau<x>
    tau: float | None = None
    max_weight: float | None = None
    dml_sigma: float | None = None
    dml_instance_weight: float | None = None
    backbone: str | None = None
    layers: int | None = None
    max_length: int | None = None
    max_query_length: int | None = None  # default: the profile's, at most half of max_length
    lr: float | None = None
    batch_size: int | None = None
    epochs: int | None = None
    max_steps: int | None = None
    seed: int | None = None
    negative_depth: int | None = None
    n_per_positive: int | None = None
    eta: float | None = None
    eta_quantiles: list[float] | None = None
    resample: bool | None = None
    rerank_depth: int | None = None
    select_on_dev: bool | None = None
    select_start: bool | None = None  # None: the profile's (the untrained start competes on dev)
    strong_run: str | None = None
    basic_run: str | None = None
    dev_judgments: str | None = None
    device: str = "auto"  # "auto": CUDA when available, else the CPU (dagster_ir.neural.device)
    bf16: bool | None = None  # None: bfloat16 autocast where the device has it natively
    # Processes and nodes: nproc_per_node 0 = one per GPU of the host (one on a CPU); more than one
    # process (or node) trains the unit's rankers under torchrun (DDP), else in the step's own process.
    torchrun: TorchrunSettings = TorchrunSettings()

    def to_domain(self) -> "LabConfig":
        from dagster_ir.methods.cet.model import profile  # torch: loaded when the step runs

        base = profile(self.profile)
        ranker = replace(base.cet.ranker, **_given(backbone=self.backbone, max_length=self.max_length))
        query_length = self.max_query_length or min(ranker.max_query_length, ranker.max_length // 2)
        ranker = replace(ranker, max_query_length=query_length)
        if self.layers is not None:
            ranker = replace(ranker, layers=self.layers or None)
        placement = resolve_placement(self.device, self.bf16)
        train = replace(
            base.cet.train,
            device=placement.device,
            bf16=placement.bf16,
            **_given(
                lr=self.lr, batch_size=self.batch_size, epochs=self.epochs, max_steps=self.max_steps, seed=self.seed
            ),
        )
        dml = replace(base.cet.dml, **_given(sigma=self.dml_sigma, instance_weight=self.dml_instance_weight))
        cet = replace(base.cet, ranker=ranker, train=train, dml=dml, **_given(tau=self.tau))
        if self.max_weight is not None:
            cet = replace(cet, max_weight=self.max_weight or None)
        return replace(
            base,
            cet=cet,
            **_given(
                methods=tuple(self.methods) if self.methods is not None else None,
                taus=tuple(self.taus) if self.taus is not None else None,
                eta_quantiles=tuple(self.eta_quantiles) if self.eta_quantiles is not None else None,
                negative_depth=self.negative_depth,
                n_per_positive=self.n_per_positive,
                eta=self.eta,
                resample=self.resample,
                rerank_depth=self.rerank_depth,
                select_on_dev=self.select_on_dev,
                select_start=self.select_start,
                strong_run=self.strong_run,
                basic_run=self.basic_run,
                dev_judgments=self.dev_judgments,
            ),
        )


# code version 5: the untrained start competes with the epochs on dev (chosen_epoch, start_score, dev_score);
# 4: reranked scores strictly decreasing (ties keep the candidate order)
@dg.asset(
    pool=TRAINING_POOL,
    group_name=GROUP,
    deps=[UNIT_SETTINGS],
    partitions_def=unit_partitions,
    code_version="5",
    ins=unit_ins("candidate_runs", "queries", "corpus", "qrels", "sparse_qrels", "query_splits"),
)
def cet(
    context: dg.AssetExecutionContext,
    config: CetConfig,
    data: DataDirResource,
    candidate_runs: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.LazyFrame,
    qrels: pl.DataFrame,
    sparse_qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """R (and S for CET) checkpoints of naive, zhan, rocketqa, rance, DML and CET trained on the unit's sparse labels."""
    from dagster_ir.methods.cet.lab import LabData, manifest, train_lab  # torch: loaded when the step runs

    config = with_settings(config, "cet", training_unit(context).collection, context)
    unit = training_unit(context)
    roles = unit_queries(query_splits, unit)
    domain = offset_seeds(config.to_domain(), unit.seed)
    if not roles.train:
        raise ValueError(f"cet: unit {unit.key} has no training queries")
    lab = LabData(candidate_runs, queries, corpus, sparse_qrels, qrels, tuple(roles.train), tuple(roles.validation))
    processes = default_processes(domain.cet.train.device)
    launched = {}
    if is_distributed(config.torchrun, processes):  # every process trains on its share of each global batch
        values, frames = cet_job.job_inputs(lab, domain, data.files("cet", unit.key))
        outcome, launched = run_train_job(
            context,
            config.torchrun,
            data.files("cet", "jobs") / unit.key.replace("/", "-"),
            cet_job.TARGET,
            values=values,
            frames=frames,
            device=domain.cet.train.device,
            default_nproc=processes,
        )
        trained = cet_job.read_trained(outcome)
    else:
        trained = train_lab(lab, domain, data.files("cet", unit.key))
    table = manifest(trained).with_columns(seed=pl.lit(unit.seed, pl.Int64), unit=pl.lit(unit.key))
    results: dict[str, TrainResult] = {r.run_name: r.result for r in trained if r.result is not None}
    context.add_output_metadata(
        {
            **launched,
            "loss": _figure(training_curves_plot({n: r.loss_curve for n, r in results.items()}), "training loss"),
            "w_r": _figure(
                training_curves_plot(
                    {n: r.log_curves["w_r"] for n, r in results.items() if "w_r" in r.log_curves},
                    ylabel="mean w_r (S's weight on R's loss)",
                ),
                "mean w_r",
            ),
            **{f"{r.run_name} false_negative_share": round(r.false_negative_share, 4) for r in trained},
            **{f"{r.run_name} examples_per_s": round(r.examples_per_s, 2) for r in trained},
            **{f"{r.run_name} dev MRR@10": round(r.dev_mrr10, 4) for r in trained if r.dev_mrr10 is not None},
            **{
                f"{r.run_name} clamped_share": round(r.notes["clamped_share"], 6)
                for r in trained
                if r.notes.get("clamped_share", 0.0) > 0
            },  # only where the clamp bound
            "best_baseline (dev)": dev_best_baseline(table) or "none",
            **{
                f"{t.run_name} eta (dev)": round(t.notes["eta"], 4)
                for t in trained
                if t.run_name == "rocketqa" and "eta" in t.notes
            },
            **_sweeps_metadata(table),
            "seconds": round(sum(r.seconds for r in trained), 1),
            **Placement(domain.cet.train.device, domain.cet.train.bf16).metadata(),
            "config": dg.MetadataValue.json(json.loads(json.dumps(asdict(domain), default=str))),
        }
    )
    return by_content(table)


def _sweeps_metadata(table: pl.DataFrame) -> dict:
    """Figure 4 (dev MRR@10 against tau and eta) when the manifest holds a sweep."""
    if table.filter(pl.col("sweep").is_in(["tau", "eta"]) & pl.col("dev_mrr10").is_not_null()).height == 0:
        return {}
    return {"figure4": _figure(sweeps_plot(table), "Figure 4 on dev: tau and eta")}


# --- runs for the report -------------------------------------------------------------------------------


class CetRunsConfig(dg.Config):
    """How deep the unit's test queries are reranked, and the unit's Table 1 significance settings.

    `profile` and the overrides should match the `cet` asset's (the strong run and rerank depth).
    """

    profile: str = "demo"
    rerank_depth: int | None = None
    strong_run: str | None = None
    score_batch_size: int | None = None
    device: str = "auto"  # as CetConfig's
    bf16: bool | None = None
    alpha: float = 0.05

    def to_domain(self) -> "LabConfig":
        from dagster_ir.methods.cet.model import profile  # torch: loaded when the step runs

        base = profile(self.profile)
        placement = resolve_placement(self.device, self.bf16)
        train = replace(base.cet.train, device=placement.device, bf16=placement.bf16)
        return replace(
            base,
            cet=replace(base.cet, train=train),
            **_given(
                rerank_depth=self.rerank_depth, strong_run=self.strong_run, score_batch_size=self.score_batch_size
            ),
        )


# code version 4: reranked scores strictly decreasing (ties keep the candidate order)
@dg.asset(
    group_name=GROUP,
    deps=[UNIT_SETTINGS],
    partitions_def=unit_partitions,
    code_version="4",
    ins=unit_ins("candidate_runs", "queries", "corpus", "qrels", "query_splits"),
)
def cet_runs(
    context: dg.AssetExecutionContext,
    config: CetRunsConfig,
    cet: pl.DataFrame,
    candidate_runs: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.LazyFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """Each Table 1 ranker's R reranking its candidates' top-k on the unit's test queries (RUN rows and the seed)."""
    from dagster_ir.methods.cet.lab import rerank_lab  # torch: loaded when the step runs

    config = with_settings(config, "cet_runs", training_unit(context).collection, context)
    unit = training_unit(context)
    ids = unit_queries(query_splits, unit).test
    if not ids:
        raise ValueError(f"cet_runs: unit {unit.key} has no test queries")
    domain = config.to_domain()
    strong = _named_run(candidate_runs, domain.strong_run)
    runs = rerank_lab(cet, candidate_runs, queries, corpus, ids, domain)
    context.add_output_metadata(
        {
            **_report_metadata(runs, strong, qrels, ids, cet, domain, config.alpha),
            "depth": domain.rerank_depth,  # the candidates reranked (the report's k)
            **Placement(domain.cet.train.device, domain.cet.train.bf16).metadata(),
        }
    )
    return by_content(runs.with_columns(seed=pl.lit(unit.seed, pl.Int64)))


def _report_metadata(runs, strong, qrels, ids, manifest_frame, domain: "LabConfig", alpha: float) -> dict:
    """Table 1 against the dense judgments (the retriever's own top-k as a reference row; † vs DML,
    ‡ vs the best baseline chosen on dev) and Figure 4 (dev)."""
    in_split = pl.col("query_id").is_in(pl.Series(ids, dtype=pl.String).implode())
    reference = strong.filter(in_split & (pl.col("rank") <= domain.rerank_depth)).select(list(RUN))
    judged = qrels.filter(in_split)
    per_query = evaluate_run(pl.concat([reference, runs]), judged, list(TABLE1_MEASURES))
    metadata = {
        f"{r['run_name']} {r['measure']}": round(r["mean"], 4)
        for r in aggregate(per_query).iter_rows(named=True)
        if r["measure"] in ("RR@10", "nDCG@10")
    }
    names = set(runs["run_name"].to_list())
    reference = "dml" if "dml" in names else "naive"
    if reference in names:
        order = [domain.strong_run, *runs["run_name"].unique(maintain_order=True).to_list()]
        best = dev_best_baseline(manifest_frame)
        table = table1(
            per_query,
            order,
            retriever=domain.strong_run,
            reference=reference,
            best=best if best in names else None,
            config=SignificanceConfig(alpha=alpha, n_resamples=1000),
        )
        metadata["table1"] = dg.MetadataValue.md(table.to_markdown())
    metadata.update(_sweeps_metadata(manifest_frame) if "sweep" in manifest_frame.columns else {})
    return metadata


# --- checks --------------------------------------------------------------------------------------------


@dg.asset_check(
    asset=sparse_qrels, blocking=True, partitions_def=collection_partitions, additional_ins={"qrels": dg.AssetIn()}
)
def sparse_labels_are_relevant(sparse_qrels: pl.DataFrame, qrels: pl.DataFrame) -> dg.AssetCheckResult:
    """Every simulated label is a relevant document of the dense judgments, and none is duplicated."""
    relevant = qrels.filter(pl.col("relevance") > 0).select("query_id", "doc_id").unique()
    not_relevant = sparse_qrels.join(relevant, on=["query_id", "doc_id"], how="anti").height
    duplicates = sparse_qrels.select(pl.struct("query_id", "doc_id").is_duplicated().sum()).item()
    return dg.AssetCheckResult(
        passed=not_relevant == 0 and duplicates == 0,
        metadata={"labels_not_relevant": not_relevant, "duplicate_labels": duplicates},
    )


@dg.asset_check(asset=cet_runs, blocking=True, partitions_def=unit_partitions)
def cet_runs_rerank_the_same_candidates(cet_runs: pl.DataFrame) -> dg.AssetCheckResult:
    """Every ranker of the strong run reorders the same (query, doc) candidates, once each, with finite
    scores (bm25+bert reranks the basic run's: only its rows' uniqueness and scores are checked)."""
    from dagster_ir.methods.cet.lab import BM25_BERT  # torch: loaded when the step runs

    duplicates = cet_runs.select(pl.struct("run_name", "query_id", "doc_id").is_duplicated().sum()).item()
    non_finite = cet_runs.select((~pl.col("score").is_finite()).sum()).item()
    sets = {
        name: set(part.select("query_id", "doc_id").iter_rows())
        for (name,), part in cet_runs.filter(pl.col("run_name") != BM25_BERT)
        .partition_by("run_name", as_dict=True)
        .items()
    }
    first = next(iter(sets.values()), set())
    differing = sorted(name for name, pairs in sets.items() if pairs != first)
    return dg.AssetCheckResult(
        passed=not (duplicates or non_finite or differing),
        metadata={
            "duplicate_rows": duplicates,
            "non_finite_scores": non_finite,
            "runs_with_other_candidates": len(differing),
        },
    )


cet_assets = [sparse_qrels, false_negative_analysis, cet, cet_runs]
cet_checks = [sparse_labels_are_relevant, cet_runs_rerank_the_same_candidates]
