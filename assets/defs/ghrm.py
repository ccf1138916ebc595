"""GHRM assets: word2vec vectors per collection, GHRM's reranked runs under the fold protocol, and
the paper's hyperparameter sweeps (Figures 3-5) chosen on validation folds.

corpus -> word2vec (vectors of the preprocessed text's words: MiniLM's input embeddings by default,
          or CBOW trained here, or a file; word2vec binary file + manifest, `source` says which)
corpus, queries, qrels, query_splits, candidate_runs, word2vec -> ghrm_runs, ghrm_sweeps

`ghrm_runs` returns one run per variant (run_name "ghrm", "ghrm-nopool", "ghrm-soft"; with
`interpolate`, also "<variant>+bm25": interpolated with BM25's scores under a weight chosen on each
rotation's validation fold, beyond the paper) and seed over
every query: each query is reranked by the model of the rotation whose test fold holds it (column
`fold`; select `list(dagster_ir.schemas.RUN)` before concatenating with other runs). The seeds are
the collection's `seeds` (offsets, as for the unit-partitioned methods; column `seed`). The report's
split then picks its queries. Checkpoints (safetensors) lie under `files/ghrm/<collection>/
<checkpoint version + settings hash>/<variant>/fold-<i>/` (the settings after the seed offset, so
one root per seed); a re-materialization with the same settings and vectors resumes or reuses them.

`ghrm_sweeps` is partitioned by training unit (collection, fold, seed; see `assets.lib.partitions`):
each unit sweeps the grid on its training queries and scores its validation queries only; the
methods report merges the units into the sweeps' figure of its GHRM section.
"""

import base64
import io
import json
import os
import time
from dataclasses import asdict, replace
from functools import partial
from typing import TYPE_CHECKING

import dagster as dg
import numpy as np
import polars as pl

from assets.defs.automation import TRAINING_POOL
from assets.lib.metadata import KEPT_WEIGHTS, by_content, kept_weights_entry
from assets.lib.partitions import collection_partitions, training_unit, unit_ins, unit_partitions
from assets.lib.project import collection_specs
from assets.lib.resources import DataDirResource
from assets.lib.settings import UNIT_SETTINGS, with_settings
from dagster_ir.collections import offset_seeds, tag_unit, unit_queries
from dagster_ir.collections.lengths import collection_lengths
from dagster_ir.evaluation import figure_to_png_bytes
from dagster_ir.methods.ghrm.config import VARIANTS, GHRMConfig, profile
from dagster_ir.methods.ghrm.text import TextConfig, tokens
from dagster_ir.methods.ghrm.word2vec import PROFILES as WORD2VEC_PROFILES
from dagster_ir.methods.ghrm.word2vec import (
    Word2VecConfig,
    collection_words,
    load_vectors,
    save_vectors,
    train_word2vec,
)
from dagster_ir.neural.word_vectors import embedding_vectors
from dagster_ir.schemas import RUN
from dagster_ir.storage.parquet import content_version, frame_version

if TYPE_CHECKING:
    from dagster_ir.methods.ghrm.sweeps import SweepConfig

GROUP = "ghrm"
CODE_VERSION = "4"  # 4: <variant>+<candidates> rows, strictly decreasing scores, words read off the collection
CHECKPOINTS = "v2"  # names the checkpoint roots: bump when training changes, so old checkpoints are not resumed


def _given(**values) -> dict:
    return {k: v for k, v in values.items() if v is not None}


VECTOR_SOURCES = ("minilm", "trained", "file")


class Word2VecAssetConfig(dg.Config):
    """Where the word vectors come from (`source`), and for "trained" the settings of
    `dagster_ir.methods.ghrm.word2vec.Word2VecConfig` (profile + overrides).

    "minilm" (default): the bundled MiniLM's input embeddings, each word's word pieces mean-pooled
    (`dagster_ir.neural.word_vectors`; `backbone` names another model), for the collection's words
    seen `min_count`+ times; "trained": CBOW word2vec trained on the collection; "file": `path`, a
    word2vec binary or text file or a GloVe text file (a `path` alone implies "file").
    """

    source: str = "minilm"
    backbone: str = ""  # "minilm" source: "" = the bundled all-MiniLM-L6-v2
    profile: str = "demo"
    dim: int | None = None
    window: int | None = None
    min_count: int | None = None
    epochs: int | None = None
    seed: int | None = None
    remove_stopwords: bool | None = None  # the text settings; GHRM's must match them
    lemmatize: bool | None = None
    path: str = ""  # a word2vec file (binary, or text ending .txt/.vec) to use instead of training

    def to_domain(self) -> Word2VecConfig:
        if self.profile not in WORD2VEC_PROFILES:
            raise ValueError(f"unknown word2vec profile {self.profile!r} (have {sorted(WORD2VEC_PROFILES)})")
        base = WORD2VEC_PROFILES[self.profile]
        text = replace(base.text, **_given(remove_stopwords=self.remove_stopwords, lemmatize=self.lemmatize))
        return replace(
            base,
            text=text,
            **_given(dim=self.dim, window=self.window, min_count=self.min_count, epochs=self.epochs, seed=self.seed),
        )


@dg.asset(
    pool=TRAINING_POOL,
    group_name=GROUP,
    deps=["collection_settings"],
    partitions_def=collection_partitions,
    code_version=CODE_VERSION,
)
def word2vec(
    context: dg.AssetExecutionContext, config: Word2VecAssetConfig, data: DataDirResource, corpus: pl.LazyFrame
) -> dg.Output[pl.DataFrame]:
    """Word vectors for GHRM and the interaction baselines: MiniLM's input embeddings, word2vec trained here, or a file."""
    from dagster_ir.methods.ghrm.protocol import corpus_texts  # torch: loaded when the step runs

    config = with_settings(config, "word2vec", context.partition_key, context)
    domain = config.to_domain()
    source = (
        "file"
        if config.path and config.source == "minilm" and "source" not in config.model_fields_set
        else config.source
    )
    if source not in VECTOR_SOURCES:
        raise ValueError(f"word2vec: source {source!r} is not one of {VECTOR_SOURCES}")
    if source == "file" and not config.path:
        raise ValueError("word2vec: source 'file' needs a path")
    started = time.monotonic()
    if source == "file":
        vectors, source = load_vectors(config.path), config.path
    elif source == "trained":
        vectors = train_word2vec(lambda: corpus_texts(corpus), domain)
    else:
        vectors = embedding_vectors(collection_words(corpus_texts(corpus), domain), config.backbone)
    seconds = time.monotonic() - started
    path = save_vectors(vectors, data.files("word2vec", context.partition_key) / "vectors.bin")
    context.add_output_metadata(
        {
            "words": len(vectors),
            "dim": vectors.vector_size,
            "seconds": round(seconds, 2),
            "source": source,
            "config": dg.MetadataValue.json(asdict(domain)),
            "file": dg.MetadataValue.path(data.relative(path)),
        }
    )
    manifest = pl.DataFrame(
        {
            "path": [str(path)],
            "words": [len(vectors)],
            "dim": [vectors.vector_size],
            "source": [source],
            "seed": [domain.seed],
            "epochs": [domain.epochs],
            "remove_stopwords": [domain.text.remove_stopwords],
            "lemmatize": [domain.text.lemmatize],
        }
    )
    # by the vectors' content: the settings it reads have no version Dagster sees change (assets.lib.metadata.by_content)
    return dg.Output(manifest, data_version=dg.DataVersion(content_version(path)))


class GHRMSettings(dg.Config):
    """Maps onto `dagster_ir.methods.ghrm.model.GHRMConfig`: a profile ("demo" | "paper") plus overrides.

    None keeps the profile's value. `doc_words`/`query_words` are the per-collection truncation
    (paper: 300/4 on Robust04, 500/5 on ClueWeb09-B): None reads them off the collection with
    `lengths: collection` (the default; the `length_percentile` of its query and document lengths in
    GHRM's words, `dagster_ir.collections.lengths`) or keeps the profile's with `lengths: profile`.
    `remove_stopwords`/`lemmatize` must match the word2vec asset's.
    """

    profile: str = "demo"
    candidate_run: str = "bm25"
    doc_words: int | None = None
    query_words: int | None = None
    lengths: str = "collection"  # "collection" | "profile": where query_words/doc_words left None come from
    length_percentile: float = 90.0
    min_count: int | None = None
    window: int | None = None
    self_loop: float | None = None
    remove_stopwords: bool | None = None
    lemmatize: bool | None = None
    blocks: int | None = None
    rate: float | None = None
    top_k: int | None = None
    epochs: int | None = None
    batches_per_epoch: int | None = None
    pairs_per_batch: int | None = None
    lr: float | None = None
    schedule: str | None = None
    seed: int | None = None
    train_depth: int | None = None
    rerank_depth: int | None = None
    # worker processes training at once (GHRM's (variant, rotation) pairs, the sweeps' settings; the same
    # results as 1); None: 2 when the profile trains on one torch thread (the demo) and 2+ cores are ours, else 1
    workers: int | None = None

    def training_workers(self, domain: GHRMConfig) -> int:
        """How many models train at once (`dagster_ir.methods.ghrm.protocol.run_variants`, `sweeps.run_sweep`)."""
        if self.workers is not None:
            if self.workers < 1:
                raise ValueError(f"{type(self).__name__}.workers must be >= 1, got {self.workers}")
            return self.workers
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return 2 if domain.training.threads == 1 and cores >= 2 else 1

    def to_domain(self) -> GHRMConfig:
        base = profile(self.profile)
        text = replace(base.inputs.text, **_given(remove_stopwords=self.remove_stopwords, lemmatize=self.lemmatize))
        return GHRMConfig(
            inputs=replace(
                base.inputs,
                text=text,
                **_given(
                    doc_words=self.doc_words,
                    query_words=self.query_words,
                    min_count=self.min_count,
                    window=self.window,
                    self_loop=self.self_loop,
                ),
            ),
            model=replace(base.model, **_given(blocks=self.blocks, rate=self.rate, top_k=self.top_k)),
            training=replace(
                base.training,
                **_given(
                    epochs=self.epochs,
                    batches_per_epoch=self.batches_per_epoch,
                    pairs_per_batch=self.pairs_per_batch,
                    lr=self.lr,
                    schedule=self.schedule,
                    seed=self.seed,
                    train_depth=self.train_depth,
                    rerank_depth=self.rerank_depth,
                ),
            ),
        )


class GHRMAssetConfig(GHRMSettings):
    """GHRMSettings plus the variants to train and the rotations to run (`folds`, default all)."""

    variants: list[str] = list(VARIANTS)
    folds: list[int] | None = None
    seeds: list[int] | None = None  # None: the collection's `seeds`
    interpolate: bool = True  # also <variant>+<candidate_run>: interpolated with the candidates, weight on validation

    def to_domain(self) -> GHRMConfig:
        unknown = sorted(set(self.variants) - set(VARIANTS))
        if unknown or not self.variants:
            raise ValueError(f"GHRMAssetConfig.variants: unknown {unknown} or empty (choose from {sorted(VARIANTS)})")
        return super().to_domain()


def fit_lengths(config: GHRMSettings, domain: GHRMConfig, queries: pl.DataFrame, corpus) -> tuple[GHRMConfig, dict]:
    """`domain` with the query and document words read off the collection where the config left them None
    (`lengths: collection`); and metadata saying which lengths were used and where they came from."""
    from dagster_ir.methods.ghrm.protocol import corpus_texts  # torch: loaded when the step runs

    if config.lengths not in ("collection", "profile"):
        raise ValueError(f"GHRM lengths: {config.lengths!r} is neither 'collection' nor 'profile'")
    inputs = domain.inputs
    source = {
        "query_words": "config" if config.query_words is not None else config.lengths,
        "doc_words": "config" if config.doc_words is not None else config.lengths,
    }
    if config.lengths == "collection" and "collection" in source.values():
        found = collection_lengths(
            queries["text"].to_list(),
            corpus_texts(corpus),
            partial(tokens, config=inputs.text),
            config.length_percentile,
        )
        inputs = replace(inputs, **{k: getattr(found, k) for k, v in source.items() if v == "collection"})
    domain = replace(domain, inputs=inputs)
    return domain, {
        "query_words": inputs.query_words,
        "doc_words": inputs.doc_words,
        "lengths from": dg.MetadataValue.json(source),
        "length percentile": config.length_percentile,
    }


def _prepare(config: GHRMSettings, domain: GHRMConfig, corpus, queries, qrels, candidate_runs, word2vec) -> tuple:
    """(the candidate run, GHRMData) after checking the vectors were trained on text read as GHRM reads it."""
    from dagster_ir.methods.ghrm.protocol import prepare_data  # torch: loaded when the step runs

    run = candidate_runs.filter(pl.col("run_name") == config.candidate_run)
    if run.height == 0:
        raise ValueError(
            f"ghrm: no candidate run {config.candidate_run!r} "
            f"(have {candidate_runs['run_name'].unique().sort().to_list()})"
        )
    if word2vec["source"][0] in ("trained", "minilm"):  # vectors of the collection's words as read then
        if "lemmatize" not in word2vec.columns:
            raise ValueError("ghrm: the word2vec manifest predates text preprocessing; materialize word2vec again")
        trained = TextConfig(bool(word2vec["remove_stopwords"][0]), bool(word2vec["lemmatize"][0]))
        if trained != domain.inputs.text:
            raise ValueError(
                f"ghrm: word2vec was trained on text read with {trained}, GHRM reads {domain.inputs.text}; "
                "give word2vec and GHRM the same remove_stopwords and lemmatize"
            )
    data = prepare_data(
        corpus,
        queries.select("query_id", "text"),
        qrels,
        run.select(list(RUN)),
        load_vectors(word2vec["path"][0]),
        domain,
    )
    return run, data


# collection_config: the collection's `seeds` decide which seeds run, so a change there reruns GHRM;
# collection_settings: its profile and `assets` settings (e.g. query_words)
@dg.asset(
    pool=TRAINING_POOL,
    group_name=GROUP,
    partitions_def=collection_partitions,
    code_version="6",  # 6: the untrained start competes with the epochs; 5: one k per report section (demo 20, paper 100)
    deps=["collection_config", "collection_settings"],
)
def ghrm_runs(
    context: dg.AssetExecutionContext,
    config: GHRMAssetConfig,
    data: DataDirResource,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    candidate_runs: pl.DataFrame,
    word2vec: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """GHRM, GHRM-nopool and GHRM-soft reranking BM25's top: 5 folds rotated, epoch chosen on validation, per seed."""
    from dagster_ir.methods.ghrm.protocol import (  # torch: loaded when the step runs
        fingerprint,
        fold_run,
        interpolated_fold_run,
        mean_measure,
        run_variants,
    )
    from dagster_ir.neural.training import kept_record  # torch: loaded when the step runs

    config = with_settings(config, "ghrm_runs", context.partition_key, context)
    seeds = config.seeds if config.seeds is not None else list(collection_specs()[context.partition_key].protocol.seeds)
    started = time.monotonic()
    base, lengths = fit_lengths(config, config.to_domain(), queries, corpus)
    run, inputs = _prepare(config, base, corpus, queries, qrels, candidate_runs, word2vec)
    runs, curves, roots, kept = [], {}, [], []
    workers = config.training_workers(base)
    metadata = {
        "vocabulary": len(inputs.vocabulary),
        "seeds": seeds,
        "vectors": word2vec["source"][0],
        **lengths,
        "workers": workers,
    }
    for seed in seeds:
        domain = offset_seeds(base, seed)
        root = data.files("ghrm", context.partition_key, f"{CHECKPOINTS}-{fingerprint(domain, inputs, query_splits)}")
        roots.append(data.relative(root))  # relative: a copied data directory's entry stays true
        trained = run_variants(inputs, query_splits, domain, config.variants, root, folds=config.folds, workers=workers)
        for variant, results in trained.items():
            kept += [
                {**kept_record(variant, r.result, r.start_score, r.kept_start), "unit": f"fold {r.fold}, seed {seed}"}
                for r in results
            ]
            variant_run = fold_run(results)
            runs.append(variant_run.with_columns(seed=pl.lit(seed, dtype=pl.Int64)))
            if config.interpolate:
                mixed, weights = interpolated_fold_run(
                    results,
                    inputs.candidates,
                    qrels,
                    domain.training.selection_measure,
                    f"{variant}+{config.candidate_run}",
                )
                runs.append(mixed.with_columns(seed=pl.lit(seed, dtype=pl.Int64)).select(runs[-1].columns))
                metadata[f"{variant}+{config.candidate_run} weight (seed {seed})"] = weights
            if seed == seeds[0]:
                metadata.update(_variant_metadata(variant, results, variant_run, run, qrels))
                curves[variant] = _mean_curve([r.result.dev_scores for r in results])
    metadata["bm25 nDCG@20 (same queries)"] = round(
        mean_measure(
            run.filter(pl.col("query_id").is_in(runs[0]["query_id"].unique().implode())),
            qrels,
            runs[0]["query_id"].unique().to_list(),
            "nDCG@20",
        ),
        4,
    )
    metadata["validation curve"] = _line_chart(
        curves, "epoch", f"validation {base.training.selection_measure} (mean of folds, seed {seeds[0]})"
    )
    metadata["seconds"] = round(time.monotonic() - started, 1)
    metadata["depth"] = base.training.rerank_depth  # the candidates reranked (the report's k)
    metadata["config"] = dg.MetadataValue.json(json.loads(json.dumps(asdict(base))))
    metadata["checkpoints"] = dg.MetadataValue.json(roots)
    metadata[KEPT_WEIGHTS] = kept_weights_entry(kept)  # per variant and rotation: the start or an epoch
    context.add_output_metadata(metadata)
    output = pl.concat(runs)
    # by content: the version Dagster records of `collection_config` never changes (see assets.lib.staleness)
    return dg.Output(output, data_version=dg.DataVersion(frame_version(output)))


def _variant_metadata(
    variant: str, results, variant_run: pl.DataFrame, first_stage: pl.DataFrame, qrels: pl.DataFrame
) -> dict:
    from dagster_ir.methods.ghrm.protocol import fold_means, mean_measure  # torch: loaded when the step runs

    query_ids = variant_run["query_id"].unique().to_list()
    steps = sum(r.result.steps for r in results)
    seconds = sum(r.result.seconds for r in results)
    return {
        f"{variant} nDCG@20": round(mean_measure(variant_run, qrels, query_ids, "nDCG@20"), 4),
        f"{variant} P@20": round(mean_measure(variant_run, qrels, query_ids, "P@20"), 4),
        f"{variant} nDCG@20 per test fold": [round(v, 4) for v in fold_means(variant_run, qrels, "nDCG@20")],
        f"{variant} kept epoch": [r.chosen_epoch for r in results],  # 0: the untrained start
        f"{variant} validation best": [
            round(r.start_score if r.kept_start else max(r.result.dev_scores), 4) for r in results
        ],
        f"{variant} final loss": [round(float(np.mean(r.result.loss_curve[-10:])), 4) for r in results],
        f"{variant} training steps/s": round(steps / max(seconds, 1e-9), 1),
    }


def _mean_curve(curves: list[list[float]]) -> list[float]:
    length = min(len(c) for c in curves)
    return [float(np.mean([c[i] for c in curves])) for i in range(length)]


def _line_chart(series: dict[str, list[float]], xlabel: str, ylabel: str) -> dg.MetadataValue:
    """Curves as a Markdown image (base64 PNG), shown inline in the Dagster UI."""
    import matplotlib  # matplotlib: loaded to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: loaded to draw

    fig, ax = plt.subplots(figsize=(6, 3), dpi=100)
    for name, values in series.items():
        ax.plot(range(1, len(values) + 1), values, marker="o", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return dg.MetadataValue.md(f"![{ylabel}](data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()})")


@dg.asset_check(asset=ghrm_runs, blocking=True, partitions_def=collection_partitions)
def ghrm_runs_are_complete(ghrm_runs: pl.DataFrame) -> dg.AssetCheckResult:
    """Finite scores, no (run, seed, query, doc) twice, one fold per query, every variant and seed over the same queries."""
    if "seed" not in ghrm_runs.columns:  # materialized before runs had seeds
        ghrm_runs = ghrm_runs.with_columns(seed=pl.lit(0, dtype=pl.Int64))
    duplicates = ghrm_runs.height - ghrm_runs.unique(["run_name", "seed", "query_id", "doc_id"]).height
    non_finite = int((~ghrm_runs["score"].is_finite()).sum())
    folds_per_query = ghrm_runs.group_by("query_id").agg(pl.col("fold").n_unique())["fold"].max() or 0
    query_sets = {frozenset(part["query_id"].unique()) for part in ghrm_runs.partition_by("run_name", "seed")}
    return dg.AssetCheckResult(
        passed=duplicates == 0 and non_finite == 0 and folds_per_query <= 1 and len(query_sets) <= 1,
        metadata={
            "duplicate_rows": duplicates,
            "non_finite_scores": non_finite,
            "max_folds_per_query": int(folds_per_query),
            "distinct_query_sets": len(query_sets),
        },
    )


class GHRMSweepsAssetConfig(GHRMSettings):
    """GHRMSettings (the point the sweeps vary one parameter around) plus the grid.

    `sweep_profile` ("demo" | "paper") gives the grid; `rates`, `blocks_grid` and `top_ks` override
    it (an empty list skips that sweep).
    """

    sweep_profile: str = "demo"
    rates: list[float] | None = None
    blocks_grid: list[int] | None = None
    top_ks: list[int] | None = None

    def to_sweep(self) -> "SweepConfig":
        from dagster_ir.methods.ghrm.sweeps import PROFILES as SWEEP_PROFILES  # torch: loaded when the step runs

        if self.sweep_profile not in SWEEP_PROFILES:
            raise ValueError(f"unknown sweep profile {self.sweep_profile!r} (have {sorted(SWEEP_PROFILES)})")
        given = _given(rate=self.rates, blocks=self.blocks_grid, top_k=self.top_ks)
        return replace(SWEEP_PROFILES[self.sweep_profile], **{k: tuple(v) for k, v in given.items()})


@dg.asset(
    pool=TRAINING_POOL,
    group_name=GROUP,
    deps=[UNIT_SETTINGS],
    partitions_def=unit_partitions,
    code_version=CODE_VERSION,
    ins=unit_ins("corpus", "queries", "qrels", "query_splits", "candidate_runs", "word2vec"),
)
def ghrm_sweeps(
    context: dg.AssetExecutionContext,
    config: GHRMSweepsAssetConfig,
    data: DataDirResource,
    corpus: pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    candidate_runs: pl.DataFrame,
    word2vec: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """GHRM's pooling rate, blocks T and readout k swept as in Figures 3-5 on the unit's validation queries."""
    from dagster_ir.methods.ghrm.protocol import fingerprint  # torch: loaded when the step runs
    from dagster_ir.methods.ghrm.sweeps import (  # torch: loaded when the step runs
        choose,
        run_sweep,
        sweep_figure,
        sweep_means,
    )

    config = with_settings(config, "ghrm_sweeps", training_unit(context).collection, context)
    unit = training_unit(context)
    roles = unit_queries(query_splits, unit)
    started = time.monotonic()
    domain, lengths = fit_lengths(config, config.to_domain(), queries, corpus)
    domain, sweep = offset_seeds(domain, unit.seed), config.to_sweep()
    _, inputs = _prepare(config, domain, corpus, queries, qrels, candidate_runs, word2vec)
    root = data.files("ghrm_sweeps", unit.key, f"{CHECKPOINTS}-{fingerprint(domain, inputs, query_splits)}")
    workers = config.training_workers(domain)
    results = run_sweep(inputs, roles.train, roles.validation, domain, sweep, root, workers=workers)
    measure = domain.training.selection_measure
    chosen = choose(results, measure)
    png = figure_to_png_bytes(sweep_figure(results, chosen, sweep.measures))
    context.add_output_metadata(
        {
            "chosen": dg.MetadataValue.json(chosen),
            "validation means": dg.MetadataValue.md(_markdown(sweep_means(results))),
            "figure": dg.MetadataValue.md(f"![sweeps](data:image/png;base64,{base64.b64encode(png).decode()})"),
            "train_queries": len(roles.train),
            "validation_queries": len(roles.validation),
            "seconds": round(time.monotonic() - started, 1),
            "workers": workers,
            **lengths,
            "config": dg.MetadataValue.json(json.loads(json.dumps(asdict(domain)))),
            "grid": dg.MetadataValue.json(json.loads(json.dumps(asdict(sweep)))),
            "checkpoints": dg.MetadataValue.path(data.relative(root)),
        }
    )
    return by_content(tag_unit(results, unit))


def _markdown(frame: pl.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |\n|" + "---|" * len(frame.columns)
    rows = [
        "| " + " | ".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row) + " |"
        for row in frame.iter_rows()
    ]
    return "\n".join([header, *rows])


ghrm_assets = [word2vec, ghrm_runs, ghrm_sweeps]
ghrm_checks = [ghrm_runs_are_complete]
