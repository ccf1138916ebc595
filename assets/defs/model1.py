"""Model 1 assets: EM tables per vocabulary, neural Model 1 and its export, BERT-Model1, BERT-vanilla, fused runs.

model1_em (words, word pieces) --------+
neural_model1 -> model1_export --------+--> model1_runs (feature runs; lambda, p_self tuned) --> fusion_runs
bert_model1, bert_vanilla -------------+

Every asset is partitioned by training unit (collection, fold, seed; see `assets.lib.partitions`), as
`cross_encoder` and `reranked_runs`: a unit trains EM and the neural models on its training
queries, chooses epochs, lambda and p_self on its validation queries, learns the fusion weights on
its fusion queries (train/fusion, or the validation fold under `protocol: cv`) and scores its test
queries, so under cv the five folds' runs together cover every query. Seed s shifts every seed of
the settings by s (training, negative sampling, fusion restarts).

`neural_model1`, `bert_model1` and `bert_vanilla` train under torchrun (DDP over
`torchrun.nproc_per_node` processes, one per GPU of the host by default, and `torchrun.nnodes`
nodes) when that is more than one process, else in the step's own process
(`dagster_ir.methods.model1.ranker_job`).
"""

import hashlib
import json
import shutil
import time
import warnings
from dataclasses import asdict, replace
from typing import ClassVar

import dagster as dg
import polars as pl

from assets.defs.automation import TRAINING_POOL
from assets.lib.metadata import KEPT_WEIGHTS, by_content, kept_weights_entry
from assets.lib.partitions import training_unit, unit_ins, unit_partitions
from assets.lib.plots import bar_chart_markdown
from assets.lib.resources import DataDirResource
from assets.lib.settings import UNIT_SETTINGS, with_settings
from assets.lib.torchrun import TorchrunSettings, is_distributed, run_train_job
from dagster_ir.collections import TrainingUnit, UnitQueries, offset_seeds, tag_unit, unit_queries
from dagster_ir.fusion import FusionConfig
from dagster_ir.lazy import lazy_module
from dagster_ir.methods.model1 import (
    BERT_RUN,
    BERT_VANILLA_RUN,
    FEATURE_RUNS,
    KINDS,
    WORDPIECES,
    WORDS,
    Model1Config,
    Model1RunsConfig,
    Model1Scorer,
    ScoringConfig,
    TranslationTable,
    bm25_norms,
    bm25_rerank,
    candidates,
    collection_stats,
    collection_vocabulary,
    document_text,
    explanation_markdown,
    fuse_with_bm25,
    index_collection,
    normalised_bm25,
    row_sums,
    train_model1,
    tune_model1,
    wordpiece_vocabulary,
    write_giza,
)
from dagster_ir.methods.model1 import PROFILES as MODEL1_PROFILES
from dagster_ir.methods.model1 import runs as runs_profiles
from dagster_ir.negatives import sample_negatives
from dagster_ir.neural.device import Placement, default_processes, resolve_placement
from dagster_ir.schemas import MODEL1_TABLE, NEGATIVES
from dagster_ir.storage.atomic import write_text_atomic
from dagster_ir.storage.locks import remove_unlocked_siblings
from dagster_ir.storage.parquet import frame_version

# the torch models, imported where a step uses them (the definitions import this module without torch)
bert = lazy_module("dagster_ir.methods.model1.bert")
nn = lazy_module("dagster_ir.methods.model1.neural")
ranker_job = lazy_module("dagster_ir.methods.model1.ranker_job")

GROUP = "model1"
COLLECTION_INPUTS = ("corpus", "queries", "qrels", "query_splits", "candidate_runs")
# the report row each trained Model 1 ranker's weights make (nn-model1-exp and the fused rows read them too)
RUN_NAMES = {"neural_model1": "nn-model1", "bert_model1": BERT_RUN, "bert_vanilla": BERT_VANILLA_RUN}


def _profile(profiles: dict, name: str):
    if name not in profiles:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(profiles)}")
    return profiles[name]


def _given(**values) -> dict:
    return {k: v for k, v in values.items() if v is not None}


def _ids(roles: UnitQueries, role: str, unit: TrainingUnit) -> pl.Series:
    """The unit's query ids of `role` as a Series; an empty role is an error naming the unit."""
    ids = roles.of(role)
    if not ids:
        raise ValueError(f"training unit {unit.key}: no {role} queries")
    return pl.Series("query_id", ids, dtype=pl.String)


def _curve(values: list[float], label: str, max_points: int = 60) -> dg.MetadataValue:
    step = max(1, len(values) // max_points)
    xs = list(range(1, len(values) + 1))[::step]
    return bar_chart_markdown(xs, [round(v, 5) for v in values[::step]], "step", label)


# --- non-parametric Model 1 -----------------------------------------------------------------


class Model1EmConfig(dg.Config):
    """Maps onto `dagster_ir.methods.model1.Model1Config`: a profile ("demo" | "paper") plus overrides.

    None keeps the profile's value; `no_self_translation` turns T(t|t) off (rows renormalised).
    """

    profile: str = "demo"
    iterations: int | None = None
    chunk_ratio: float | None = None
    min_chunk: int | None = None
    min_prob: float | None = None
    max_translations: int | None = None
    self_prob: float | None = None
    no_self_translation: bool = False
    null_word: bool | None = None  # EM aligns to an empty source word too (the paper profile's default)

    def to_domain(self, vocabulary: str) -> Model1Config:
        base = _profile(MODEL1_PROFILES, self.profile)
        prune = replace(
            base.prune,
            **_given(min_prob=self.min_prob, max_translations=self.max_translations, self_prob=self.self_prob),
        )
        if self.no_self_translation:
            prune = replace(prune, self_prob=None)
        return replace(
            base,
            vocabulary=vocabulary,
            prune=prune,
            em=replace(base.em, **_given(iterations=self.iterations, null_word=self.null_word)),
            bitext=replace(base.bitext, **_given(chunk_ratio=self.chunk_ratio, min_chunk=self.min_chunk)),
        )


@dg.asset(
    pool=TRAINING_POOL,
    group_name=GROUP,
    deps=[UNIT_SETTINGS],
    partitions_def=unit_partitions,
    code_version="2",
    ins=unit_ins("corpus", "queries", "qrels", "query_splits"),
)
def model1_em(
    context: dg.AssetExecutionContext,
    config: Model1EmConfig,
    data: DataDirResource,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """IBM Model 1 tables T(q|d) (vocabulary, src_token, tgt_token, prob) by EM on the unit's training queries, pruned."""
    config = with_settings(config, "model1_em", training_unit(context).collection, context)
    unit = training_unit(context)
    train_ids = _ids(unit_queries(query_splits, unit), "train", unit)
    frames, metadata = [], {"train_queries": train_ids.len()}
    for kind in KINDS:
        domain = config.to_domain(kind)
        vocabulary = collection_vocabulary(kind, corpus, queries, backbone=domain.backbone)
        trained = train_model1(queries.select("query_id", "text"), qrels, corpus, train_ids, vocabulary, domain)
        folder = data.files("model1", unit.key, kind)
        giza = write_giza(trained.table, folder / "model1.t1.txt")
        vocabulary.save(folder / "vocabulary")
        history = trained.history
        metadata.update(
            {
                f"{kind} entries": trained.table.nnz,
                f"{kind} entries_before_pruning": trained.raw_entries,
                f"{kind} query_doc_pairs": trained.n_query_doc_pairs,
                f"{kind} bitext_pairs": trained.n_bitext_pairs,
                f"{kind} vocabulary_size": len(vocabulary),
                f"{kind} seconds": round(trained.seconds, 2),
                f"{kind} em_pairs_per_s": [round(h.pairs_per_second) for h in history],
                f"{kind} log_likelihood": bar_chart_markdown(
                    [h.iteration for h in history],
                    [round(h.log_likelihood, 4) for h in history],
                    "EM iteration",
                    "mean log-likelihood per target token",
                ),
                f"{kind} config": dg.MetadataValue.json(json.loads(json.dumps(asdict(domain)))),
                f"{kind} giza": dg.MetadataValue.path(data.relative(giza)),
            }
        )
        frames.append(trained.table.to_frame().with_columns(vocabulary=pl.lit(kind)))
    context.add_output_metadata(metadata)
    return by_content(tag_unit(pl.concat(frames).select("vocabulary", *MODEL1_TABLE), unit))


def _rows_sum_to_one(model1_em: pl.DataFrame) -> dg.AssetCheckResult:
    """Every source token's translation probabilities sum to 1 in each vocabulary (after pruning and self-translation)."""
    sums = pl.concat(
        [
            row_sums(part.drop("vocabulary")).with_columns(vocabulary=pl.lit(kind))
            for (kind,), part in model1_em.select("vocabulary", *MODEL1_TABLE).group_by("vocabulary")
        ]
    )
    deviation = (sums["total"] - 1.0).abs()
    off = int((deviation > 1e-4).sum())
    kinds = sorted(sums["vocabulary"].unique().to_list())
    return dg.AssetCheckResult(
        passed=off == 0 and kinds == sorted(KINDS),
        metadata={
            "source_tokens": sums.height,
            "rows_not_summing_to_1": off,
            "vocabularies": ", ".join(kinds),
            "max_deviation": float(deviation.max() or 0.0),
        },
    )


with warnings.catch_warnings():  # partitioned checks are marked preview; each partition is its own table
    warnings.simplefilter("ignore", dg.PreviewWarning)
    model1_rows_sum_to_one = dg.asset_check(
        asset=model1_em, blocking=True, partitions_def=unit_partitions, name="model1_rows_sum_to_one"
    )(_rows_sum_to_one)


# --- neural Model 1 and BERT-Model1 ---------------------------------------------------------


class _TrainingOverrides(dg.Config):
    backbone: str | None = None  # a Hugging Face name or folder; None: the profile's
    epochs: int | None = None
    lr: float | None = None
    batch_size: int | None = None
    max_steps: int | None = None
    seed: int | None = None
    device: str = "auto"  # "auto": CUDA when available, else the CPU (dagster_ir.neural.device)
    # None: the model's default precision (`auto_bf16`: bfloat16 where the device has it natively for
    # the BERT models; float32 for neural Model 1, whose Model 1 layer sums small probabilities)
    bf16: bool | None = None
    # Processes and nodes: nproc_per_node 0 = one per GPU of the host (one on a CPU); more than one
    # process (or node) trains under torchrun (DDP), else in the step's own process.
    torchrun: TorchrunSettings = TorchrunSettings()
    select_start: bool | None = None  # None: the profile's (the untrained start competes with the epochs)
    auto_bf16: ClassVar[bool] = True

    def train_config(self, base):
        auto = None if self.auto_bf16 else False
        placement = resolve_placement(self.device, auto if self.bf16 is None else self.bf16)
        return replace(
            base,
            device=placement.device,
            bf16=placement.bf16,
            **_given(
                epochs=self.epochs, lr=self.lr, batch_size=self.batch_size, max_steps=self.max_steps, seed=self.seed
            ),
        )


class NeuralModel1AssetConfig(_TrainingOverrides):
    """Maps onto `dagster_ir.methods.model1.neural.NeuralModel1Config` (profile + overrides)."""

    profile: str = "demo"
    max_doc_length: int | None = None
    lam: float | None = None  # 0: Eq. 4, no collection term (the paper profile's)
    auto_bf16: ClassVar[bool] = False

    def to_domain(self) -> "nn.NeuralModel1Config":
        base = _profile(nn.PROFILES, self.profile)
        return replace(
            base,
            train=self.train_config(base.train),
            layer=replace(base.layer, **_given(lam=self.lam)),
            **_given(max_doc_length=self.max_doc_length, backbone=self.backbone, select_start=self.select_start),
        )


class BertModel1AssetConfig(_TrainingOverrides):
    """Maps onto `dagster_ir.methods.model1.bert.BertModel1Config` (profile + overrides)."""

    profile: str = "demo"
    chunk_length: int | None = None
    max_chunks: int | None = None
    head_lr: float | None = None  # the head's (Model 1 layer's, or BERT-vanilla's linear layer's) rate

    def to_domain(self) -> "bert.BertModel1Config":
        base = _profile(bert.PROFILES, self.profile)
        train = self.train_config(base.train)
        if self.head_lr is not None:
            train = replace(train, lr_groups=((bert.HEAD_PREFIX, self.head_lr),))
        return replace(
            base,
            train=train,
            **_given(
                chunk_length=self.chunk_length,
                max_chunks=self.max_chunks,
                backbone=self.backbone,
                select_start=self.select_start,
            ),
        )


def _training_dir(data: DataDirResource, name: str, unit: TrainingUnit, fingerprint: str):
    """A checkpoint folder per (settings, data): resumed when both match, old ones removed (unless in use);
    removed once the model is saved (a training unit's states took 0.4-0.7 GB on Cranfield)."""
    folder = data.files(name, unit.key, "training") / fingerprint
    remove_unlocked_siblings(folder)
    return folder


def _fingerprint(config, *frames: pl.DataFrame) -> str:
    digest = hashlib.blake2b(json.dumps(asdict(config), sort_keys=True, default=str).encode(), digest_size=8)
    for frame in frames:
        digest.update(frame_version(frame).encode())
    return digest.hexdigest()


def _train_ranker(context, data, name, model, config, corpus, queries, qrels, query_splits, candidate_runs, settings):
    """Train `model` (neural Model 1, BERT-Model1 or BERT-vanilla) on the unit's training queries; its manifest.

    Negatives are drawn per training query from BM25's top `config.negatives.depth` (the paper: 20 of 500);
    the epoch is chosen on the validation queries' BM25 candidates, where the untrained start competes
    too (kept when no epoch beats it; metadata `kept weights`, under the run name of `RUN_NAMES`)."""
    from dagster_ir.neural.training import kept_record  # torch: loaded when the step runs

    unit = training_unit(context)
    roles = unit_queries(query_splits, unit)
    train_ids, validation_ids = _ids(roles, "train", unit), _ids(roles, "validation", unit)
    bm25 = candidate_runs.filter(pl.col("run_name") == "bm25")
    sample = sample_negatives(
        bm25, qrels.filter(pl.col("query_id").is_in(train_ids.implode())), train_ids, config.negatives
    )
    negatives = sample.negatives.select(list(NEGATIVES)).sort(list(NEGATIVES))
    vocabulary = wordpiece_vocabulary(config.backbone)
    dev_run = candidates(candidate_runs, "bm25", validation_ids, config.dev_depth)
    docs = pl.concat([negatives["pos_doc_id"], negatives["neg_doc_id"], dev_run["doc_id"]]).unique()
    texts = nn.NeuralTexts(
        nn.TokenizedTexts.of_queries(queries, vocabulary), nn.TokenizedTexts.of_documents(corpus, docs, vocabulary)
    )
    fingerprint = _fingerprint(config, negatives, dev_run.sort("query_id", "doc_id"))
    checkpoints = _training_dir(data, name, unit, fingerprint)
    processes = default_processes(config.train.device)
    launched = {}
    if is_distributed(settings.torchrun, processes):  # every process trains on its share of each global batch
        job = data.files(name, unit.key, "jobs") / fingerprint
        values, frames = ranker_job.job_inputs(
            model,
            job,
            queries=queries,
            corpus=corpus,
            doc_ids=docs,
            negatives=negatives,
            dev_run=dev_run,
            qrels=qrels,
            checkpoint_dir=checkpoints,
            output=data.files(name, unit.key) / "model",
        )
        outcome, launched = run_train_job(
            context,
            settings.torchrun,
            job,
            ranker_job.TARGET,
            values=values,
            frames=frames,
            device=config.train.device,
            default_nproc=processes,
        )
        (result, start_score, kept_start), folder = (
            ranker_job.read_train_result(outcome),
            data.files(name, unit.key) / "model",
        )
    else:
        result, start_score, kept_start = nn.train_ranker(
            model, texts, negatives, checkpoints, dev_run=dev_run, qrels=qrels
        )
        folder = model.save(data.files(name, unit.key) / "model")
    kept = {**kept_record(RUN_NAMES[name], result, start_score, kept_start), "unit": unit.key}
    shutil.rmtree(data.files(name, unit.key, "training"), ignore_errors=True)  # resumable state, done with
    context.add_output_metadata(
        {
            **launched,
            "steps": result.steps,
            "best_epoch": result.best_epoch,
            "seconds": round(result.seconds, 2),
            "examples_per_s": round(result.examples_per_s, 2),
            "seed": config.train.seed,
            **Placement(config.train.device, config.train.bf16).metadata(),
            "train_queries": train_ids.len(),
            "validation_queries": validation_ids.len(),
            "negatives": negatives.height,
            "validation_nDCG@10": [round(s, 4) for s in result.dev_scores],
            "start nDCG@10": None if start_score is None else round(start_score, 4),
            "kept epoch": kept["chosen_epoch"],  # 0: the untrained start
            KEPT_WEIGHTS: kept_weights_entry([kept]),
            "loss": _curve(result.loss_curve, "margin loss"),
            "model": dg.MetadataValue.path(data.relative(folder)),
            "config": dg.MetadataValue.json(json.loads(json.dumps(asdict(config), default=str))),
        }
    )
    return tag_unit(
        pl.DataFrame(
            {
                "path": [str(folder)],
                "backbone": [config.backbone],
                "steps": [result.steps],
                "best_epoch": [result.best_epoch],
                "chosen_epoch": [kept["chosen_epoch"]],
                "start_score": pl.Series([start_score], dtype=pl.Float64),
                "dev_ndcg10": pl.Series(
                    [kept["dev_score"]], dtype=pl.Float64
                ),  # the kept weights'; null: no validation
                "train_seed": [config.train.seed],
                "seconds": [result.seconds],
            }
        ),
        unit,
    )


@dg.asset(
    pool=TRAINING_POOL,
    group_name=GROUP,
    deps=[UNIT_SETTINGS],
    partitions_def=unit_partitions,
    code_version="3",  # 3: the untrained start competes with the epochs on validation
    ins=unit_ins(*COLLECTION_INPUTS),
)
def neural_model1(
    context: dg.AssetExecutionContext,
    config: NeuralModel1AssetConfig,
    data: DataDirResource,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    candidate_runs: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """Context-free neural Model 1 over word pieces, trained with a summed margin loss on the unit's queries (manifest)."""
    config = with_settings(config, "neural_model1", training_unit(context).collection, context)
    domain = offset_seeds(config.to_domain(), training_unit(context).seed)
    stats = collection_stats(corpus, wordpiece_vocabulary(domain.backbone))
    model, _ = nn.build_model(stats, domain)
    return by_content(
        _train_ranker(
            context,
            data,
            "neural_model1",
            model,
            domain,
            corpus,
            queries.select("query_id", "text"),
            qrels,
            query_splits,
            candidate_runs,
            config,
        )
    )


def _bert_ranker(
    context,
    config: BertModel1AssetConfig,
    data,
    kind: type,
    name: str,
    corpus,
    queries,
    qrels,
    query_splits,
    candidate_runs,
) -> pl.DataFrame:
    domain = offset_seeds(config.to_domain(), training_unit(context).seed)
    stats = collection_stats(corpus, wordpiece_vocabulary(domain.backbone))
    model = kind.from_backbone(stats, domain)
    return _train_ranker(
        context,
        data,
        name,
        model,
        domain,
        corpus,
        queries.select("query_id", "text"),
        qrels,
        query_splits,
        candidate_runs,
        config,
    )


@dg.asset(
    pool=TRAINING_POOL,
    group_name=GROUP,
    deps=[UNIT_SETTINGS],
    partitions_def=unit_partitions,
    code_version="3",  # 3: the untrained start competes with the epochs on validation
    ins=unit_ins(*COLLECTION_INPUTS),
)
def bert_model1(
    context: dg.AssetExecutionContext,
    config: BertModel1AssetConfig,
    data: DataDirResource,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    candidate_runs: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """BERT-Model1: the Model 1 layer over BERT token vectors, documents in chunks, trained end to end (manifest)."""
    config = with_settings(config, "bert_model1", training_unit(context).collection, context)
    return by_content(
        _bert_ranker(
            context, config, data, bert.BertModel1, "bert_model1", corpus, queries, qrels, query_splits, candidate_runs
        )
    )


@dg.asset(
    pool=TRAINING_POOL,
    group_name=GROUP,
    deps=[UNIT_SETTINGS],
    partitions_def=unit_partitions,
    code_version="2",  # 2: the untrained start competes with the epochs on validation
    ins=unit_ins(*COLLECTION_INPUTS),
)
def bert_vanilla(
    context: dg.AssetExecutionContext,
    config: BertModel1AssetConfig,
    data: DataDirResource,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    candidate_runs: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """BERT-vanilla (full): BERT-Model1's chunks, their mean [CLS] vector scored by a linear layer (manifest)."""
    config = with_settings(config, "bert_vanilla", training_unit(context).collection, context)
    return by_content(
        _bert_ranker(
            context,
            config,
            data,
            bert.BertVanilla,
            "bert_vanilla",
            corpus,
            queries,
            qrels,
            query_splits,
            candidate_runs,
        )
    )


class Model1ExportConfig(dg.Config):
    """Export settings; None keeps the trained model's (`export_threshold`, `export_targets`)."""

    threshold: float | None = None
    targets: str | None = None  # "collection" | "queries"


@dg.asset(group_name=GROUP, partitions_def=unit_partitions, code_version="2", ins=unit_ins("corpus", "queries"))
def model1_export(
    context: dg.AssetExecutionContext,
    config: Model1ExportConfig,
    data: DataDirResource,
    neural_model1: pl.DataFrame,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
) -> pl.DataFrame:
    """The neural Model 1 sparsified: T(q|d) over vocabulary pairs, kept where T >= threshold (NN-Model1-exp)."""
    unit = training_unit(context)
    model = nn.NeuralModel1.load(neural_model1["path"][0])
    settings = replace(model.config, **_given(export_threshold=config.threshold, export_targets=config.targets))
    vocabulary = wordpiece_vocabulary(settings.backbone)
    stats = collection_stats(corpus, vocabulary)
    sources, targets = nn.export_vocabulary(settings, stats, queries, vocabulary)
    started = time.perf_counter()
    table = nn.export_table(model, vocabulary, sources, targets, threshold=settings.export_threshold)
    seconds = time.perf_counter() - started
    giza = write_giza(table, data.files("model1_export", unit.key) / "nn-model1.t1.txt")
    pairs = sources.size * targets.size
    context.add_output_metadata(
        {
            "entries": table.nnz,
            "pairs_evaluated": pairs,
            "kept_fraction": round(table.nnz / max(pairs, 1), 6),
            "threshold": settings.export_threshold,
            "targets": settings.export_targets,
            "seconds": round(seconds, 2),
            "pairs_per_s": round(pairs / max(seconds, 1e-9)),
            "giza": dg.MetadataValue.path(data.relative(giza)),
        }
    )
    return tag_unit(table.to_frame(), unit)


# --- runs -----------------------------------------------------------------------------------


class Model1RunsAssetConfig(dg.Config):
    """Maps onto `dagster_ir.methods.model1.Model1RunsConfig` (profile + overrides) and the EM profile's scoring.

    `lams` and `self_probs` override the tuning grid; a single value each fixes it (nothing is tuned)."""

    profile: str = "demo"
    depth: int | None = None
    bert_depth: int | None = None
    lams: list[float] | None = None
    self_probs: list[float] | None = None
    tuning_measure: str | None = None
    explained_examples: int = 3

    def scoring(self) -> ScoringConfig:
        """The Model 1 scorer settings of the EM profile of the same name (lambda is tuned)."""
        return _profile(MODEL1_PROFILES, self.profile).scoring

    def to_domain(self) -> Model1RunsConfig:
        base = _profile(runs_profiles.PROFILES, self.profile)
        grid = replace(
            base.tuning,
            **_given(
                lams=tuple(self.lams) if self.lams else None,
                self_probs=tuple(self.self_probs) if self.self_probs else None,
                measure=self.tuning_measure,
            ),
        )
        return replace(base, tuning=grid, **_given(depth=self.depth, bert_depth=self.bert_depth))


def _tables(model1_em: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The EM table of each vocabulary."""
    by_kind = {}
    for kind in KINDS:
        part = model1_em.filter(pl.col("vocabulary") == kind).select(list(MODEL1_TABLE))
        if part.height == 0:
            raise ValueError(f"model1_em has no {kind} table for this training unit")
        by_kind[kind] = part
    return by_kind


@dg.asset(
    group_name=GROUP,
    deps=[UNIT_SETTINGS],
    partitions_def=unit_partitions,
    code_version="3",  # 3: the profiles' depths, one k per report section (demo 20, paper 100)
    ins=unit_ins(*COLLECTION_INPUTS),
)
def model1_runs(
    context: dg.AssetExecutionContext,
    config: Model1RunsAssetConfig,
    data: DataDirResource,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    candidate_runs: pl.DataFrame,
    model1_em: pl.DataFrame,
    model1_export: pl.DataFrame,
    neural_model1: pl.DataFrame,
    bert_model1: pl.DataFrame,
    bert_vanilla: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """BM25 reranked by BM25(words|wp), Model1(words|wp) (lambda, p_self tuned), NN-Model1(-exp), BERT-Model1, BERT-vanilla."""
    config = with_settings(config, "model1_runs", training_unit(context).collection, context)
    unit = training_unit(context)
    roles = unit_queries(query_splits, unit)
    domain = config.to_domain()
    queries = queries.select("query_id", "text")
    test_ids = _ids(roles, "test", unit)
    query_ids = pl.concat([_ids(roles, "fusion", unit), test_ids]).unique(maintain_order=True)
    run = candidates(candidate_runs, domain.base_run, query_ids, domain.depth)
    validation = candidates(candidate_runs, domain.base_run, _ids(roles, "validation", unit), domain.depth)
    docs = pl.concat([run["doc_id"], validation["doc_id"]]).unique()
    tables, outputs, seconds, scorers, grids, metadata = _tables(model1_em), [], {}, {}, [], {}
    for kind, name in ((WORDS, "model1(words)"), (WORDPIECES, "model1(wp)")):
        vocabulary = collection_vocabulary(kind, corpus, queries)
        index, stats = index_collection(corpus, vocabulary, keep=docs)
        table = TranslationTable.from_frame(tables[kind], vocabulary)
        tuned = tune_model1(table, index, stats, validation, queries, qrels, config.scoring(), domain.tuning)
        grids.append(tuned.grid)
        metadata.update({f"{kind} lambda": tuned.scoring.lam, f"{kind} p_self": tuned.self_prob})
        scorers[kind] = Model1Scorer(tuned.table, index, stats, tuned.scoring)
        outputs.append(_timed(seconds, name, scorers[kind].rerank, run, queries, name))
        bm25_name = f"bm25({'wp' if kind == WORDPIECES else 'words'})"
        bm25 = bm25_rerank(run, queries, vocabulary, index, stats, bm25_name)
        outputs.append(normalised_bm25(bm25, bm25_norms(queries, vocabulary, stats)))
    wp = scorers[WORDPIECES]
    neural = nn.NeuralModel1.load(neural_model1["path"][0])
    # the export is scored on the words the neural model reads: each document's first max_doc_length pieces
    cut, cut_stats = index_collection(
        corpus, wp.vocabulary, keep=run["doc_id"].unique(), max_length=neural.config.max_doc_length
    )
    exported = Model1Scorer(
        TranslationTable.from_frame(model1_export.select(list(MODEL1_TABLE)), wp.vocabulary), cut, cut_stats, wp.config
    )
    outputs.append(_timed(seconds, "nn-model1-exp", exported.rerank, run, queries, "nn-model1-exp"))
    bert_run = run.filter((pl.col("rank") <= domain.bert_depth) & pl.col("query_id").is_in(test_ids.implode()))
    for name, model, candidates_run in (
        ("nn-model1", neural, run),
        (BERT_RUN, bert.BertModel1.load(bert_model1["path"][0]), bert_run),
        (BERT_VANILLA_RUN, bert.BertVanilla.load(bert_vanilla["path"][0]), bert_run),
    ):
        texts = _texts(model.config.backbone, queries, corpus, candidates_run)
        batch = model.config.rerank_batch_size
        outputs.append(_timed(seconds, name, nn.rerank, model, texts, candidates_run, name, batch))
    explained = _explanations(wp, run, queries, corpus, config.explained_examples)
    files = data.files("model1_runs", unit.key)
    write_text_atomic(files / EXPLANATIONS_FILE, explained)
    grid = pl.concat(grids)
    write_text_atomic(files / TUNING_FILE, grid.write_csv())
    sizes = {name: (bert_run if name in (BERT_RUN, BERT_VANILLA_RUN) else run).height for name in seconds}
    context.add_output_metadata(
        {
            **metadata,
            **{f"{name} ms per 1K docs": round(1e6 * s / max(sizes[name], 1), 2) for name, s in seconds.items()},
            "queries": run["query_id"].n_unique(),
            "validation_queries": validation["query_id"].n_unique(),
            "depth": domain.depth,
            "bert_depth": domain.bert_depth,
            "tuning": dg.MetadataValue.md(_grid_markdown(grid)),
            "explanations": dg.MetadataValue.md(f"### {EXPLANATIONS_TITLE}\n\n{explained}"),
        }
    )
    return by_content(tag_unit(pl.concat(outputs), unit))


TUNING_FILE = "tuning.csv"


def _grid_markdown(grid: pl.DataFrame) -> str:
    lines = ["| vocabulary | lambda | p_self | validation score | chosen |", "|---|---:|---:|---:|---|"]
    lines += [
        f"| {r['vocabulary']} | {r['lam']} | {r['self_prob']} | {r['score']:.4f} | {'yes' if r['chosen'] else ''} |"
        for r in grid.iter_rows(named=True)
    ]
    return "\n".join(lines)


def _timed(seconds: dict, name: str, function, *args):
    """Call `function(*args)`, recording its wall time under `name`."""
    started = time.perf_counter()
    result = function(*args)
    seconds[name] = time.perf_counter() - started
    return result


def _texts(backbone: str, queries: pl.DataFrame, corpus: pl.LazyFrame, run: pl.DataFrame) -> "nn.NeuralTexts":
    vocabulary = wordpiece_vocabulary(backbone)
    return nn.NeuralTexts(
        nn.TokenizedTexts.of_queries(queries, vocabulary),
        nn.TokenizedTexts.of_documents(corpus, run["doc_id"].unique(), vocabulary),
    )


EXPLANATIONS_FILE = "explanations.md"
EXPLANATIONS_TITLE = "Model 1 (word pieces): what each query token contributes (BM25's top document)"


def _explanations(scorer: Model1Scorer, run: pl.DataFrame, queries: pl.DataFrame, corpus: pl.LazyFrame, n: int) -> str:
    """Markdown: for the first `n` queries, Model 1 (word pieces) explained on the BM25 top document."""
    top = run.filter(pl.col("rank") == 1).sort("query_id").head(n)
    docs = (
        corpus.filter(pl.col("doc_id").is_in(top["doc_id"].implode())).select("doc_id", text=document_text()).collect()
    )
    pairs = top.join(queries, on="query_id").join(docs.rename({"text": "doc_text"}), on="doc_id")
    blocks = [
        explanation_markdown(r["text"], r["doc_text"], scorer.explain(r["text"], r["doc_text"]))
        for r in pairs.iter_rows(named=True)
    ]
    return "\n\n".join(blocks)


class FusionRunsConfig(dg.Config):
    """Which measure the fusion weights maximise, and coordinate-ascent settings (profile + overrides)."""

    profile: str = "demo"
    measure: str | None = None
    restarts: int | None = None
    seed: int | None = None

    def to_domain(self) -> Model1RunsConfig:
        base = _profile(runs_profiles.PROFILES, self.profile)
        ascent = replace(base.fusion.ascent, **_given(restarts=self.restarts, seed=self.seed))
        return replace(base, fusion=FusionConfig(measure=self.measure or base.fusion.measure, ascent=ascent))


@dg.asset(
    group_name=GROUP,
    deps=[UNIT_SETTINGS],
    partitions_def=unit_partitions,
    code_version="3",  # 3: the profiles' depths, one k per report section (demo 20, paper 100)
    ins=unit_ins(*COLLECTION_INPUTS),
)
def fusion_runs(
    context: dg.AssetExecutionContext,
    config: FusionRunsConfig,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    candidate_runs: pl.DataFrame,
    model1_runs: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """Table 2 rows on the unit's test queries: BM25 + each feature run (weights from its fusion queries), BERT rows."""
    config = with_settings(config, "fusion_runs", training_unit(context).collection, context)
    unit = training_unit(context)
    roles = unit_queries(query_splits, unit)
    domain = offset_seeds(config.to_domain(), unit.seed)
    train_ids, test_ids = _ids(roles, "fusion", unit), _ids(roles, "test", unit)
    queries = queries.select("query_id", "text")
    words = collection_vocabulary(WORDS, corpus, queries)
    bm25 = candidates(candidate_runs, domain.base_run, pl.concat([train_ids, test_ids]).unique(), domain.depth)
    bm25 = normalised_bm25(bm25, bm25_norms(queries, words, collection_stats(corpus, words)))
    features = {name: model1_runs.filter(pl.col("run_name") == name).select(bm25.columns) for name in FEATURE_RUNS}
    fused, models = fuse_with_bm25(bm25, features, qrels, train_ids, test_ids, domain.fusion)
    bert_runs = model1_runs.filter(
        pl.col("run_name").is_in([BERT_RUN, BERT_VANILLA_RUN]) & pl.col("query_id").is_in(test_ids.implode())
    ).select(bm25.columns)
    context.add_output_metadata(
        {
            "measure": domain.fusion.measure,
            "depth": domain.depth,  # the candidates the fused rows rerank (the report's k)
            "bert_depth": domain.bert_depth,  # those of bert-model1 and bert-vanilla
            "fusion_queries": train_ids.len(),
            "test_queries": test_ids.len(),
            "seed": domain.fusion.ascent.seed,
            **{f"weights {name}": [round(w, 4) for w in m.weights] for name, m in models.items()},
            **{f"train {domain.fusion.measure} {name}": round(m.train_score, 4) for name, m in models.items()},
        }
    )
    return by_content(tag_unit(pl.concat([fused, bert_runs]), unit))


model1_assets = [model1_em, neural_model1, model1_export, bert_model1, bert_vanilla, model1_runs, fusion_runs]
model1_checks = [model1_rows_sum_to_one]
