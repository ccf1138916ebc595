"""The CET lab: naive, the baselines and CET trained on sparse labels, reranking a strong retriever.

Every ranker is the same cross-encoder trained by the same loop (`cet.train_ranker`) on triples
from the sparse training labels; they differ in their negatives and, for CET, the loss. Run names:

* ``naive``: negatives uniformly from the strong retriever's top `negative_depth` (hard negatives,
  false negatives included) - the paper's "ANCE + BERT".
* ``zhan``: negatives from the basic retriever (BM25) instead; it still reranks the strong
  retriever's candidates (Zhan et al.'s training-evaluating inconsistency).
* ``bm25+bert``: zhan's ranker reranking the basic retriever's candidates (Table 1's first row:
  BM25 negatives, BM25 candidates) - no training of its own.
* ``rocketqa``: naive's R is the first ranker; candidates it scores above eta (on its own raw
  score scale) are not used as negatives (`baselines.denoised_negatives`). Unless `eta` is set,
  one ranker ``rocketqa-q<x>`` is trained per grid value (eta = the x-quantile of naive's scores of
  its own first-epoch negatives) and the one with the best dev MRR@10 becomes ``rocketqa``.
* ``rance``: negatives drawn by RANCE's rank weights from p_rel(r), estimated on the densely
  judged dev queries (`baselines`).
* ``dml``: naive's negatives, DML's loss (`dml`), one negative per positive as the CET paper sets it.
* ``cet``: naive's negatives, CET's coupled loss (R and S); ``cet-tau<x>``: the same with tau = x.

Negatives are drawn afresh every epoch (`LabConfig.resample`), epoch e with the seed derived from
(negative_seed, e), for every method alike: naive, dml and cet see the same draws each epoch.
After training, each ranker reranks the dev queries and its MRR@10 there (against the dense dev
judgments by default) is recorded: it picks rocketqa's eta, the best baseline (`report`) and draws
the tau and eta sweeps (Figure 4). The test split is never used for a choice. With `select_on_dev`
the start (R: the backbone's cross-encoder; S untrained) is scored on dev first and kept when no
epoch scores above it (`chosen_epoch` 0, its `start_score`; `dev_score` the kept weights').

Every ranker's R starts from the same initialisation (the score head seeded by the training seed).
Checkpoints land in ``out_dir/<run name>/relevance`` (and ``selection``), Hugging Face folders, with
the loop's resumable state in ``out_dir/<run name>/training_state/<fingerprint>``: the fingerprint
hashes the settings and the negatives, so an interrupted run resumes and changed inputs start
afresh. Once every ranker of the lab is trained and saved, the states are removed (they held three
quarters of the lab's disk: about 1.4 GB a training unit on Cranfield). `rerank_lab` reranks the
strong retriever's top `rerank_depth` with each R.

The dense judgments are read only to estimate RANCE's curve (dev queries) and to report, as a
diagnostic, which share of each ranker's training negatives is in fact relevant.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import polars as pl
import torch

from dagster_ir.methods.cet.baselines import (
    DenoiseConfig,
    RanceConfig,
    denoised_negatives,
    rance_rank_weights,
    relevance_by_rank,
    sample_negatives_by_rank,
)
from dagster_ir.methods.cet.model import (
    METHODS,
    CetConfig,
    CoupledRanker,
    LabConfig,
    QueryPairs,
    TokenizedTexts,
    document_texts,
    query_pairs,
    query_texts,
    save_ranker,
    tau_run_name,
    train_ranker,
    with_tau,
)
from dagster_ir.negatives.sampling import NegativeConfig, epoch_seed, false_negative_share, sample_negatives
from dagster_ir.neural.cross_encoder import CrossEncoder
from dagster_ir.neural.rerank import CrossEncoderScorer, RerankConfig, rerank
from dagster_ir.neural.training import TrainResult, against_start
from dagster_ir.schemas import QRELS, RUN, Schema, validate
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


BM25_BERT = "bm25+bert"
SWEEPS = ("tau", "eta")


@dataclass(frozen=True)
class RankerSpec:
    """One ranker of the lab: its run name, how its negatives are drawn, and its training config.

    `table`: a row of Table 1 (the sweep variants are not); `sweep` ("tau", "eta" or ""): a point of
    that sweep, at `sweep_value` (tau, or eta's quantile).
    """

    run_name: str
    method: str
    config: CetConfig
    table: bool = True
    sweep: str = ""
    sweep_value: float | None = None


def eta_run_name(quantile: float) -> str:
    """ "rocketqa-q0.9" for the ranker trained with eta at naive's 0.9-quantile."""
    return f"rocketqa-q{quantile:g}"


def lab_rankers(config: LabConfig) -> list[RankerSpec]:
    """The rankers `config` asks for, in training order (naive before rocketqa), tau variants last."""
    specs = []
    for method in (m for m in METHODS if m in config.methods):
        if method == "rocketqa" and config.eta is None:
            specs += [RankerSpec(eta_run_name(q), method, config.cet, False, "eta", q) for q in config.eta_quantiles]
        elif method == "cet":
            specs.append(RankerSpec("cet", "cet", config.cet, True, "tau" if config.taus else "", config.cet.tau))
        else:
            specs.append(RankerSpec(method, method, config.cet))
    specs += [
        RankerSpec(tau_run_name(t), "cet", with_tau(config.cet, t), False, "tau", t)
        for t in config.taus
        if t != config.cet.tau
    ]
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
    best_epoch: int  # the best epoch (0-based), kept unless the start scored above it
    fingerprint: str
    candidates: str = ""  # the candidate run it reranks
    table: bool = True  # a row of Table 1
    sweep: str = ""  # "tau" / "eta": a point of that sweep
    sweep_value: float | None = None
    dev_mrr10: float | None = None  # MRR@10 reranking the dev queries (LabConfig.dev_judgments)
    notes: dict[str, float] = field(default_factory=dict)  # e.g. rocketqa's eta, rejected counts
    result: TrainResult | None = None
    chosen_epoch: int | None = None  # the weights kept: 0 the untrained start, else the 1-based epoch
    start_score: float | None = None  # the start's dev MRR@10 on the sparse labels (None: not scored)
    dev_score: float | None = None  # the kept weights' dev MRR@10 on the sparse labels (what chose them)

    def row(self) -> dict[str, object]:
        """The manifest row (everything but the curves)."""
        row = {k: v for k, v in asdict(self).items() if k not in ("result", "notes")}
        return {**row, "notes": json.dumps(self.notes, sort_keys=True)}


MANIFEST_SCHEMA: Schema = {
    "run_name": pl.String, "method": pl.String, "tau": pl.Float64, "relevance_path": pl.String,
    "selection_path": pl.String, "queries": pl.Int64, "pairs": pl.Int64, "false_negative_share": pl.Float64,
    "steps": pl.Int64, "seconds": pl.Float64, "examples_per_s": pl.Float64, "final_loss": pl.Float64,
    "best_epoch": pl.Int64, "fingerprint": pl.String, "candidates": pl.String, "table": pl.Boolean,
    "sweep": pl.String, "sweep_value": pl.Float64, "dev_mrr10": pl.Float64, "notes": pl.String,
    "chosen_epoch": pl.Int64, "start_score": pl.Float64, "dev_score": pl.Float64,
}  # fmt: skip


def manifest(rankers: Sequence[TrainedRanker]) -> pl.DataFrame:
    """One row per trained ranker (MANIFEST_SCHEMA)."""
    return pl.DataFrame([r.row() for r in rankers], schema=MANIFEST_SCHEMA, orient="row")


# --- negatives per method --------------------------------------------------------------------------


def lab_negatives(
    method: str,
    data: LabData,
    config: LabConfig,
    first_ranker: CrossEncoder | Callable[[pl.DataFrame], np.ndarray] | None = None,
    epoch: int = 0,
    eta: float | None = None,
) -> tuple[pl.DataFrame, dict[str, float]]:
    """(NEGATIVES, notes) of epoch `epoch` for `method`'s training queries.

    rocketqa needs the naive R (or a scorer of (query_id, doc_id) rows) as `first_ranker` and a
    threshold `eta` (default `config.eta`). The seed is derived from (negative_seed, epoch) when
    `config.resample`, else negative_seed for every epoch.
    """
    train = list(data.train_query_ids)
    labels = data.sparse_qrels
    seed = epoch_seed(config.negative_seed, epoch) if config.resample else config.negative_seed
    if method in ("naive", "cet", "zhan", "dml"):  # cet, dml: the same negatives as naive
        run = data.run(config.basic_run if method == "zhan" else config.strong_run)
        negative_config = NegativeConfig("random", config.pair_depth, config.n_per_positive, seed)
        return sample_negatives(run, labels, train, negative_config).negatives, {}
    if method == "rance":
        rance = RanceConfig(config.pair_depth, config.rance_smoothing, config.rance_gain_k, config.n_per_positive, seed)
        if not data.dev_query_ids:
            raise ValueError("CET lab: rance estimates its curve on the dev queries, and there are none")
        curve = relevance_by_rank(data.run(config.strong_run), data.dense_qrels, data.dev_query_ids, rance.depth)
        weights = rance_rank_weights(curve, rance)
        sample = sample_negatives_by_rank(data.run(config.strong_run), labels, train, weights, rance)
        return sample.negatives, {"dev_p_relevant_at_1": float(curve["p_relevant"][0])}
    if method == "rocketqa":
        if first_ranker is None:
            raise ValueError("CET lab: rocketqa needs the naive ranker as its first ranker")
        eta = config.eta if eta is None else eta
        if eta is None:
            raise ValueError("CET lab: rocketqa needs a threshold eta (set LabConfig.eta or sweep eta_quantiles)")
        denoise = DenoiseConfig(config.pair_depth, config.n_per_positive, eta, seed)
        scorer = _pair_scorer(first_ranker, data, config) if isinstance(first_ranker, CrossEncoder) else first_ranker
        result = denoised_negatives(data.run(config.strong_run), labels, train, scorer, denoise)
        return result.sample.negatives, {"eta": eta, "rejected": float(result.rejected)}
    raise ValueError(f"CET lab: unknown method {method!r}")


class MemoScorer:
    """A pair scorer that scores each (query_id, doc_id) once and remembers it (rocketqa's epochs)."""

    def __init__(self, score: Callable[[pl.DataFrame], np.ndarray]) -> None:
        self.score = score
        self.values: dict[tuple[str, str], float] = {}

    def __call__(self, pairs: pl.DataFrame) -> np.ndarray:
        keys = list(pairs.select("query_id", "doc_id").iter_rows())
        missing = list(dict.fromkeys(k for k in keys if k not in self.values))
        if missing:
            frame = pl.DataFrame(missing, schema={"query_id": pl.String, "doc_id": pl.String}, orient="row")
            self.values.update(zip(missing, np.asarray(self.score(frame), dtype=float).tolist()))
        return np.array([self.values[k] for k in keys], dtype=float)


def eta_grid(
    negatives: pl.DataFrame, scorer: Callable[[pl.DataFrame], np.ndarray], quantiles: Sequence[float]
) -> dict[float, float]:
    """quantile -> eta: the quantiles of the first ranker's raw scores of `negatives` (naive's first
    epoch: a uniform sample of the pools)."""
    pairs = negatives.select("query_id", doc_id="neg_doc_id").unique(maintain_order=True)
    if pairs.height == 0:
        raise ValueError("CET lab: no negatives to place rocketqa's eta grid on")
    scores = scorer(pairs)
    return {q: float(np.quantile(scores, q)) for q in quantiles}


def _pair_scorer(model: CrossEncoder, data: LabData, config: LabConfig) -> Callable[[pl.DataFrame], np.ndarray]:
    """Scores (query_id, doc_id) rows with `model`, looking the texts up on demand."""
    scorer = CrossEncoderScorer(
        model, batch_size=config.score_batch_size, device=config.cet.train.device, bf16=config.cet.train.bf16
    )
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
    """Train every ranker of `config` (see the module docstring); returns them in training order,
    with the aliases ``rocketqa`` (the eta chosen on dev) and ``bm25+bert`` (zhan on the basic run)."""
    out_dir = Path(out_dir)
    trained: list[TrainedRanker] = []
    draws: dict[tuple[str, float | None, int], tuple[pl.DataFrame, dict[str, float]]] = {}
    scorer: MemoScorer | None = None
    etas: dict[float, float] = {}

    def draw(kind: str, eta: float | None) -> Callable[[int], tuple[pl.DataFrame, dict[str, float]]]:
        def at(epoch: int) -> tuple[pl.DataFrame, dict[str, float]]:
            epoch = epoch if config.resample else 0
            if (kind, eta, epoch) not in draws:
                draws[kind, eta, epoch] = lab_negatives(kind, data, config, scorer, epoch, eta)
            return draws[kind, eta, epoch]

        return at

    for spec in lab_rankers(config):
        kind = "naive" if spec.method in ("cet", "dml") else spec.method
        eta = None
        if spec.method == "rocketqa":
            eta = config.eta if spec.sweep != "eta" else etas[spec.sweep_value]
        model, ranker = _train_one(spec, draw(kind, eta), data, config, out_dir, on_log)
        if spec.method == "naive" and "rocketqa" in config.methods:
            scorer = MemoScorer(_pair_scorer(model.relevance, data, config))
            if config.eta is None:
                etas = eta_grid(draw("naive", None)(0)[0], scorer, config.eta_quantiles)
        trained.append(ranker)
    for ranker in trained:  # every ranker is saved: the resumable states are done with (about 180 MB each)
        shutil.rmtree(out_dir / ranker.run_name / STATE_DIR, ignore_errors=True)
    return trained + _aliases(trained, config)


def _aliases(trained: Sequence[TrainedRanker], config: LabConfig) -> list[TrainedRanker]:
    """The rocketqa row (the eta variant with the best dev MRR@10) and the bm25+bert row (zhan's R)."""
    from dataclasses import replace

    extra = []
    variants = [r for r in trained if r.sweep == "eta"]
    if variants:
        best = max(variants, key=lambda r: (_score_or_low(r.dev_mrr10), -(r.sweep_value or 0.0)))
        extra.append(
            replace(
                best,
                run_name="rocketqa",
                table=True,
                sweep="",
                sweep_value=None,
                notes={**best.notes, "eta_quantile": float(best.sweep_value or 0.0)},
            )
        )
    zhan = next((r for r in trained if r.run_name == "zhan"), None)
    if zhan is not None and config.bm25_bert:
        extra.append(replace(zhan, run_name=BM25_BERT, candidates=config.basic_run, dev_mrr10=None, result=None))
    return extra


def _score_or_low(value: float | None) -> float:
    return value if value is not None and np.isfinite(value) else -np.inf


class _EpochExamples:
    """Examples per epoch from a per-epoch draw of negatives, tokenising new texts as they appear."""

    def __init__(
        self,
        draw: Callable[[int], tuple[pl.DataFrame, dict[str, float]]],
        model: CrossEncoder,
        data: LabData,
        use_title: bool,
    ) -> None:
        self.draw, self.model, self.data, self.use_title = draw, model, data, use_title
        self.texts = TokenizedTexts(queries={}, docs={})
        self.epochs: dict[int, pl.DataFrame] = {}
        self.notes: dict[int, dict[str, float]] = {}

    def negatives(self, epoch: int) -> pl.DataFrame:
        if epoch not in self.epochs:
            negatives, notes = self.draw(epoch)
            self._tokenize(negatives)
            self.epochs[epoch], self.notes[epoch] = negatives, notes
        return self.epochs[epoch]

    def __call__(self, epoch: int) -> list[QueryPairs]:
        return query_pairs(self.negatives(epoch))

    def _tokenize(self, negatives: pl.DataFrame) -> None:
        queries = [q for q in negatives["query_id"].unique().to_list() if q not in self.texts.queries]
        docs = pl.concat([negatives["pos_doc_id"], negatives["neg_doc_id"]]).unique().to_list()
        docs = [d for d in docs if d not in self.texts.docs]
        if queries:
            frame = query_texts(self.data.queries, queries)
            self.texts.queries.update(zip(frame["query_id"], self.model.tokenize(frame["text"].to_list()), strict=True))
        if docs:
            frame = document_texts(self.data.corpus, docs, self.use_title)
            tokens = [ids[: self.model.max_length] for ids in self.model.tokenize(frame["text"].to_list())]
            self.texts.docs.update(zip(frame["doc_id"], tokens, strict=True))


def _train_one(
    spec: RankerSpec,
    draw: Callable[[int], tuple[pl.DataFrame, dict[str, float]]],
    data: LabData,
    config: LabConfig,
    out_dir: Path,
    on_log: Callable[[str, int, dict[str, float]], None] | None,
) -> tuple[CoupledRanker, TrainedRanker]:
    model = CoupledRanker.build(spec.config.ranker, coupled=spec.method == "cet", seed=spec.config.train.seed)
    examples = _EpochExamples(draw, model.relevance, data, spec.config.ranker.use_title)
    first = examples.negatives(0)
    fingerprint = _fingerprint(spec, first, config)
    state = _state_dir(out_dir / spec.run_name, fingerprint)
    evaluate = _dev_evaluator(data, config) if config.select_on_dev else None
    log = (lambda step, logs: on_log(spec.run_name, step, logs)) if on_log else None
    loss = "dml" if spec.method == "dml" else None
    # the start (the backbone's cross-encoder, an untrained selection model) competes with the epochs on dev
    result, start_score, kept_start = against_start(
        model,
        evaluate,
        partial(
            train_ranker, model, examples, examples.texts, spec.config, state, evaluate=evaluate, on_log=log, loss=loss
        ),
        keep_start=config.select_start,
    )
    folders = save_ranker(model, out_dir / spec.run_name)
    drawn = pl.concat([examples.epochs[e] for e in sorted(examples.epochs)])
    notes = dict(examples.notes[0])
    if "rejected" in notes:
        notes["rejected"] = float(sum(n.get("rejected", 0.0) for n in examples.notes.values()))
    notes["epochs_drawn"] = float(len(examples.epochs))
    notes.update(_clamp_notes(result))
    ranker = TrainedRanker(
        run_name=spec.run_name,
        method=spec.method,
        tau=spec.config.tau if spec.method == "cet" else None,
        relevance_path=str(folders.relevance),
        selection_path=str(folders.selection) if folders.selection else None,
        queries=first["query_id"].n_unique(),
        pairs=first.height,
        false_negative_share=false_negative_share(drawn, data.dense_qrels),
        steps=result.steps,
        seconds=result.seconds,
        examples_per_s=result.examples_per_s,
        final_loss=result.loss_curve[-1] if result.loss_curve else float("nan"),
        best_epoch=result.best_epoch,
        chosen_epoch=0 if kept_start else result.best_epoch + 1,
        start_score=start_score,
        dev_score=start_score if kept_start else (result.dev_scores[result.best_epoch] if result.dev_scores else None),
        fingerprint=fingerprint,
        candidates=config.strong_run,
        table=spec.table,
        sweep=spec.sweep,
        sweep_value=spec.sweep_value,
        dev_mrr10=dev_mrr10(
            model.relevance, data, config, reranked=evaluate.kept_run(result, kept_start) if evaluate else None
        ),
        notes=notes,
        result=result,
    )
    return model, ranker


def _clamp_notes(result: TrainResult) -> dict[str, float]:
    """How often CET's weight clamp bound: the mean and the largest per-step share of clamped weights."""
    clamped = result.log_curves.get("clamped", [])
    if not clamped:
        return {}
    return {"clamped_share": float(np.mean(clamped)), "clamped_max": float(np.max(clamped))}


def dev_mrr10(
    model: CrossEncoder,
    data: LabData,
    config: LabConfig,
    candidates: str | None = None,
    reranked: pl.DataFrame | None = None,
) -> float | None:
    """MRR@10 of `model` reranking the dev queries' candidates (default: the strong run), against
    the dense or sparse dev judgments (`config.dev_judgments`); None without dev queries.
    `reranked`: that reranking already made (by the same weights), scored instead of reranking again."""
    from dagster_ir.evaluation import aggregate, evaluate_run

    if not data.dev_query_ids:
        return None
    dev = pl.Series(list(data.dev_query_ids), dtype=pl.String).implode()
    judgments = data.dense_qrels if config.dev_judgments == "dense" else data.sparse_qrels
    labels = judgments.filter(pl.col("query_id").is_in(dev))
    run = data.run(candidates or config.strong_run).filter(pl.col("query_id").is_in(dev))
    if run.height == 0 or labels.height == 0:
        return None
    if reranked is None:
        reranked = rerank_with(model, run, data.queries, data.corpus, config, "dev")
    return float(aggregate(evaluate_run(reranked, labels, ["RR@10"]))["mean"][0])


def _fingerprint(spec: RankerSpec, negatives: pl.DataFrame, config: LabConfig) -> str:
    """A short hash of the ranker's settings and its first epoch's training triples (later epochs'
    follow from the same settings and inputs)."""
    settings = json.dumps(
        {
            "method": spec.method,
            "config": asdict(spec.config),
            "resample": config.resample,
            "negative_seed": config.negative_seed,
        },
        sort_keys=True,
        default=str,
    )
    digest = hashlib.blake2b(settings.encode(), digest_size=8)
    digest.update(frame_version(negatives.sort(list(negatives.columns))).encode())
    return digest.hexdigest()


def _state_dir(ranker_dir: Path, fingerprint: str) -> Path:
    """ranker_dir/training_state/<fingerprint>, other fingerprints' (stale) states removed unless in use."""
    folder = ranker_dir / STATE_DIR / fingerprint
    remove_unlocked_siblings(folder)
    return folder


class _DevEvaluator:
    """`select_on_dev`'s callback: MRR@10 of R's reranking of the dev queries (the strong run's top
    `rerank_depth`) against their sparse labels (all a trainer has). It keeps its rerankings in call
    order (the start's first, then one per epoch), so the dev MRR@10 reported against the dense
    judgments reuses the kept weights' instead of reranking again."""

    def __init__(self, data: LabData, config: LabConfig) -> None:
        dev = pl.Series(list(data.dev_query_ids), dtype=pl.String).implode()
        self.dev_run = data.run(config.strong_run).filter(pl.col("query_id").is_in(dev))
        self.dev_labels = data.sparse_qrels.filter(pl.col("query_id").is_in(dev))
        if self.dev_run.height == 0 or self.dev_labels.height == 0:
            raise ValueError("CET lab: select_on_dev needs dev queries with candidates and sparse labels")
        self.data, self.config = data, config
        self.runs: list[pl.DataFrame] = []

    def __call__(self, model: torch.nn.Module) -> float:
        from dagster_ir.evaluation import aggregate, evaluate_run

        reranked = rerank_with(model.relevance, self.dev_run, self.data.queries, self.data.corpus, self.config, "dev")
        self.runs.append(reranked)
        return float(aggregate(evaluate_run(reranked, self.dev_labels, ["RR@10"]))["mean"][0])

    def kept_run(self, result: TrainResult, kept_start: bool) -> pl.DataFrame | None:
        """The reranking by the weights kept (the start's when `kept_start`), when the start and every
        epoch were scored here (not after a resume, which scores fewer epochs)."""
        if len(self.runs) != 1 + len(result.dev_scores) or not result.dev_scores:
            return None
        return self.runs[0] if kept_start else self.runs[1 + result.best_epoch]


def _dev_evaluator(data: LabData, config: LabConfig) -> _DevEvaluator:
    return _DevEvaluator(data, config)


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
    scorer = CrossEncoderScorer(
        model, batch_size=config.score_batch_size, device=config.cet.train.device, bf16=config.cet.train.bf16
    )
    rerank_config = RerankConfig(depth=config.rerank_depth, run_name=run_name, use_title=config.cet.ranker.use_title)
    return rerank(run, queries, corpus, scorer, rerank_config)


def rerank_lab(
    rankers: pl.DataFrame,
    candidate_runs: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    query_ids: Sequence[str],
    config: LabConfig,
) -> pl.DataFrame:
    """RUN rows: every Table 1 ranker of the manifest `rankers` (run_name, relevance_path, and
    `candidates` / `table` when present) reranking its candidate run's top `rerank_depth` (default
    the strong run) for `query_ids`; run_name = the ranker's. Sweep variants are left out."""
    wanted = pl.Series(list(query_ids), dtype=pl.String).implode()
    if "table" in rankers.columns:
        rankers = rankers.filter(pl.col("table"))
    if "candidates" not in rankers.columns:
        rankers = rankers.with_columns(candidates=pl.lit(config.strong_run))
    runs = []
    for run_name, path, source in rankers.select("run_name", "relevance_path", "candidates").iter_rows():
        source = source or config.strong_run
        candidates = candidate_runs.filter((pl.col("run_name") == source) & pl.col("query_id").is_in(wanted))
        if candidates.height == 0:
            raise ValueError(f"CET lab: the {source!r} run has no candidates for the requested queries")
        model = CrossEncoder.from_pretrained(path)
        runs.append(rerank_with(model, candidates, queries, corpus, config, run_name))
    return pl.concat(runs) if runs else pl.DataFrame(schema=RUN)
