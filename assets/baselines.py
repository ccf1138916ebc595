"""Baselines assets: the classic neural rankers of the papers' tables, reranking the same candidates.

corpus, queries, qrels, query_splits, candidate_runs, negatives, word2vec -> neural_baselines (per training unit)

`neural_baselines` is partitioned by training unit (collection, fold, seed; see `assets.partitions`)
as `cross_encoder`/`reranked_runs` are: each unit trains every model on its training queries'
`negatives`, chooses the epoch on its validation queries and reranks its test queries' candidates
(BM25's top 20 in the demo). Run names are the models' (`dagster_ir.methods.baselines.MODELS`:
drmm, knrm, conv-knrm, matchpyramid, pacrr, co-pacrr, duet, bert-firstp, bert-maxp, cedr-knrm).
The interaction models read the `word2vec` asset's vectors through GHRM's text preprocessing (the
settings the vectors were trained with). The demo trains the seven interaction models; the BERT
ones are configuration (`models: [..., bert-firstp, bert-maxp, cedr-knrm]`, see the README), per run
or per collection (the collection's `assets: {neural_baselines: ...}` in the YAML; `assets.settings`).
"""

import json
import time
from dataclasses import asdict, replace
from functools import partial
from typing import Optional

import dagster as dg
import polars as pl

from assets.partitions import training_unit, unit_ins, unit_partitions
from assets.plots import training_curve_metadata
from assets.resources import DataDirResource
from assets.settings import UNIT_SETTINGS, with_settings
from dagster_ir.collections import offset_seeds, tag_unit, unit_queries
from dagster_ir.methods.baselines import BERT_MODELS, WORD_MODELS, BaselineConfig, profile
from dagster_ir.methods.baselines.protocol import run_baselines, run_rotations
from dagster_ir.methods.baselines.reranker import check_precision
from dagster_ir.methods.ghrm.text import TextConfig, tokens
from dagster_ir.methods.ghrm.word2vec import load_vectors
from dagster_ir.neural.curves import epoch_curve
from dagster_ir.schemas import RUN

GROUP = "baselines"
CODE_VERSION = "3"  # 2: the BERT baselines under bfloat16 autocast on every core (demo profile); 3: pairs from the
# candidates' top train_depth, the BERT passage models over the cosine head


class NeuralBaselinesConfig(dg.Config):
    """Maps onto `dagster_ir.methods.baselines.BaselineConfig`: a profile ("demo" | "paper") plus overrides.

    None keeps the profile's value. `models` picks the baselines to train (run names).
    """

    profile: str = "demo"
    models: list[str] = list(WORD_MODELS)
    candidate_run: str = "bm25"
    query_words: Optional[int] = None
    doc_words: Optional[int] = None
    n_negatives: Optional[int] = None
    epochs: Optional[int] = None
    steps_per_epoch: Optional[int] = None
    batch_size: Optional[int] = None
    lr: Optional[float] = None
    bert_lr: Optional[float] = None
    seed: Optional[int] = None
    rerank_depth: Optional[int] = None
    train_pairs: Optional[str] = None  # "candidates" (default) | "negatives"
    train_depth: Optional[int] = None  # None: rerank_depth
    selection_measure: Optional[str] = None
    device: Optional[str] = None
    threads: Optional[int] = None
    bert_threads: Optional[int] = None
    bf16: Optional[bool] = None
    backbone: Optional[str] = None
    rotate_folds: bool = False  # fixed protocol: rotate the k folds over every query as ghrm_runs does

    def to_domain(self) -> BaselineConfig:
        values = {k: v for k, v in self.model_dump().items()
                  if k in BaselineConfig.__dataclass_fields__ and v is not None}
        return replace(profile(self.profile), **values)


@dg.asset(group_name=GROUP, partitions_def=unit_partitions, code_version=CODE_VERSION, deps=[UNIT_SETTINGS],
          ins=unit_ins("corpus", "queries", "qrels", "query_splits", "candidate_runs", "negatives", "word2vec"))
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
) -> pl.DataFrame:
    """DRMM, KNRM, Conv-KNRM, MatchPyramid, PACRR, Co-PACRR, DUET (and the BERT baselines) reranking the unit's test queries."""
    unit = training_unit(context)
    config = with_settings(config, "neural_baselines", unit.collection)
    roles = unit_queries(query_splits, unit)
    domain = offset_seeds(config.to_domain(), unit.seed)
    if any(name in BERT_MODELS for name in config.models):
        for warning in check_precision(domain):
            context.log.warning(warning)
    run = candidate_runs.filter(pl.col("run_name") == config.candidate_run).select(list(RUN))
    if run.height == 0:
        raise ValueError(f"neural_baselines: no candidate run {config.candidate_run!r} "
                         f"(have {candidate_runs['run_name'].unique().sort().to_list()})")
    text = TextConfig(bool(word2vec["remove_stopwords"][0]), bool(word2vec["lemmatize"][0])) \
        if "lemmatize" in word2vec.columns else TextConfig()
    started = time.monotonic()

    def log(result) -> None:
        context.log.info(f"{result.name}: {result.result.steps} steps in {result.seconds:.1f} s, "
                         f"best epoch {result.result.best_epoch}, validation {result.validation_best}")

    common = dict(corpus=corpus, queries=queries.select("query_id", "text"), qrels=qrels, candidates=run,
                  negatives=negatives, tokenize=partial(tokens, config=text), vectors=load_vectors(word2vec["path"][0]),
                  on_model=log)
    root = data.files("neural_baselines", unit.key, f"v{CODE_VERSION}")  # new code never resumes old checkpoints
    if config.rotate_folds and unit.protocol == "fixed":
        output, results = run_rotations(config.models, domain, query_splits, root, **common)
        output = output.with_columns(seed=pl.lit(unit.seed, dtype=pl.Int64))
    else:
        results = run_baselines(config.models, domain, train_queries=roles.train, validation_queries=roles.validation,
                                test_queries=roles.test, checkpoint_root=root, **common)
        output = tag_unit(pl.concat([r.run for r in results]), unit)
    metadata = {"train_examples": results[0].examples, "train_queries": len(roles.train),
                "validation_queries": len(roles.validation), "test_queries": output["query_id"].n_unique(),
                "seconds": round(time.monotonic() - started, 1), "rotated_folds": bool(config.rotate_folds),
                "models": list(config.models),
                "config": dg.MetadataValue.json(json.loads(json.dumps(asdict(domain), default=str)))}
    curves = {f"{r.name}" if len(results) == len(config.models) else f"{r.name} ({i})": epoch_curve(r.result)
              for i, r in enumerate(results)}
    folder = data.files("neural_baselines", unit.key)
    metadata.update(training_curve_metadata(folder, unit.key, curves, domain.selection_measure, "neural_baselines"))
    metadata["train_pairs"] = domain.train_pairs
    metadata["train_depth"] = domain.train_depth or domain.rerank_depth
    for name in config.models:  # one value per rotation when rotated
        mine = [r for r in results if r.name == name]
        metadata[f"{name} validation {domain.selection_measure}"] = [r.validation_best for r in mine if r.validation_best is not None]
        metadata[f"{name} best epoch"] = [r.result.best_epoch for r in mine]
        metadata[f"{name} seconds"] = round(sum(r.seconds for r in mine), 1)
    context.add_output_metadata(metadata)
    return output


@dg.asset_check(asset=neural_baselines, blocking=True, partitions_def=unit_partitions)
def neural_baselines_are_rerankings(neural_baselines: pl.DataFrame) -> dg.AssetCheckResult:
    """Finite scores, no (run, query, doc) twice, and every model over the same queries."""
    duplicates = neural_baselines.height - neural_baselines.unique(["run_name", "query_id", "doc_id"]).height
    non_finite = int((~neural_baselines["score"].is_finite()).sum())
    query_sets = {frozenset(part["query_id"].unique()) for part in neural_baselines.partition_by("run_name")}
    return dg.AssetCheckResult(
        passed=duplicates == 0 and non_finite == 0 and len(query_sets) <= 1,
        metadata={"duplicate_rows": duplicates, "non_finite_scores": non_finite, "distinct_query_sets": len(query_sets)},
    )


baselines_assets = [neural_baselines]
baselines_checks = [neural_baselines_are_rerankings]
