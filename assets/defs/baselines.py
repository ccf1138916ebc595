"""Baselines assets: the classic neural rankers of the papers' tables, reranking the same candidates.

corpus, queries, qrels, query_splits, candidate_runs, negatives, word2vec -> neural_baselines (per training unit)

`neural_baselines` is partitioned by training unit (collection, fold, seed; see `assets.lib.partitions`)
as `cross_encoder`/`reranked_runs` are: each unit trains every model on its training queries'
`negatives`, chooses the epoch on its validation queries and reranks its test queries' candidates
(BM25's top 20 in the demo). Run names are the models' (`dagster_ir.methods.baselines.MODELS`:
drmm, knrm, conv-knrm, matchpyramid, pacrr, co-pacrr, duet, bert-firstp, bert-maxp, cedr-knrm).
With `interpolate` (default on) each model also gives a row `<model>+bm25`: its scores
interpolated with the candidates' (min-max per query), the weight chosen on the unit's validation
queries (`dagster_ir.fusion.interpolate`; beyond the papers).
The interaction models read the `word2vec` asset's vectors through GHRM's text preprocessing (the
settings the vectors were trained with). The demo trains the seven interaction models; the BERT
ones are configuration (`models: [..., bert-firstp, bert-maxp, cedr-knrm]`, see the README), per run
or per collection (the collection's `assets: {neural_baselines: ...}` in the YAML; `assets.lib.settings`).
`neural_baselines` trains the unit's models under torchrun (DDP over `torchrun.nproc_per_node`
processes, one per GPU of the host by default, and `torchrun.nnodes` nodes) when that is more than
one process, else in the step's own process (`dagster_ir.methods.baselines.job`).
"""

import json
import time
from dataclasses import asdict, replace
from functools import partial
from typing import TYPE_CHECKING

import dagster as dg
import polars as pl

if TYPE_CHECKING:
    from dagster_ir.methods.baselines import BaselineConfig

from assets.defs.automation import TRAINING_POOL
from assets.lib.metadata import KEPT_WEIGHTS, kept_weights_entry
from assets.lib.partitions import training_unit, unit_ins, unit_partitions
from assets.lib.plots import training_curve_metadata
from assets.lib.resources import DataDirResource
from assets.lib.settings import UNIT_SETTINGS, with_settings
from assets.lib.torchrun import TorchrunSettings, is_distributed, run_train_job
from dagster_ir.collections import offset_seeds, tag_unit, unit_queries
from dagster_ir.collections.lengths import collection_lengths
from dagster_ir.lazy import lazy_module
from dagster_ir.methods.baselines import BERT_MODELS, WORD_MODELS
from dagster_ir.methods.ghrm.text import TextConfig, tokens
from dagster_ir.methods.ghrm.word2vec import load_vectors
from dagster_ir.neural.curves import epoch_curve
from dagster_ir.neural.device import Placement, default_processes, resolve_placement
from dagster_ir.schemas import RUN
from dagster_ir.storage.parquet import frame_version

baselines_job = lazy_module("dagster_ir.methods.baselines.job")

GROUP = "baselines"
CODE_VERSION = "7"  # 7: every baseline (interaction models too) keeps its start if no epoch beats it
# 6: CEDR-KNRM starts from the cross-encoder's score; a BERT baseline keeps its start if no epoch beats it
# rows, strictly decreasing scores, query and document words read off the collection; 4: pairs from the candidates'
# top train_depth, the BERT passage models over the cosine head


class NeuralBaselinesConfig(dg.Config):
    """Maps onto `dagster_ir.methods.baselines.BaselineConfig`: a profile ("demo" | "paper") plus overrides.

    None keeps the profile's value, except `query_words`/`doc_words`: None reads them off the
    collection with `lengths: collection` (the default; the `length_percentile` of its query and
    document lengths in the models' words, `dagster_ir.collections.lengths`), or keeps the profile's
    with `lengths: profile`. `models` picks the baselines to train (run names).
    """

    profile: str = "demo"
    models: list[str] = list(WORD_MODELS)
    candidate_run: str = "bm25"
    query_words: int | None = None
    doc_words: int | None = None
    n_negatives: int | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    lrs: dict[str, float] | None = None  # interaction model -> its learning rate instead of `lr` (None: the profile's)
    bert_lr: float | None = None
    seed: int | None = None
    rerank_depth: int | None = None
    train_pairs: str | None = None  # "candidates" (default) | "negatives"
    train_depth: int | None = None  # None: rerank_depth
    selection_measure: str | None = None
    device: str = "auto"  # "auto": CUDA when available, else the CPU (dagster_ir.neural.device)
    threads: int | None = None
    bert_threads: int | None = None
    # the BERT models' bfloat16 autocast; None: where the device has it natively (the interaction models: float32)
    bf16: bool | None = None
    backbone: str | None = None
    rotate_folds: bool = False  # fixed protocol: rotate the k folds over every query as ghrm_runs does
    lengths: str = "collection"  # "collection" | "profile": where query_words/doc_words left None come from
    length_percentile: float = 90.0
    interpolate: bool = (
        True  # also the rows <model>+<candidate_run>: interpolated with the candidates, weight on validation
    )
    # Processes and nodes: nproc_per_node 0 = one per GPU of the host (one on a CPU); more than one
    # process (or node) trains the unit's models under torchrun (DDP), else in the step's own process.
    torchrun: TorchrunSettings = TorchrunSettings()

    def to_domain(self) -> "BaselineConfig":
        from dagster_ir.methods.baselines import BaselineConfig, profile  # torch: loaded when the step runs

        values = {
            k: v for k, v in self.model_dump().items() if k in BaselineConfig.__dataclass_fields__ and v is not None
        }
        placement = resolve_placement(self.device, self.bf16)
        return replace(profile(self.profile), **{**values, "device": placement.device, "bf16": placement.bf16})


def fit_lengths(
    config: NeuralBaselinesConfig, domain: "BaselineConfig", queries: pl.DataFrame, corpus: pl.LazyFrame, tokenize
) -> tuple["BaselineConfig", dict]:
    """`domain` with the query and document words read off the collection where the config left them None
    (`lengths: collection`); and metadata saying which lengths were used and where they came from."""
    if config.lengths not in ("collection", "profile"):
        raise ValueError(f"neural_baselines lengths: {config.lengths!r} is neither 'collection' nor 'profile'")
    source = {
        "query_words": "config" if config.query_words is not None else config.lengths,
        "doc_words": "config" if config.doc_words is not None else config.lengths,
    }
    if config.lengths == "collection" and "collection" in source.values():
        from dagster_ir.methods.baselines.protocol import corpus_texts  # torch: loaded when the step runs

        found = collection_lengths(queries["text"].to_list(), corpus_texts(corpus), tokenize, config.length_percentile)
        domain = replace(domain, **{k: getattr(found, k) for k, v in source.items() if v == "collection"})
    return domain, {
        "query_words": domain.query_words,
        "doc_words": domain.doc_words,
        "lengths from": dg.MetadataValue.json(source),
        "length percentile": config.length_percentile,
    }


@dg.asset(
    pool=TRAINING_POOL,
    group_name=GROUP,
    partitions_def=unit_partitions,
    code_version=CODE_VERSION,
    deps=[UNIT_SETTINGS],
    ins=unit_ins("corpus", "queries", "qrels", "query_splits", "candidate_runs", "negatives", "word2vec"),
)
def neural_baselines(
    context: dg.AssetExecutionContext,
    config: NeuralBaselinesConfig,
    data: DataDirResource,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    candidate_runs: pl.DataFrame,
    negatives: pl.DataFrame,
    word2vec: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """DRMM, KNRM, Conv-KNRM, MatchPyramid, PACRR, Co-PACRR, DUET (and the BERT baselines) reranking the unit's test queries."""
    from dagster_ir.methods.baselines.protocol import (  # torch: loaded when the step runs
        first_stage_interpolations,
        run_baselines,
        run_rotations,
    )
    from dagster_ir.methods.baselines.reranker import check_precision  # torch: loaded when the step runs
    from dagster_ir.neural.training import kept_record  # torch: loaded when the step runs

    unit = training_unit(context)
    config = with_settings(config, "neural_baselines", unit.collection, context)
    roles = unit_queries(query_splits, unit)
    domain = offset_seeds(config.to_domain(), unit.seed)
    if any(name in BERT_MODELS for name in config.models):
        for warning in check_precision(domain):
            context.log.warning(warning)
    run = candidate_runs.filter(pl.col("run_name") == config.candidate_run).select(list(RUN))
    if run.height == 0:
        raise ValueError(
            f"neural_baselines: no candidate run {config.candidate_run!r} "
            f"(have {candidate_runs['run_name'].unique().sort().to_list()})"
        )
    text = (
        TextConfig(bool(word2vec["remove_stopwords"][0]), bool(word2vec["lemmatize"][0]))
        if "lemmatize" in word2vec.columns
        else TextConfig()
    )
    started = time.monotonic()
    domain, lengths = fit_lengths(config, domain, queries, corpus, partial(tokens, config=text))

    def log(result) -> None:
        context.log.info(
            f"{result.name}: {result.result.steps} steps in {result.seconds:.1f} s, "
            f"kept epoch {result.chosen_epoch} (0: the start"
            + (f", {result.start_score:.4f}" if result.start_score is not None else "")
            + f"), validation {result.validation_best}"
        )

    def common() -> dict:  # the inputs of a training in this process (the vectors read only then)
        return dict(
            corpus=corpus,
            queries=queries.select("query_id", "text"),
            qrels=qrels,
            candidates=run,
            negatives=negatives,
            tokenize=partial(tokens, config=text),
            vectors=load_vectors(word2vec["path"][0]),
            on_model=log,
        )

    root = data.files("neural_baselines", unit.key, f"v{CODE_VERSION}")  # new code never resumes old checkpoints
    rotate = config.rotate_folds and unit.protocol == "fixed"
    processes = default_processes(domain.device)
    launched = {}
    if is_distributed(config.torchrun, processes):  # every process trains on its share of each global batch
        values, frames = baselines_job.job_inputs(
            config.models,
            domain,
            corpus=corpus,
            queries=queries,
            qrels=qrels,
            candidates=run,
            negatives=negatives,
            vectors=word2vec["path"][0],
            remove_stopwords=text.remove_stopwords,
            lemmatize=text.lemmatize,
            text_module="dagster_ir.methods.ghrm.text",
            vectors_module="dagster_ir.methods.ghrm.word2vec",
            checkpoint_root=root,
            query_splits=query_splits if rotate else None,
            roles=None if rotate else {"train": roles.train, "validation": roles.validation, "test": roles.test},
        )
        outcome, launched = run_train_job(
            context,
            config.torchrun,
            data.files("neural_baselines", "jobs") / unit.key.replace("/", "-"),
            baselines_job.TARGET,
            values=values,
            frames=frames,
            device=domain.device,
            default_nproc=processes,
        )
        rotated, results = baselines_job.read_results(outcome)
        for result in results:
            log(result)
        if rotate:
            output = rotated.with_columns(seed=pl.lit(unit.seed, dtype=pl.Int64))
        else:
            output = tag_unit(pl.concat([r.run for r in results]), unit)
    elif rotate:
        output, results = run_rotations(config.models, domain, query_splits, root, **common())
        output = output.with_columns(seed=pl.lit(unit.seed, dtype=pl.Int64))
    else:
        results = run_baselines(
            config.models,
            domain,
            train_queries=roles.train,
            validation_queries=roles.validation,
            test_queries=roles.test,
            checkpoint_root=root,
            **common(),
        )
        output = tag_unit(pl.concat([r.run for r in results]), unit)
    weights = {}
    if config.interpolate:
        mixed, weights = first_stage_interpolations(results, run, qrels, domain.selection_measure, config.candidate_run)
        if mixed:
            mixed = pl.concat(mixed, how="diagonal_relaxed").with_columns(seed=pl.lit(unit.seed, dtype=pl.Int64))
            if "fold" not in mixed.columns:
                mixed = tag_unit(mixed, unit)
            output = pl.concat([output, mixed.select(output.columns).cast(output.schema)])
    metadata = {
        **launched,
        **lengths,
        "vectors": word2vec["source"][0],
        "train_examples": results[0].examples,
        "train_queries": len(roles.train),
        "validation_queries": len(roles.validation),
        "test_queries": output["query_id"].n_unique(),
        "seconds": round(time.monotonic() - started, 1),
        "rotated_folds": bool(config.rotate_folds),
        **Placement(domain.device, domain.bf16).metadata(),
        "models": list(config.models),
        "config": dg.MetadataValue.json(json.loads(json.dumps(asdict(domain), default=str))),
    }
    curves = {
        f"{r.name}" if len(results) == len(config.models) else f"{r.name} ({i})": epoch_curve(
            r.result, r.start_score, r.kept_start
        )
        for i, r in enumerate(results)
    }
    folder = data.files("neural_baselines", unit.key)
    metadata.update(
        training_curve_metadata(
            folder, unit.key, curves, domain.selection_measure, "neural_baselines", shown=data.relative
        )
    )
    metadata["train_pairs"] = domain.train_pairs
    metadata["depth"] = domain.rerank_depth  # the candidates reranked (the report's k)
    metadata["train_depth"] = domain.train_depth or domain.rerank_depth
    for name in config.models:  # one value per rotation when rotated
        mine = [r for r in results if r.name == name]
        metadata[f"{name} validation {domain.selection_measure}"] = [
            r.validation_best for r in mine if r.validation_best is not None
        ]
        metadata[f"{name} kept epoch"] = [r.chosen_epoch for r in mine]  # 0: the untrained start
        metadata[f"{name} seconds"] = round(sum(r.seconds for r in mine), 1)
    metadata[KEPT_WEIGHTS] = kept_weights_entry(  # per model (and rotation): the start or an epoch
        [{**kept_record(r.name, r.result, r.start_score, r.kept_start), "unit": unit.key} for r in results]
    )
    for name, chosen in weights.items():  # the candidates' weight chosen on validation, per rotation
        metadata[f"{name} weight"] = chosen
    context.add_output_metadata(metadata)
    # by content: the version Dagster records of `collection_settings` never changes (see assets.lib.staleness)
    return dg.Output(output, data_version=dg.DataVersion(frame_version(output)))


@dg.asset_check(asset=neural_baselines, blocking=True, partitions_def=unit_partitions)
def neural_baselines_are_rerankings(neural_baselines: pl.DataFrame) -> dg.AssetCheckResult:
    """Finite scores, no (run, query, doc) twice, and every model over the same queries."""
    duplicates = neural_baselines.height - neural_baselines.unique(["run_name", "query_id", "doc_id"]).height
    non_finite = int((~neural_baselines["score"].is_finite()).sum())
    query_sets = {frozenset(part["query_id"].unique()) for part in neural_baselines.partition_by("run_name")}
    return dg.AssetCheckResult(
        passed=duplicates == 0 and non_finite == 0 and len(query_sets) <= 1,
        metadata={
            "duplicate_rows": duplicates,
            "non_finite_scores": non_finite,
            "distinct_query_sets": len(query_sets),
        },
    )


baselines_assets = [neural_baselines]
baselines_checks = [neural_baselines_are_rerankings]
