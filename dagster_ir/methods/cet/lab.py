"""The CET lab: naive, the baselines and CET trained on sparse labels, reranking a strong retriever.

Every ranker is the same cross-encoder trained by the same loop (`cet.train_ranker`) on triples
from the sparse training labels; they differ in their negatives and, for CET, the loss. Run names:

* ``naive``: negatives uniformly from the strong retriever's top `negative_depth` (hard negatives,
  false negatives included) - the paper's "ANCE + BERT".
* ``zhan``: negatives from the basic retriever (BM25) instead; it still reranks the strong
  retriever's candidates (Zhan et al.'s training-evaluating inconsistency).
* ``rocketqa``: naive's R is the first ranker; candidates it prefers to the pair's positive with
  probability above eta are not used as negatives (`baselines.denoised_negatives`).
* ``rance``: negatives drawn by RANCE's rank weights from p_rel(r), estimated on the densely
  judged dev queries (`baselines`).
* ``cet``: naive's negatives, CET's coupled loss (R and S); ``cet-tau<x>``: the same with tau = x.

Every ranker's R starts from the same initialisation (the score head seeded by the training seed).
Checkpoints land in ``out_dir/<run name>/relevance`` (and ``selection``), Hugging Face folders, with
the loop's resumable state in ``out_dir/<run name>/training_state/<fingerprint>``: the fingerprint
hashes the settings and the negatives, so an interrupted run resumes and changed inputs start
afresh. `rerank_lab` reranks the strong retriever's top `rerank_depth` with each R.

The dense judgments are read only to estimate RANCE's curve (dev queries) and to report, as a
diagnostic, which share of each ranker's training negatives is in fact relevant.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import torch

from dagster_ir.methods.cet.model import (
    METHODS,
    CetConfig,
    CoupledRanker,
    LabConfig,
    document_texts,
    query_pairs,
    query_texts,
    save_ranker,
    tau_run_name,
    tokenize_texts,
    train_ranker,
    with_tau,
)
from dagster_ir.neural.cross_encoder import CrossEncoder
from dagster_ir.neural.rerank import CrossEncoderScorer, RerankConfig, rerank
from dagster_ir.neural.training import TrainResult
from dagster_ir.methods.cet.baselines import (
    DenoiseConfig,
    RanceConfig,
    denoised_negatives,
    rance_rank_weights,
    relevance_by_rank,
    sample_negatives_by_rank,
)
from dagster_ir.negatives.sampling import NegativeConfig, false_negative_share, sample_negatives
from dagster_ir.schemas import QRELS, RUN, validate
from dagster_ir.storage.locks import remove_unlocked_siblings
from dagster_ir.storage.parquet import frame_version

STATE_DIR = "training_state"


@dataclass(frozen=True)
class LabData:
    """What the lab reads: candidate runs, texts, sparse and dense labels, the query splits."""

    candidate_runs: pl.DataFrame  # RUN rows of several runs (the strong and the basic one at least)
    queries: pl.DataFrame
    corpus: pl.DataFrame | pl.LazyFrame
    sparse_qrels: pl.DataFrame  # simulated training labels (train and dev queries)
    dense_qrels: pl.DataFrame  # the full judgments
    train_query_ids: tuple[str, ...]
    dev_query_ids: tuple[str, ...]

    def __post_init__(self) -> None:
        validate(self.candidate_runs, RUN, "candidate_runs")
        validate(self.sparse_qrels, QRELS, "sparse_qrels")
        validate(self.dense_qrels, QRELS, "dense_qrels")

    def run(self, name: str) -> pl.DataFrame:
        run = self.candidate_runs.filter(pl.col("run_name") == name)
        if run.height == 0:
            names = self.candidate_runs["run_name"].unique().sort().to_list()
            raise ValueError(f"CET lab: no candidate run named {name!r} (have {names})")
        return run


@dataclass(frozen=True)
class RankerSpec:
    """One ranker of the lab: its run name, how its negatives are drawn, and its training config."""

    run_name: str
    method: str
    config: CetConfig


def lab_rankers(config: LabConfig) -> list[RankerSpec]:
    """The rankers `config` asks for, in training order (naive before rocketqa), tau variants last."""
    specs = [RankerSpec(m, m, config.cet) for m in METHODS if m in config.methods]
    specs += [RankerSpec(tau_run_name(t), "cet", with_tau(config.cet, t)) for t in config.taus if t != config.cet.tau]
    return specs


@dataclass(frozen=True)
class TrainedRanker:
    """A trained ranker: where its models are and what its training saw and did."""

    run_name: str
    method: str
    tau: float | None  # CET's tau; None for the baselines
    relevance_path: str
    selection_path: str | None
    queries: int  # training examples (queries with a label and a negative)
    pairs: int
    false_negative_share: float  # of its training negatives, by the dense qrels (diagnostic)
    steps: int
    seconds: float
    examples_per_s: float
    final_loss: float
    best_epoch: int
    fingerprint: str
    notes: dict[str, float] = field(default_factory=dict)  # e.g. rocketqa's scored and rejected counts
    result: TrainResult | None = None

    def row(self) -> dict[str, object]:
        """The manifest row (everything but the curves)."""
        row = {k: v for k, v in asdict(self).items() if k not in ("result", "notes")}
        return {**row, "notes": json.dumps(self.notes, sort_keys=True)}


MANIFEST_SCHEMA: dict[str, pl.DataType] = {
    "run_name": pl.String, "method": pl.String, "tau": pl.Float64, "relevance_path": pl.String,
    "selection_path": pl.String, "queries": pl.Int64, "pairs": pl.Int64, "false_negative_share": pl.Float64,
    "steps": pl.Int64, "seconds": pl.Float64, "examples_per_s": pl.Float64, "final_loss": pl.Float64,
    "best_epoch": pl.Int64, "fingerprint": pl.String, "notes": pl.String,
}  # fmt: skip


def manifest(rankers: Sequence[TrainedRanker]) -> pl.DataFrame:
    """One row per trained ranker (MANIFEST_SCHEMA)."""
    return pl.DataFrame([r.row() for r in rankers], schema=MANIFEST_SCHEMA, orient="row")


# --- negatives per method --------------------------------------------------------------------------


def lab_negatives(
    method: str, data: LabData, config: LabConfig, first_ranker: CrossEncoder | None = None
) -> tuple[pl.DataFrame, dict[str, float]]:
    """(NEGATIVES, notes) for `method`'s training queries; rocketqa needs the naive R as `first_ranker`."""
    train = list(data.train_query_ids)
    labels = data.sparse_qrels
    if method in ("naive", "cet", "zhan"):  # cet: the same negatives as naive
        run = data.run(config.basic_run if method == "zhan" else config.strong_run)
        negative_config = NegativeConfig("random", config.negative_depth, config.n_per_positive, config.negative_seed)
        return sample_negatives(run, labels, train, negative_config).negatives, {}
    if method == "rance":
        rance = RanceConfig(config.negative_depth, config.rance_smoothing, config.rance_gain_k,
                            config.n_per_positive, config.negative_seed)
        if not data.dev_query_ids:
            raise ValueError("CET lab: rance estimates its curve on the dev queries, and there are none")
        curve = relevance_by_rank(data.run(config.strong_run), data.dense_qrels, data.dev_query_ids, rance.depth)
        weights = rance_rank_weights(curve, rance)
        sample = sample_negatives_by_rank(data.run(config.strong_run), labels, train, weights, rance)
        return sample.negatives, {"dev_p_relevant_at_1": float(curve["p_relevant"][0])}
    if method == "rocketqa":
        if first_ranker is None:
            raise ValueError("CET lab: rocketqa needs the naive ranker as its first ranker")
        denoise = DenoiseConfig(config.negative_depth, config.n_per_positive, config.eta, config.negative_seed)
        scorer = _pair_scorer(first_ranker, data, config)
        result = denoised_negatives(data.run(config.strong_run), labels, train, scorer, denoise)
        return result.sample.negatives, {"scored": float(result.scored), "rejected": float(result.rejected)}
    raise ValueError(f"CET lab: unknown method {method!r}")


def _pair_scorer(model: CrossEncoder, data: LabData, config: LabConfig) -> Callable[[pl.DataFrame], np.ndarray]:
    """Scores (query_id, doc_id) rows with `model`, looking the texts up on demand."""
    scorer = CrossEncoderScorer(model, batch_size=config.score_batch_size, device=config.cet.train.device)
    use_title = config.cet.ranker.use_title

    def score(pairs: pl.DataFrame) -> np.ndarray:
        queries = query_texts(data.queries, pairs["query_id"]).rename({"text": "query_text"})
        docs = document_texts(data.corpus, pairs["doc_id"], use_title).rename({"text": "doc_text"})
        texts = pairs.join(queries, on="query_id", how="left", maintain_order="left")
        texts = texts.join(docs, on="doc_id", how="left", maintain_order="left")
        return scorer.score_pairs(texts["query_text"].to_list(), texts["doc_text"].to_list())

    return score


# --- training ----------------------------------------------------------------------------------------


def train_lab(
    data: LabData,
    config: LabConfig,
    out_dir: str | Path,
    *,
    on_log: Callable[[str, int, dict[str, float]], None] | None = None,
) -> list[TrainedRanker]:
    """Train every ranker of `config` (see the module docstring); returns them in training order."""
    out_dir = Path(out_dir)
    trained: list[TrainedRanker] = []
    drawn: dict[str, tuple[pl.DataFrame, dict[str, float]]] = {}  # cet trains on naive's negatives
    first_ranker: CrossEncoder | None = None
    for spec in lab_rankers(config):
        kind = "naive" if spec.method == "cet" else spec.method
        if kind not in drawn:
            drawn[kind] = lab_negatives(kind, data, config, first_ranker)
        negatives, notes = drawn[kind]
        model, ranker = _train_one(spec, negatives, notes, data, config, out_dir, on_log)
        if spec.method == "naive":
            first_ranker = model.relevance
        trained.append(ranker)
    return trained


def _train_one(
    spec: RankerSpec,
    negatives: pl.DataFrame,
    notes: dict[str, float],
    data: LabData,
    config: LabConfig,
    out_dir: Path,
    on_log: Callable[[str, int, dict[str, float]], None] | None,
) -> tuple[CoupledRanker, TrainedRanker]:
    examples = query_pairs(negatives)
    model = CoupledRanker.build(spec.config.ranker, coupled=spec.method == "cet", seed=spec.config.train.seed)
    doc_ids = pl.concat([negatives["pos_doc_id"], negatives["neg_doc_id"]]).unique()
    texts = tokenize_texts(model.relevance, data.queries, data.corpus, negatives["query_id"].unique(), doc_ids,
                           spec.config.ranker.use_title)
    fingerprint = _fingerprint(spec, negatives)
    state = _state_dir(out_dir / spec.run_name, fingerprint)
    evaluate = _dev_evaluator(data, config) if config.select_on_dev else None
    log = (lambda step, logs: on_log(spec.run_name, step, logs)) if on_log else None
    result = train_ranker(model, examples, texts, spec.config, state, evaluate=evaluate, on_log=log)
    folders = save_ranker(model, out_dir / spec.run_name)
    ranker = TrainedRanker(
        run_name=spec.run_name,
        method=spec.method,
        tau=spec.config.tau if spec.method == "cet" else None,
        relevance_path=str(folders.relevance),
        selection_path=str(folders.selection) if folders.selection else None,
        queries=len(examples),
        pairs=negatives.height,
        false_negative_share=false_negative_share(negatives, data.dense_qrels),
        steps=result.steps,
        seconds=result.seconds,
        examples_per_s=result.examples_per_s,
        final_loss=result.loss_curve[-1] if result.loss_curve else float("nan"),
        best_epoch=result.best_epoch,
        fingerprint=fingerprint,
        notes=notes,
        result=result,
    )
    return model, ranker


def _fingerprint(spec: RankerSpec, negatives: pl.DataFrame) -> str:
    """A short hash of the ranker's settings and training triples."""
    settings = json.dumps({"method": spec.method, "config": asdict(spec.config)}, sort_keys=True, default=str)
    digest = hashlib.blake2b(settings.encode(), digest_size=8)
    digest.update(frame_version(negatives.sort(list(negatives.columns))).encode())
    return digest.hexdigest()


def _state_dir(ranker_dir: Path, fingerprint: str) -> Path:
    """ranker_dir/training_state/<fingerprint>, other fingerprints' (stale) states removed unless in use."""
    folder = ranker_dir / STATE_DIR / fingerprint
    remove_unlocked_siblings(folder)
    return folder


def _dev_evaluator(data: LabData, config: LabConfig) -> Callable[[torch.nn.Module], float]:
    """MRR@10 of R's reranking of the dev queries, against their sparse labels (all a trainer has)."""
    from dagster_ir.evaluation import aggregate, evaluate_run

    dev = pl.Series(list(data.dev_query_ids), dtype=pl.String).implode()
    dev_run = data.run(config.strong_run).filter(pl.col("query_id").is_in(dev))
    dev_labels = data.sparse_qrels.filter(pl.col("query_id").is_in(dev))
    if dev_run.height == 0 or dev_labels.height == 0:
        raise ValueError("CET lab: select_on_dev needs dev queries with candidates and sparse labels")

    def evaluate(model: torch.nn.Module) -> float:
        reranked = rerank_with(model.relevance, dev_run, data.queries, data.corpus, config, "dev")
        return float(aggregate(evaluate_run(reranked, dev_labels, ["RR@10"]))["mean"][0])

    return evaluate


# --- reranking ---------------------------------------------------------------------------------------


def rerank_with(
    model: CrossEncoder,
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    config: LabConfig,
    run_name: str,
) -> pl.DataFrame:
    """`run`'s top `rerank_depth` per query reordered by `model` (RUN rows named `run_name`)."""
    scorer = CrossEncoderScorer(model, batch_size=config.score_batch_size, device=config.cet.train.device)
    rerank_config = RerankConfig(depth=config.rerank_depth, run_name=run_name, use_title=config.cet.ranker.use_title)
    return rerank(run, queries, corpus, scorer, rerank_config)


def rerank_lab(
    rankers: pl.DataFrame,
    strong_run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    query_ids: Sequence[str],
    config: LabConfig,
) -> pl.DataFrame:
    """RUN rows: every ranker of the manifest `rankers` (run_name, relevance_path) reranking
    `strong_run`'s top `rerank_depth` for `query_ids`; run_name = the ranker's."""
    wanted = pl.Series(list(query_ids), dtype=pl.String).implode()
    candidates = strong_run.filter(pl.col("query_id").is_in(wanted))
    if candidates.height == 0:
        raise ValueError("CET lab: the strong run has no candidates for the requested queries")
    runs = []
    for run_name, path in rankers.select("run_name", "relevance_path").iter_rows():
        model = CrossEncoder.from_pretrained(path)
        runs.append(rerank_with(model, candidates, queries, corpus, config, run_name))
    return pl.concat(runs) if runs else pl.DataFrame(schema=RUN)
