"""PHP assets: pre-training examples, the three PHP stages, ablations, fine-tuned cross-encoders, reranked runs.

php_groups -> php_examples -> php_hp -> php_shp -> php_mrds (-> php_ablations)
wiki_articles + wiki_links -> php_baseline_examples -> php_baselines (Table 3: ICT, WLP, PROP, HARP)
negatives + (backbone | php stage | ablation | baseline) -> cross_encoder (per training unit) -> reranked_runs (per unit)

`cross_encoder` and `reranked_runs` are partitioned by training unit (collection, fold, seed; see
`assets.lib.partitions`): each unit fine-tunes on its training queries' negatives, chooses the epoch on
its validation queries and reranks its test queries, so under `protocol: cv` the five folds' runs
together cover every query. Seed s shifts every seed of the settings by s.

Every config has `profile` ("demo" | "paper", see `dagster_ir.methods.php.PROFILES` and
`dagster_ir.neural.finetune.PROFILES`) and optional overrides (None keeps the profile's value; for
`max_examples` and `max_steps` 0 means "no cap"). Checkpoint folders live under the data dir
(`files/php/...`); the assets return small manifest frames with their paths.
Device and precision are `auto` (`dagster_ir.neural.device`); `php_hp`/`php_shp`/`php_mrds`,
`php_ablations`, `php_baselines` and `cross_encoder` train under torchrun (DDP over `torchrun.nproc_per_node` processes, one per GPU of
the host by default, and `torchrun.nnodes` nodes) when that is more than one process, else in the
step's own process (`dagster_ir.methods.php.stage_job`, `dagster_ir.methods.php.pretrain_job`,
`dagster_ir.neural.finetune_job`).
Run names of `reranked_runs`: "bi-encoder" (the bundled sentence-transformers model, untrained, query
and document encoded apart: the zero-shot reference every cross-encoder starts near; see
`dagster_ir.neural.cross_encoder`), "bert" (the backbone fine-tuned), "php" (php_mrds fine-tuned),
"php-hp" / "php-shp" / "php-mrds" (a given stage), "php-<ablation>" (e.g. "php-shp-only"), and the
Table 3 baselines by name ("ict", "wlp", "prop", "harp").
"""

import base64
import io
import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import dagster as dg
import polars as pl

from assets.defs.automation import TRAINING_POOL
from assets.defs.php.config import (
    DEFAULT_INITS,
    CrossEncoderSettings,
    PhpAblationSettings,
    PhpBaselineSettings,
    PhpSettings,
    PhpStageSettings,
    RerankSettings,
)
from assets.lib.metadata import by_content
from assets.lib.partitions import training_unit, unit_ins, unit_partitions
from assets.lib.plots import training_curve_metadata
from assets.lib.project import collection_specs
from assets.lib.resources import DataDirResource
from assets.lib.settings import UNIT_SETTINGS, with_profile, with_settings
from assets.lib.torchrun import is_distributed, launch_metadata, run_torchrun, run_train_job
from dagster_ir.collections import offset_seeds, tag_unit, unit_queries
from dagster_ir.fusion.interpolate import interpolated_run
from dagster_ir.lazy import lazy_module
from dagster_ir.neural.backbone import backbone_path
from dagster_ir.neural.device import Placement, default_processes
from dagster_ir.neural.training import TrainConfig
from dagster_ir.retrieval.dense import BiEncoderScorer, DenseConfig
from dagster_ir.schemas import RUN
from dagster_ir.storage.parquet import frame_version
from dagster_ir.wiki import latest_articles

# the torch code, imported where a step uses it (the definitions import this module without torch)
php = lazy_module("dagster_ir.methods.php")
stage_job = lazy_module("dagster_ir.methods.php.stage_job")
pretrain_job = lazy_module("dagster_ir.methods.php.pretrain_job")
finetune = lazy_module("dagster_ir.neural.finetune")
finetune_job = lazy_module("dagster_ir.neural.finetune_job")

GROUP = "php"
EVAL_COLLECTION = "wiki-car"  # built from the same dump: its dev/test articles stay out of pre-training


# --- plots --------------------------------------------------------------------------------------


def _curves_markdown(curves: dict[str, list[float]], title: str) -> dg.MetadataValue:
    """Loss curves (one line per name) as a Markdown image for the Dagster UI."""
    import matplotlib  # matplotlib: loaded to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: loaded to draw

    fig, ax = plt.subplots(figsize=(6, 3), dpi=100)
    for name, values in curves.items():
        ax.plot(range(1, len(values) + 1), values, label=name)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    if curves:
        ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return dg.MetadataValue.md(f"![{title}](data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()})")


# --- examples and stages ------------------------------------------------------------------------


def _eval_ins() -> dict:
    if EVAL_COLLECTION not in collection_specs():
        return {}
    mapping = dg.SpecificPartitionsPartitionMapping([EVAL_COLLECTION])
    return {"queries": dg.AssetIn(partition_mapping=mapping), "query_splits": dg.AssetIn(partition_mapping=mapping)}


def eval_articles(queries: pl.DataFrame | None, query_splits: pl.DataFrame | None) -> list[str]:
    """Articles of the evaluation collection's dev and test queries (wiki-car queries carry article_id)."""
    if queries is None or query_splits is None or "article_id" not in queries.columns:
        return []
    held_out = query_splits.filter(pl.col("split").is_in(["dev", "test"])).select("query_id")
    return queries.join(held_out, on="query_id")["article_id"].unique().sort().to_list()


# The IO manager hands such an input over as a scan (its typing_type); called directly, a frame does too.
_SCAN = dg.DagsterType(
    name="PolarsScan",
    typing_type=pl.LazyFrame,
    type_check_fn=lambda _, value: isinstance(value, (pl.LazyFrame, pl.DataFrame)),
)


def _scan_ins() -> dict:
    return {"php_groups": dg.AssetIn(dagster_type=_SCAN), "wiki_link_graph": dg.AssetIn(dagster_type=_SCAN)}


@dg.asset(group_name=GROUP, deps=["run_profile_setting"], code_version="3", ins={**_scan_ins(), **_eval_ins()})
def php_examples(context: dg.AssetExecutionContext, config: PhpSettings, **inputs) -> pl.DataFrame:
    """PHP training examples of every stage (HP, SHP, MRDS): a segment, one positive, n sampled negatives."""
    config = with_profile(config, context)
    domain = config.to_domain()  # the scans are read a cap's keys at a time (see dagster_ir.methods.php.examples)
    frame, metadata = _build_examples(domain, inputs)
    context.add_output_metadata(metadata)
    return frame


def _build_examples(domain: "php.PhpConfig", inputs: dict) -> tuple[pl.DataFrame, dict]:
    """Every stage's examples from php_groups (+ wiki_link_graph, the held-out articles) and their counts."""
    excluded = eval_articles(inputs.get("queries"), inputs.get("query_splits")) if domain.exclude_eval_articles else []
    frames, metadata = [], {"excluded_articles": len(excluded), "seed": domain.train.seed}
    for stage in php.STAGE_ORDER:
        frame, counts = php.build_php_examples(
            inputs["php_groups"], stage, domain, excluded, link_graph=inputs["wiki_link_graph"]
        )
        frames.append(frame)
        metadata.update({f"{stage}_{k}": v for k, v in asdict(counts).items() if k != "stage"})
    return pl.concat(frames), metadata


def _pretrain(
    context,
    config: PhpStageSettings,
    data: DataDirResource,
    stage: str,
    init: str | None,
    examples: pl.DataFrame,
    articles: pl.LazyFrame,
    links: pl.LazyFrame,
) -> pl.DataFrame:
    """Train one stage into files/php/<stage> and describe it (manifest frame + metadata)."""
    domain = config.to_domain()
    init = init or backbone_path(domain.backbone)
    stage_examples = examples.filter(pl.col("stage") == stage)
    key = php.run_key(asdict(domain), stage, frame_version(stage_examples), init, _folder_version(init))
    checkpoints = data.files("php", "checkpoints") / f"{stage}-{key}"
    started = time.monotonic()
    articles = latest_articles(articles).segments  # an article in several dumps: its newest revision
    processes = default_processes(domain.train.device)
    launched = {}
    if is_distributed(config.torchrun, processes):  # every process trains on its share of each global batch
        job = stage_job.write_job(
            data.files("php", "jobs") / f"{stage}-{key}",
            stage=stage,
            init=init,
            examples=stage_examples,
            segments=articles,
            links=links,
            config=domain,
            out_dir=data.files("php") / stage,
            checkpoint_dir=checkpoints,
        )
        outcome = run_torchrun(
            context,
            config.torchrun,
            stage_job.__name__,
            [str(job)],
            job / "metrics.jsonl",
            default_nproc=processes,
            add_metadata=False,
        )
        launched = launch_metadata(config.torchrun.to_domain(context.run_id, processes), outcome)
        result = stage_job.read_result(job)
        shutil.rmtree(job, ignore_errors=True)
    else:
        result = php.pretrain_stage(
            stage,
            init,
            stage_examples,
            articles,
            links,
            domain,
            data.files("php") / stage,
            checkpoints,
            on_log=_logger(context, stage),
        )
    shutil.rmtree(checkpoints, ignore_errors=True)  # the stage folder holds the result
    context.add_output_metadata({**launched, **_stage_metadata(result, domain, time.monotonic() - started, data)})
    return _stage_manifest(result, domain)


def _folder_version(path: str) -> str:
    weights = Path(path) / "model.safetensors"
    return f"{weights.stat().st_size}-{weights.stat().st_mtime_ns}" if weights.is_file() else path


def _logger(context, stage: str):
    def log(step: int, logs: dict[str, float]) -> None:
        if step % 10 == 0:
            context.log.info(f"{stage} step {step}: " + ", ".join(f"{k}={v:.4g}" for k, v in logs.items()))

    return log


def _stage_metadata(result: "php.StageResult", domain: "php.PhpConfig", seconds: float, data: DataDirResource) -> dict:
    trained = result.train
    metadata = {
        "model_path": dg.MetadataValue.path(data.relative(result.path)),
        "examples": result.examples,
        "seed": domain.train.seed,
        "seconds": round(seconds, 2),
        "skipped": trained is None,
        **_placement_metadata(domain.train),
    }
    if trained is not None:
        curves = {"loss": trained.loss_curve, **trained.log_curves}
        metadata.update(
            {
                "steps": trained.steps,
                "examples_per_s": round(trained.examples_per_s, 2),
                "final_loss": round(trained.loss_curve[-1], 4),
                "loss_curve": _curves_markdown(curves, f"PHP {result.stage}"),
            }
        )
    return metadata


def _placement_metadata(train: TrainConfig) -> dict:
    """Device, precision and GPU a training ran with (`dagster_ir.neural.device.Placement.metadata`)."""
    return Placement(train.device, train.bf16).metadata()


def _stage_manifest(result: "php.StageResult", domain: "php.PhpConfig") -> pl.DataFrame:
    trained = result.train
    return pl.DataFrame(
        {
            "stage": [result.stage],
            "path": [str(result.path)],
            "init": [result.init],
            "examples": [result.examples],
            "steps": [trained.steps if trained else 0],
            "seconds": [trained.seconds if trained else 0.0],
            "examples_per_s": [trained.examples_per_s if trained else 0.0],
            "seed": [domain.train.seed],
            "skipped": [trained is None],
        }
    )


@dg.asset(
    pool=TRAINING_POOL, group_name=GROUP, code_version="3"
)  # 3: gated-segments cross-attention over the bundled backbone
def php_hp(
    context: dg.AssetExecutionContext,
    config: PhpStageSettings,
    data: DataDirResource,
    php_examples: pl.DataFrame,
    wiki_articles: pl.LazyFrame,
    wiki_links: pl.LazyFrame,
) -> pl.DataFrame:
    """PHP stage 1, hyperlink prediction (D1-D3 against D4), from the backbone: a checkpoint folder."""
    config = with_profile(config, context)
    return _pretrain(context, config, data, "hp", None, php_examples, wiki_articles, wiki_links)


@dg.asset(
    pool=TRAINING_POOL, group_name=GROUP, code_version="3"
)  # 3: gated-segments cross-attention over the bundled backbone
def php_shp(
    context: dg.AssetExecutionContext,
    config: PhpStageSettings,
    data: DataDirResource,
    php_hp: pl.DataFrame,
    php_examples: pl.DataFrame,
    wiki_articles: pl.LazyFrame,
    wiki_links: pl.LazyFrame,
) -> pl.DataFrame:
    """PHP stage 2, symmetric hyperlink prediction (D1-D2 against D3), from php_hp: a checkpoint folder."""
    config = with_profile(config, context)
    return _pretrain(context, config, data, "shp", php_hp["path"][0], php_examples, wiki_articles, wiki_links)


@dg.asset(
    pool=TRAINING_POOL, group_name=GROUP, code_version="3"
)  # 3: gated-segments cross-attention over the bundled backbone
def php_mrds(
    context: dg.AssetExecutionContext,
    config: PhpStageSettings,
    data: DataDirResource,
    php_shp: pl.DataFrame,
    php_examples: pl.DataFrame,
    wiki_articles: pl.LazyFrame,
    wiki_links: pl.LazyFrame,
) -> pl.DataFrame:
    """PHP stage 3, most relevant document selection (D1 against D2), from php_shp: the PHP model."""
    config = with_profile(config, context)
    return _pretrain(context, config, data, "mrds", php_shp["path"][0], php_examples, wiki_articles, wiki_links)


@dg.asset(
    pool=TRAINING_POOL,
    group_name=GROUP,
    code_version="4",  # 4: gated-segments cross-attention over the bundled backbone
    ins={**_scan_ins(), **_eval_ins()},
)
def php_ablations(
    context: dg.AssetExecutionContext,
    config: PhpAblationSettings,
    data: DataDirResource,
    php_examples: pl.DataFrame,
    wiki_articles: pl.LazyFrame,
    wiki_links: pl.LazyFrame,
    **inputs,
) -> pl.DataFrame:
    """PHP ablations (single stage, no MLM, anchor mask ratio, negatives), each pre-trained from the backbone."""
    config = with_profile(config, context)
    rows, curves, launches = [], {}, {}
    processes = default_processes(config.to_domain().train.device)
    for variant in config.variants:
        domain = php.ablation_config(config.to_domain(), variant)
        examples = php_examples
        if domain.n_negatives != config.to_domain().n_negatives:  # "negatives-<n>": drawn again with n
            examples, _ = _build_examples(domain, inputs)
        key = php.run_key(asdict(domain), frame_version(examples))
        checkpoints = data.files("php", "checkpoints") / f"ablation-{variant}-{key}"
        segments, out_dir = latest_articles(wiki_articles).segments, data.files("php", "ablations", variant)
        if is_distributed(config.torchrun, processes):  # every process trains on its share of each global batch
            values, frames = pretrain_job.chain_inputs(domain, examples, segments, wiki_links, out_dir, checkpoints)
            outcome, launched = run_train_job(
                context,
                config.torchrun,
                data.files("php", "jobs") / f"ablation-{variant}-{key}",
                pretrain_job.CHAIN,
                values=values,
                frames=frames,
                device=domain.train.device,
                default_nproc=processes,
            )
            results = pretrain_job.read_results(outcome)
            launches.update({f"{variant}_{k}": v for k, v in launched.items()})
        else:
            results = php.pretrain_chain(domain, examples, segments, wiki_links, out_dir, checkpoints)
        shutil.rmtree(checkpoints, ignore_errors=True)
        final = results[-1]
        rows.append(
            {
                "variant": variant,
                "path": str(final.path),
                "stages": ",".join(domain.stages),
                "steps": sum(r.train.steps for r in results if r.train),
                "seed": domain.train.seed,
            }
        )
        curves[variant] = [v for r in results if r.train for v in r.train.loss_curve]
    context.add_output_metadata(
        {
            **launches,
            "variants": len(rows),
            "loss_curves": _curves_markdown(curves, "PHP ablations"),
            **_placement_metadata(config.to_domain().train),
        }
    )
    schema = {"variant": pl.String, "path": pl.String, "stages": pl.String, "steps": pl.Int64, "seed": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


@dg.asset(
    group_name=GROUP,
    deps=["run_profile_setting"],
    code_version="2",
    ins={"wiki_links": dg.AssetIn(dagster_type=_SCAN), **_eval_ins()},
)
def php_baseline_examples(
    context: dg.AssetExecutionContext, config: PhpBaselineSettings, wiki_articles: pl.LazyFrame, **inputs
) -> pl.DataFrame:
    """Pseudo query-document examples of the Table 3 baselines (ICT, WLP, PROP, HARP) over the same dump.

    Segments and links are read as scans; `baseline_max_examples` bounds what each generator holds.
    """
    config = with_profile(config, context)
    domain, generators = config.to_domain(), config.generator_config()
    excluded = eval_articles(inputs.get("queries"), inputs.get("query_splits")) if domain.exclude_eval_articles else []
    segments = latest_articles(wiki_articles).segments
    frame = php.build_baseline_examples(php.METHODS, segments, inputs["wiki_links"], generators, excluded)
    counts = frame.group_by("method", "objective").len().sort("method", "objective")
    context.add_output_metadata(
        {
            "excluded_articles": len(excluded),
            "seed": generators.seed,
            "max_examples": generators.max_examples or "all",
            **{f"{m}_{o}_examples": n for m, o, n in counts.iter_rows()},
        }
    )
    return frame


def baselines_to_pretrain(config: PhpBaselineSettings) -> list[str]:
    """`config.methods`, else the Table 3 baselines some collection's cross_encoder fine-tunes (in php.METHODS order)."""
    if config.methods is not None:
        unknown = sorted(set(config.methods) - set(php.METHODS))
        if unknown:
            raise ValueError(f"php_baselines: unknown methods {unknown} (have {list(php.METHODS)})")
        return list(config.methods)
    inits = set(DEFAULT_INITS)
    for spec in collection_specs().values():
        inits |= set(spec.assets.get("cross_encoder", {}).get("inits", DEFAULT_INITS))
    return [method for method in php.METHODS if method in inits]


# every collection's settings: the baselines to pre-train follow the cross_encoder inits they name
ALL_SETTINGS = dg.AssetDep("collection_settings", partition_mapping=dg.AllPartitionMapping())


@dg.asset(
    pool=TRAINING_POOL, group_name=GROUP, code_version="3", deps=[ALL_SETTINGS]
)  # 3: gated-segments cross-attention
def php_baselines(
    context: dg.AssetExecutionContext,
    config: PhpBaselineSettings,
    data: DataDirResource,
    php_baseline_examples: pl.DataFrame,
    php_hp: pl.DataFrame,
    php_shp: pl.DataFrame,
    php_mrds: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """The Table 3 baselines pre-trained with PHP's backbone, budget and MLM: one checkpoint folder each."""
    config = with_profile(config, context)
    domain = config.to_domain()
    php_steps = int(sum(frame["steps"].sum() for frame in (php_hp, php_shp, php_mrds)))
    budget = max(php_steps, 1) if config.match_php_steps else None
    rows, curves, metadata = [], {}, {"php_steps": php_steps, "max_steps": budget or "profile"}
    processes = default_processes(domain.train.device)
    for method in baselines_to_pretrain(config):
        examples = php_baseline_examples.filter(pl.col("method") == method)
        key = php.run_key(asdict(domain), method, frame_version(examples), budget)
        checkpoints = data.files("php", "checkpoints") / f"baseline-{method}-{key}"
        started = time.monotonic()
        out_dir = data.files("php", "baselines", method)
        if is_distributed(config.torchrun, processes):  # every process trains on its share of each global batch
            values, frames = pretrain_job.baseline_inputs(method, domain, examples, out_dir, checkpoints, budget)
            outcome, launched = run_train_job(
                context,
                config.torchrun,
                data.files("php", "jobs") / f"baseline-{method}-{key}",
                pretrain_job.BASELINE,
                values=values,
                frames=frames,
                device=domain.train.device,
                default_nproc=processes,
            )
            [result] = pretrain_job.read_results(outcome)
            metadata.update({f"{method}_{k}": v for k, v in launched.items()})
        else:
            result = php.pretrain_baseline(
                method, examples, domain, out_dir, checkpoints, max_steps=budget, on_log=_logger(context, method)
            )
        shutil.rmtree(checkpoints, ignore_errors=True)
        trained = result.train
        rows.append(
            {
                "method": method,
                "path": str(result.path),
                "examples": result.examples,
                "steps": trained.steps if trained else 0,
                "seed": domain.train.seed,
            }
        )
        curves[method] = trained.loss_curve if trained else []
        metadata[f"{method}_seconds"] = round(time.monotonic() - started, 2)
    context.add_output_metadata(
        {
            **metadata,
            "methods": len(rows),
            **_placement_metadata(domain.train),
            "loss_curves": _curves_markdown(curves, "Table 3 baselines"),
        }
    )
    schema = {"method": pl.String, "path": pl.String, "examples": pl.Int64, "steps": pl.Int64, "seed": pl.Int64}
    return by_content(pl.DataFrame(rows, schema=schema))


# --- fine-tuning and reranking ------------------------------------------------------------------


def resolve_init(
    name: str, stages: dict[str, str], ablations: pl.DataFrame, baselines: pl.DataFrame | None = None
) -> str:
    """The folder a named cross-encoder starts from ("" = the backbone)."""
    if name == "bert":
        return ""
    baseline = baselines.filter(pl.col("method") == name) if baselines is not None else None
    if baseline is not None and baseline.height:
        return baseline["path"][0]
    if name == "php":
        return stages["mrds"]
    if name.removeprefix("php-") in stages:
        return stages[name.removeprefix("php-")]
    variant = ablations.filter(pl.col("variant") == name.removeprefix("php-"))
    if name.startswith("php-") and variant.height:
        return variant["path"][0]
    known = [
        "bert",
        "php",
        *(f"php-{s}" for s in stages),
        *(f"php-{v}" for v in ablations["variant"]),
        *([] if baselines is None else baselines["method"]),
    ]
    raise ValueError(
        f"cross_encoder: unknown init {name!r}; choose from {known} "
        "(add ablations to php_ablations' variants, baselines to php_baselines' methods first)"
    )


@dg.asset(
    pool=TRAINING_POOL,
    group_name=GROUP,
    partitions_def=unit_partitions,
    code_version="5",
    deps=[UNIT_SETTINGS],
    ins=unit_ins("queries", "corpus", "qrels", "query_splits", "negatives", "candidate_runs"),
)
def cross_encoder(
    context: dg.AssetExecutionContext,
    config: CrossEncoderSettings,
    data: DataDirResource,
    queries: pl.DataFrame,
    corpus: pl.LazyFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
    negatives: pl.DataFrame,
    candidate_runs: pl.DataFrame,
    php_hp: pl.DataFrame,
    php_shp: pl.DataFrame,
    php_mrds: pl.DataFrame,
    php_ablations: pl.DataFrame,
    php_baselines: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """Cross-encoders fine-tuned with LCE on the unit's training queries, from the backbone, PHP and its baselines."""
    unit = training_unit(context)
    config = with_settings(config, "cross_encoder", unit.collection, context)
    roles = unit_queries(query_splits, unit)
    domain = offset_seeds(config.to_domain(), unit.seed)
    run = candidate_runs.filter(pl.col("run_name") == "bm25")
    if domain.train_pairs == "candidates":
        pairs = finetune.training_pairs(run, qrels, roles.train, domain)
    else:
        pairs = negatives.filter(pl.col("query_id").is_in(pl.Series(roles.train, dtype=pl.String).implode()))
    stages = {frame["stage"][0]: frame["path"][0] for frame in (php_hp, php_shp, php_mrds)}
    dev = (run, qrels, roles.validation) if config.select_on_dev and roles.validation else None
    processes = default_processes(domain.train.device)
    distributed = is_distributed(config.torchrun, processes)
    dev_runs: list[pl.DataFrame] = []  # the validation rerankings of the current init, in call order
    evaluate = (
        None
        if distributed or dev is None
        else finetune.dev_evaluator(run, queries, corpus, qrels, roles.validation, domain, on_run=dev_runs.append)
    )
    rows, curves, launches, gates = [], {}, {}, {}
    for name in config.inits:
        dev_runs.clear()
        init = resolve_init(name, stages, php_ablations, php_baselines)
        key = php.run_key(
            asdict(domain), name, _folder_version(init or backbone_path(domain.backbone)), frame_version(pairs)
        )
        checkpoints = data.files("cross_encoder", "checkpoints") / f"{context.partition_key}-{name}-{key}"
        folder = data.files("cross_encoder", context.partition_key) / name
        model = finetune.load_model(init, domain)
        if distributed:  # every process trains on its share of each global batch: the same result, sooner
            job = finetune_job.write_job(
                data.files("cross_encoder", "jobs") / f"{context.partition_key}-{name}-{key}",
                init=init,
                config=domain,
                queries=queries,
                corpus=corpus,
                negatives=pairs,
                checkpoint_dir=checkpoints,
                output=folder,
                dev=dev,
            )
            launched = run_torchrun(
                context,
                config.torchrun,
                finetune_job.__name__,
                [str(job)],
                job / "metrics.jsonl",
                default_nproc=processes,
                add_metadata=False,
            )
            world = config.torchrun.to_domain(context.run_id, processes)
            launches[name] = {k: v for k, v in launch_metadata(world, launched).items() if k != "loss_curve"}
            tuned = finetune_job.read_result(job)
            shutil.rmtree(job, ignore_errors=True)
        else:
            tuned = finetune.fine_tune(
                model, queries, corpus, pairs, domain, checkpoints, evaluate=evaluate, on_log=_logger(context, name)
            )
            model.save(folder)
            kept = finetune.kept_dev_run(tuned, dev_runs)
            if kept is not None:  # reranked_runs reads it instead of reranking the validation queries again
                finetune.save_dev_run(
                    folder,
                    kept,
                    candidate="bm25",
                    depth=domain.dev_depth,
                    bf16=domain.train.bf16,
                    use_title=domain.use_title,
                )
        shutil.rmtree(checkpoints, ignore_errors=True)
        saved = json.loads((folder / "cross_encoder.json").read_text(encoding="utf-8"))  # the kept model's settings
        gates[name] = (saved.get("cross_attention", "full"), saved.get("gate_values"))
        curves[name] = tuned.curve()
        result = tuned.train
        rows.append(
            {
                "run_name": name,
                "init": init or domain.backbone or "bundled",
                "path": str(folder),
                "head": model.head,
                "examples": tuned.examples,
                "steps": result.steps,
                "seconds": result.seconds,
                "examples_per_s": result.examples_per_s,
                "chosen_epoch": curves[name].chosen,
                "start_score": tuned.start_score,
                "dev_score": tuned.dev_score,
                "train_seed": domain.train.seed,
            }
        )
    manifest = tag_unit(pl.DataFrame(rows, schema_overrides={"dev_score": pl.Float64, "start_score": pl.Float64}), unit)
    context.add_output_metadata(
        {
            **training_curve_metadata(
                data.files("cross_encoder", context.partition_key),
                context.partition_key,
                curves,
                domain.dev_measure,
                "cross_encoder",
                shown=data.relative,
            ),
            "train_pairs": domain.train_pairs,
            "train_depth": domain.pair_depth,
            "train_examples": rows[0]["examples"] if rows else 0,
            "train_queries": len(roles.train),
            "validation_queries": len(roles.validation),
            "seed": domain.train.seed,
            **_placement_metadata(domain.train),
            **{f"{r['run_name']}_examples_per_s": round(r["examples_per_s"], 2) for r in rows},
            **{f"{r['run_name']}_seconds": round(r["seconds"], 1) for r in rows},
            **{f"{r['run_name']}_dev_{domain.dev_measure}": r["dev_score"] for r in rows if r["dev_score"] is not None},
            **{f"{name}_{key}": value for name, values in launches.items() for key, value in values.items()},
            **{f"{name}_cross_attention": attention for name, (attention, _) in gates.items()},
            **{
                f"{name}_gates": dg.MetadataValue.json([round(g, 3) for g in values])
                for name, (_, values) in gates.items()
                if values is not None
            },
        }
    )
    return by_content(manifest)


BI_ENCODER_RUN = "bi-encoder"


@dg.asset(
    group_name=GROUP,
    deps=[UNIT_SETTINGS],
    partitions_def=unit_partitions,
    code_version="4",  # 4: <model>+<candidate> rows, the bi-encoder row
    ins=unit_ins("candidate_runs", "queries", "corpus", "query_splits", "qrels"),
)
def reranked_runs(
    context: dg.AssetExecutionContext,
    config: RerankSettings,
    cross_encoder: pl.DataFrame,
    candidate_runs: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.LazyFrame,
    query_splits: pl.DataFrame,
    qrels: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """The unit's test queries: the candidate run's top-k reranked by each fine-tuned cross-encoder and the
    bi-encoder, and each interpolated with the candidates (`<model>+<candidate>`, the weight chosen on validation)."""

    config = with_settings(config, "reranked_runs", training_unit(context).collection, context)
    from dagster_ir.neural.cross_encoder import CrossEncoder  # torch: loaded when the step runs
    from dagster_ir.neural.rerank import CrossEncoderScorer, RerankConfig, rerank  # torch: loaded when the step runs

    candidates = candidate_runs.filter(pl.col("run_name") == config.candidate).select(list(RUN))
    if candidates.height == 0:
        raise ValueError(f"reranked_runs: no candidate run named {config.candidate!r}")
    unit = training_unit(context)
    roles = unit_queries(query_splits, unit)
    run = candidates.filter(pl.col("query_id").is_in(roles.test))
    validation = candidates.filter(pl.col("query_id").is_in(roles.validation)) if config.interpolate else run.clear()
    docs = corpus.join(pl.concat([run, validation]).lazy().select("doc_id").unique(), on="doc_id", how="semi").collect()
    placement = config.placement()
    runs, metadata = [], {"queries": run["query_id"].n_unique(), "depth": config.rerank_depth(), **placement.metadata()}
    scorers = {
        name: lambda path=path: CrossEncoderScorer(
            CrossEncoder.from_pretrained(path),
            batch_size=config.batch_size,
            device=placement.device,
            bf16=placement.bf16,
        )
        for name, path in cross_encoder.select("run_name", "path").iter_rows()
    }
    paths = dict(cross_encoder.select("run_name", "path").iter_rows())
    reused: list[str] = []
    if config.bi_encoder:
        scorers[BI_ENCODER_RUN] = lambda: BiEncoderScorer(
            DenseConfig(batch_size=config.batch_size, device=placement.device)
        )
    for name, make_scorer in scorers.items():
        scorer = make_scorer()
        started = time.monotonic()
        runs.append(rerank(run, queries, docs, scorer, RerankConfig(depth=config.rerank_depth(), run_name=name)))
        metadata[f"{name}_pairs_per_s"] = round(runs[-1].height / max(time.monotonic() - started, 1e-9), 1)
        if validation.height:
            kept = paths.get(name) and finetune.load_dev_run(
                paths[name], validation, candidate=config.candidate, depth=config.rerank_depth(), bf16=placement.bf16
            )
            if kept is not None:  # the validation reranking cross_encoder made with these weights
                chosen = kept.with_columns(run_name=pl.lit(name))
                reused.append(name)
            else:
                chosen = rerank(
                    validation, queries, docs, scorer, RerankConfig(depth=config.rerank_depth(), run_name=name)
                )
            mixed, choice = interpolated_run(
                chosen, runs[-1], candidates, qrels, f"{name}+{config.candidate}", config.interpolation_measure
            )
            runs.append(mixed)
            metadata[f"{name}+{config.candidate} weight"] = choice.weight
    metadata["validation reused from cross_encoder"] = ", ".join(reused) or "none"
    context.add_output_metadata(metadata)
    return by_content(tag_unit(pl.concat(runs) if runs else pl.DataFrame(schema=run.schema), unit))


php_assets = [
    php_examples,
    php_hp,
    php_shp,
    php_mrds,
    php_ablations,
    php_baseline_examples,
    php_baselines,
    cross_encoder,
    reranked_runs,
]
