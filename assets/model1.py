"""Model 1 assets: EM tables per vocabulary, neural Model 1 and its export, BERT-Model1, fused runs.

model1_em [collection x vocabulary] --+
neural_model1 -> model1_export -------+--> model1_runs (feature runs) --> fusion_runs (Table 2 rows)
bert_model1 --------------------------+
"""

import hashlib
import json
import time
import warnings
from dataclasses import asdict, replace
from typing import Optional

import dagster as dg
import polars as pl

from assets.partitions import collection_partitions
from assets.plots import bar_chart_markdown
from assets.resources import DataDirResource
from dagster_ir.fusion import FusionConfig
from dagster_ir.methods.model1 import runs as runs_profiles
from dagster_ir.methods.model1 import bert
from dagster_ir.methods.model1 import neural as nn
from dagster_ir.methods.model1 import (
    BERT_RUN,
    FEATURE_RUNS,
    KINDS,
    WORDPIECES,
    WORDS,
    Model1Config,
    Model1Scorer,
    ScoringConfig,
    TranslationTable,
    collection_stats,
    collection_vocabulary,
    document_text,
    Model1RunsConfig,
    bm25_norms,
    bm25_rerank,
    candidates,
    explanation_markdown,
    fuse_with_bm25,
    index_collection,
    normalised_bm25,
    row_sums,
    train_model1,
    wordpiece_vocabulary,
    write_giza,
)
from dagster_ir.methods.model1 import PROFILES as MODEL1_PROFILES
from dagster_ir.schemas import NEGATIVES
from dagster_ir.storage.atomic import write_text_atomic
from dagster_ir.storage.locks import remove_unlocked_siblings
from dagster_ir.storage.parquet import frame_version

GROUP = "model1"
vocabulary_partitions = dg.StaticPartitionsDefinition(list(KINDS))
model1_partitions = dg.MultiPartitionsDefinition({"collection": collection_partitions,
                                                  "vocabulary": vocabulary_partitions})
with warnings.catch_warnings():  # the mapping is marked beta; it is the documented way to fan in a dimension
    warnings.simplefilter("ignore", dg.BetaWarning)
    _BY_COLLECTION = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="collection")


def _profile(profiles: dict, name: str):
    if name not in profiles:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(profiles)}")
    return profiles[name]


def _given(**values) -> dict:
    return {k: v for k, v in values.items() if v is not None}


def _split_ids(query_splits: pl.DataFrame, split: str) -> pl.Series:
    ids = query_splits.filter(pl.col("split") == split)["query_id"]
    if ids.len() == 0:
        raise ValueError(f"no queries in split {split!r} (have {query_splits['split'].unique().sort().to_list()})")
    return ids


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
    iterations: Optional[int] = None
    chunk_ratio: Optional[float] = None
    min_chunk: Optional[int] = None
    min_prob: Optional[float] = None
    max_translations: Optional[int] = None
    self_prob: Optional[float] = None
    no_self_translation: bool = False
    null_word: Optional[bool] = None  # EM aligns to an empty source word too (the paper profile's default)

    def to_domain(self, vocabulary: str) -> Model1Config:
        base = _profile(MODEL1_PROFILES, self.profile)
        prune = replace(base.prune, **_given(min_prob=self.min_prob, max_translations=self.max_translations,
                                             self_prob=self.self_prob))
        if self.no_self_translation:
            prune = replace(prune, self_prob=None)
        return replace(base, vocabulary=vocabulary, prune=prune,
                       em=replace(base.em, **_given(iterations=self.iterations, null_word=self.null_word)),
                       bitext=replace(base.bitext, **_given(chunk_ratio=self.chunk_ratio, min_chunk=self.min_chunk)))


@dg.asset(
    group_name=GROUP,
    partitions_def=model1_partitions,
    code_version="1",
    ins={name: dg.AssetIn(partition_mapping=_BY_COLLECTION) for name in ("corpus", "queries", "qrels", "query_splits")},
)
def model1_em(
    context: dg.AssetExecutionContext,
    config: Model1EmConfig,
    data: DataDirResource,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
) -> pl.DataFrame:
    """IBM Model 1 table T(q|d) (src_token, tgt_token, prob) learned by EM on train/model queries, pruned."""
    keys = context.partition_key.keys_by_dimension
    collection, kind = keys["collection"], keys["vocabulary"]
    domain = config.to_domain(kind)
    vocabulary = collection_vocabulary(kind, corpus, queries, backbone=domain.backbone)
    train_ids = _split_ids(query_splits, domain.train_split)
    trained = train_model1(queries.select("query_id", "text"), qrels, corpus, train_ids, vocabulary, domain)
    folder = data.files("model1", collection, kind)
    giza = write_giza(trained.table, folder / "model1.t1.txt")
    vocabulary.save(folder / "vocabulary")
    history = trained.history
    context.add_output_metadata({
        "entries": trained.table.nnz, "entries_before_pruning": trained.raw_entries,
        "query_doc_pairs": trained.n_query_doc_pairs, "bitext_pairs": trained.n_bitext_pairs,
        "vocabulary_size": len(vocabulary), "seconds": round(trained.seconds, 2),
        "em_pairs_per_s": [round(h.pairs_per_second) for h in history],
        "em_alignments_per_s": [round(h.alignments_per_second) for h in history],
        "log_likelihood": bar_chart_markdown([h.iteration for h in history],
                                             [round(h.log_likelihood, 4) for h in history],
                                             "EM iteration", "mean log-likelihood per target token"),
        "config": dg.MetadataValue.json(json.loads(json.dumps(asdict(domain)))),
        "giza": dg.MetadataValue.path(str(giza)),
    })
    return trained.table.to_frame()


def _rows_sum_to_one(model1_em: pl.DataFrame) -> dg.AssetCheckResult:
    """Every source token's translation probabilities sum to 1 (after pruning and self-translation)."""
    sums = row_sums(model1_em)
    deviation = (sums["total"] - 1.0).abs()
    off = int((deviation > 1e-4).sum())
    return dg.AssetCheckResult(passed=off == 0 and sums.height > 0, metadata={
        "source_tokens": sums.height, "rows_not_summing_to_1": off,
        "max_deviation": float(deviation.max() or 0.0)})


with warnings.catch_warnings():  # partitioned checks are marked preview; each partition is its own table
    warnings.simplefilter("ignore", dg.PreviewWarning)
    model1_rows_sum_to_one = dg.asset_check(asset=model1_em, blocking=True, partitions_def=model1_partitions,
                                            name="model1_rows_sum_to_one")(_rows_sum_to_one)


# --- neural Model 1 and BERT-Model1 ---------------------------------------------------------


class _TrainingOverrides(dg.Config):
    backbone: Optional[str] = None  # a Hugging Face name or folder; None: the profile's
    epochs: Optional[int] = None
    lr: Optional[float] = None
    batch_size: Optional[int] = None
    max_steps: Optional[int] = None
    seed: Optional[int] = None
    device: str = "cpu"

    def train_config(self, base):
        return replace(base, device=self.device, **_given(epochs=self.epochs, lr=self.lr, batch_size=self.batch_size,
                                                          max_steps=self.max_steps, seed=self.seed))


class NeuralModel1AssetConfig(_TrainingOverrides):
    """Maps onto `dagster_ir.methods.model1.neural.NeuralModel1Config` (profile + overrides)."""

    profile: str = "demo"
    max_doc_length: Optional[int] = None

    def to_domain(self) -> nn.NeuralModel1Config:
        base = _profile(nn.PROFILES, self.profile)
        return replace(base, train=self.train_config(base.train),
                       **_given(max_doc_length=self.max_doc_length, backbone=self.backbone))


class BertModel1AssetConfig(_TrainingOverrides):
    """Maps onto `dagster_ir.methods.model1.bert.BertModel1Config` (profile + overrides)."""

    profile: str = "demo"
    chunk_length: Optional[int] = None
    max_chunks: Optional[int] = None

    def to_domain(self) -> bert.BertModel1Config:
        base = _profile(bert.PROFILES, self.profile)
        return replace(base, train=self.train_config(base.train),
                       **_given(chunk_length=self.chunk_length, max_chunks=self.max_chunks, backbone=self.backbone))


def _training_dir(data: DataDirResource, name: str, collection: str, fingerprint: str):
    """A checkpoint folder per (settings, data): resumed when both match, old ones removed (unless in use)."""
    folder = data.files(name, collection, "training") / fingerprint
    remove_unlocked_siblings(folder)
    return folder


def _fingerprint(config, *frames: pl.DataFrame) -> str:
    digest = hashlib.blake2b(json.dumps(asdict(config), sort_keys=True, default=str).encode(), digest_size=8)
    for frame in frames:
        digest.update(frame_version(frame).encode())
    return digest.hexdigest()


def _train_ranker(context, data, name, model, config, corpus, queries, qrels, query_splits, negatives, candidate_runs):
    """Train `model` (neural or BERT Model 1) and save it; returns the manifest frame."""
    collection = context.partition_key
    vocabulary = wordpiece_vocabulary(config.backbone)
    dev_run = candidates(candidate_runs, "bm25", _split_ids(query_splits, "dev"), config.dev_depth)
    docs = pl.concat([negatives["pos_doc_id"], negatives["neg_doc_id"], dev_run["doc_id"]]).unique()
    texts = nn.NeuralTexts(nn.TokenizedTexts.of_queries(queries, vocabulary),
                           nn.TokenizedTexts.of_documents(corpus, docs, vocabulary))
    sorted_negatives = negatives.select(list(NEGATIVES)).sort(list(NEGATIVES))
    fingerprint = _fingerprint(config, sorted_negatives, dev_run.sort("query_id", "doc_id"))
    result = nn.train_ranker(model, texts, negatives.select(list(NEGATIVES)),
                             _training_dir(data, name, collection, fingerprint), dev_run=dev_run, qrels=qrels)
    folder = model.save(data.files(name, collection) / "model")
    context.add_output_metadata({
        "steps": result.steps, "best_epoch": result.best_epoch, "seconds": round(result.seconds, 2),
        "examples_per_s": round(result.examples_per_s, 2), "seed": config.train.seed,
        "dev_nDCG@10": [round(s, 4) for s in result.dev_scores],
        "loss": _curve(result.loss_curve, "margin loss"), "model": dg.MetadataValue.path(str(folder)),
        "config": dg.MetadataValue.json(json.loads(json.dumps(asdict(config), default=str))),
    })
    best = result.dev_scores[result.best_epoch] if result.dev_scores else float("nan")
    return pl.DataFrame({"path": [str(folder)], "backbone": [config.backbone], "steps": [result.steps],
                         "best_epoch": [result.best_epoch], "dev_ndcg10": [best], "seed": [config.train.seed],
                         "seconds": [result.seconds]})


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="1")
def neural_model1(
    context: dg.AssetExecutionContext,
    config: NeuralModel1AssetConfig,
    data: DataDirResource,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    negatives: pl.DataFrame,
    candidate_runs: pl.DataFrame,
) -> pl.DataFrame:
    """Context-free neural Model 1 over word pieces, trained with a margin loss on BM25 negatives (manifest)."""
    domain = config.to_domain()
    stats = collection_stats(corpus, wordpiece_vocabulary(domain.backbone))
    model, _ = nn.build_model(stats, domain)
    return _train_ranker(context, data, "neural_model1", model, domain, corpus, queries.select("query_id", "text"),
                         qrels, query_splits, negatives, candidate_runs)


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="1")
def bert_model1(
    context: dg.AssetExecutionContext,
    config: BertModel1AssetConfig,
    data: DataDirResource,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    negatives: pl.DataFrame,
    candidate_runs: pl.DataFrame,
) -> pl.DataFrame:
    """BERT-Model1: the Model 1 layer over BERT token vectors, documents in chunks, trained end to end (manifest)."""
    domain = config.to_domain()
    stats = collection_stats(corpus, wordpiece_vocabulary(domain.backbone))
    model = bert.BertModel1.from_backbone(stats, domain)
    return _train_ranker(context, data, "bert_model1", model, domain, corpus, queries.select("query_id", "text"),
                         qrels, query_splits, negatives, candidate_runs)


class Model1ExportConfig(dg.Config):
    """Export settings; None keeps the trained model's (`export_threshold`, `export_targets`)."""

    threshold: Optional[float] = None
    targets: Optional[str] = None  # "collection" | "queries"


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="1")
def model1_export(
    context: dg.AssetExecutionContext,
    config: Model1ExportConfig,
    data: DataDirResource,
    neural_model1: pl.DataFrame,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
) -> pl.DataFrame:
    """The neural Model 1 sparsified: T(q|d) over vocabulary pairs, kept where T >= threshold (NN-Model1-exp)."""
    model = nn.NeuralModel1.load(neural_model1["path"][0])
    settings = replace(model.config, **_given(export_threshold=config.threshold, export_targets=config.targets))
    vocabulary = wordpiece_vocabulary(settings.backbone)
    stats = collection_stats(corpus, vocabulary)
    sources, targets = nn.export_vocabulary(settings, stats, queries, vocabulary)
    started = time.perf_counter()
    table = nn.export_table(model, vocabulary, sources, targets, threshold=settings.export_threshold)
    seconds = time.perf_counter() - started
    giza = write_giza(table, data.files("model1_export", context.partition_key) / "nn-model1.t1.txt")
    pairs = sources.size * targets.size
    context.add_output_metadata({
        "entries": table.nnz, "pairs_evaluated": pairs, "kept_fraction": round(table.nnz / max(pairs, 1), 6),
        "threshold": settings.export_threshold, "targets": settings.export_targets, "seconds": round(seconds, 2),
        "pairs_per_s": round(pairs / max(seconds, 1e-9)), "giza": dg.MetadataValue.path(str(giza)),
    })
    return table.to_frame()


# --- runs -----------------------------------------------------------------------------------


class Model1RunsAssetConfig(dg.Config):
    """Maps onto `dagster_ir.fusion.Model1RunsConfig` (profile + overrides) and the EM profile's scoring."""

    profile: str = "demo"
    depth: Optional[int] = None
    bert_depth: Optional[int] = None
    report_split: Optional[str] = None
    measure: Optional[str] = None
    restarts: Optional[int] = None
    seed: Optional[int] = None
    lam: Optional[float] = None
    explained_examples: int = 3

    def scoring(self) -> ScoringConfig:
        """The Model 1 scorer settings of the EM profile of the same name (lambda overridable)."""
        base = _profile(MODEL1_PROFILES, self.profile).scoring
        return replace(base, **_given(lam=self.lam))

    def to_domain(self) -> Model1RunsConfig:
        base = _profile(runs_profiles.PROFILES, self.profile)
        ascent = replace(base.fusion.ascent, **_given(restarts=self.restarts, seed=self.seed))
        fusion = FusionConfig(measure=self.measure or base.fusion.measure, ascent=ascent)
        return replace(base, fusion=fusion, **_given(depth=self.depth, bert_depth=self.bert_depth,
                                                     report_split=self.report_split))


def _tables(model1_em: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The EM table of each vocabulary from the frame of both multi-partitions."""
    by_kind = {}
    for kind in KINDS:
        part = model1_em.filter(pl.col("partition").str.split("|").list.contains(kind))
        if part.height == 0:
            raise ValueError(f"model1_em has no {kind} table for this collection")
        by_kind[kind] = part.drop("partition")
    return by_kind


@dg.asset(
    group_name=GROUP,
    partitions_def=collection_partitions,
    code_version="1",
    ins={"model1_em": dg.AssetIn(partition_mapping=_BY_COLLECTION)},
)
def model1_runs(
    context: dg.AssetExecutionContext,
    config: Model1RunsAssetConfig,
    data: DataDirResource,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    query_splits: pl.DataFrame,
    candidate_runs: pl.DataFrame,
    model1_em: pl.DataFrame,
    model1_export: pl.DataFrame,
    neural_model1: pl.DataFrame,
    bert_model1: pl.DataFrame,
) -> pl.DataFrame:
    """BM25 reranked by BM25(wp), Model1 (words, wp), NN-Model1(-exp) (fusion + report queries), BERT-Model1 (report)."""
    domain = config.to_domain()
    queries = queries.select("query_id", "text")
    report_ids = _split_ids(query_splits, domain.report_split)
    query_ids = pl.concat([_split_ids(query_splits, domain.fusion_split), report_ids])
    run = candidates(candidate_runs, domain.base_run, query_ids, domain.depth)
    tables, scoring = _tables(model1_em), config.scoring()
    outputs, seconds, scorers, stats = [], {}, {}, {}
    for kind, name in ((WORDS, "model1(words)"), (WORDPIECES, "model1(wp)")):
        vocabulary = collection_vocabulary(kind, corpus, queries)
        index, stats[kind] = index_collection(corpus, vocabulary, keep=run["doc_id"].unique())
        scorers[kind] = Model1Scorer(TranslationTable.from_frame(tables[kind], vocabulary), index, stats[kind], scoring)
        outputs.append(_timed(seconds, name, scorers[kind].rerank, run, queries, name))
    wp, wp_stats = scorers[WORDPIECES], stats[WORDPIECES]
    bm25_wp = bm25_rerank(run, queries, wp.vocabulary, wp.index, wp_stats, "bm25(wp)")
    outputs.append(normalised_bm25(bm25_wp, bm25_norms(queries, wp.vocabulary, wp_stats)))
    exported = Model1Scorer(TranslationTable.from_frame(model1_export, wp.vocabulary), wp.index, wp_stats, scoring)
    outputs.append(_timed(seconds, "nn-model1-exp", exported.rerank, run, queries, "nn-model1-exp"))
    bert_run = run.filter((pl.col("rank") <= domain.bert_depth) & pl.col("query_id").is_in(report_ids.implode()))
    for name, model, candidates_run in (("nn-model1", nn.NeuralModel1.load(neural_model1["path"][0]), run),
                                        (BERT_RUN, bert.BertModel1.load(bert_model1["path"][0]), bert_run)):
        texts = _texts(model.config.backbone, queries, corpus, candidates_run)
        batch = model.config.rerank_batch_size
        outputs.append(_timed(seconds, name, nn.rerank, model, texts, candidates_run, name, batch))
    explained = _explanations(wp, run, queries, corpus, config.explained_examples)
    write_text_atomic(data.files("model1_runs", context.partition_key) / EXPLANATIONS_FILE, explained)
    sizes = {name: (bert_run if name == BERT_RUN else run).height for name in seconds}
    context.add_output_metadata({
        **{f"{name} ms per 1K docs": round(1e6 * s / max(sizes[name], 1), 2) for name, s in seconds.items()},
        "queries": run["query_id"].n_unique(), "depth": domain.depth, "bert_depth": domain.bert_depth,
        "explanations": dg.MetadataValue.md(f"### {EXPLANATIONS_TITLE}\n\n{explained}"),
    })
    return pl.concat(outputs)


def _timed(seconds: dict, name: str, function, *args):
    """Call `function(*args)`, recording its wall time under `name`."""
    started = time.perf_counter()
    result = function(*args)
    seconds[name] = time.perf_counter() - started
    return result


def _texts(backbone: str, queries: pl.DataFrame, corpus: pl.LazyFrame, run: pl.DataFrame) -> nn.NeuralTexts:
    vocabulary = wordpiece_vocabulary(backbone)
    return nn.NeuralTexts(nn.TokenizedTexts.of_queries(queries, vocabulary),
                          nn.TokenizedTexts.of_documents(corpus, run["doc_id"].unique(), vocabulary))


EXPLANATIONS_FILE = "explanations.md"
EXPLANATIONS_TITLE = "Model 1 (word pieces): what each query token contributes (BM25's top document)"


def _explanations(scorer: Model1Scorer, run: pl.DataFrame, queries: pl.DataFrame, corpus: pl.LazyFrame, n: int) -> str:
    """Markdown: for the first `n` queries, Model 1 (word pieces) explained on the BM25 top document."""
    top = run.filter(pl.col("rank") == 1).sort("query_id").head(n)
    docs = (corpus.filter(pl.col("doc_id").is_in(top["doc_id"].implode()))
            .select("doc_id", text=document_text()).collect())
    pairs = top.join(queries, on="query_id").join(docs.rename({"text": "doc_text"}), on="doc_id")
    blocks = [explanation_markdown(r["text"], r["doc_text"], scorer.explain(r["text"], r["doc_text"]))
              for r in pairs.iter_rows(named=True)]
    return "\n\n".join(blocks)


class FusionRunsConfig(dg.Config):
    """Which measure the fusion weights maximise, and coordinate-ascent settings (profile + overrides)."""

    profile: str = "demo"
    measure: Optional[str] = None
    restarts: Optional[int] = None
    seed: Optional[int] = None
    report_split: Optional[str] = None

    def to_domain(self) -> Model1RunsConfig:
        base = _profile(runs_profiles.PROFILES, self.profile)
        ascent = replace(base.fusion.ascent, **_given(restarts=self.restarts, seed=self.seed))
        fusion = FusionConfig(measure=self.measure or base.fusion.measure, ascent=ascent)
        return replace(base, fusion=fusion, **_given(report_split=self.report_split))


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="1")
def fusion_runs(
    context: dg.AssetExecutionContext,
    config: FusionRunsConfig,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    candidate_runs: pl.DataFrame,
    model1_runs: pl.DataFrame,
) -> pl.DataFrame:
    """Table 2 rows on the report queries: bm25+bm25(wp), bm25+model1(words|wp), bm25+nn-model1(-exp), bert-model1."""
    domain = config.to_domain()
    train_ids = _split_ids(query_splits, domain.fusion_split)
    report_ids = _split_ids(query_splits, domain.report_split)
    queries = queries.select("query_id", "text")
    words = collection_vocabulary(WORDS, corpus, queries)
    bm25 = candidates(candidate_runs, domain.base_run, pl.concat([train_ids, report_ids]), domain.depth)
    bm25 = normalised_bm25(bm25, bm25_norms(queries, words, collection_stats(corpus, words)))
    features = {name: model1_runs.filter(pl.col("run_name") == name) for name in FEATURE_RUNS}
    fused, models = fuse_with_bm25(bm25, features, qrels, train_ids, report_ids, domain.fusion)
    bert_run = model1_runs.filter((pl.col("run_name") == BERT_RUN) & pl.col("query_id").is_in(report_ids.implode()))
    context.add_output_metadata({
        "measure": domain.fusion.measure, "train_queries": train_ids.len(), "report_queries": report_ids.len(),
        "seed": domain.fusion.ascent.seed,
        **{f"weights {name}": [round(w, 4) for w in m.weights] for name, m in models.items()},
        **{f"train {domain.fusion.measure} {name}": round(m.train_score, 4) for name, m in models.items()},
    })
    return pl.concat([fused, bert_run])


model1_assets = [model1_em, neural_model1, model1_export, bert_model1, model1_runs, fusion_runs]
model1_checks = [model1_rows_sum_to_one]
