"""The glue every baseline shares: which model, its inputs, one training loop, reranking.

`MODELS` names each baseline (its run name), how to build it and its loss. `train_baseline`
trains one on (query, positive, negatives) examples - by default drawn from the candidates' top
`train_depth` (= `rerank_depth`): positives judged relevant within it, negatives from it, the task
the model reranks (`negatives.candidate_pairs`); `train_pairs: "negatives"` takes them from the
shared `negatives` asset instead (every judged positive, negatives from BM25's top 100) - with
the shared loop (`dagster_ir.neural.training.train`), reranking the validation queries'
candidates after every epoch and keeping the epoch with the best `selection_measure` (never a
test query). `rerank_with` rescores a candidate run's top `depth`.

Losses: "hinge" = mean over the negatives of max(0, 1 - s(q, d+) + s(q, d-)) (DRMM, KNRM,
Conv-KNRM, MatchPyramid: pairwise hinge in their papers); "softmax" = cross-entropy of the
positive among itself and the negatives (LCE; PACRR, Co-PACRR, DUET, BERT-FirstP/MaxP, CEDR).

PROFILES: "demo" keeps every interaction model tiny (8 query words and 120 document words, which
the `neural_baselines` asset replaces by the collection's own lengths unless told otherwise, small
filter counts, 4 epochs of at most 24 steps of 16 examples, lr 1e-3 constant, KNRM's 1e-1) so all seven train
and rerank in under 2 minutes per training unit on 2 loaded CPU cores (wiki-car: 106 s, Conv-KNRM
the longest); "paper" uses the papers' sizes (Lq 10, Ld 1000, full filter counts, 10 epochs of 64
steps). BERT models: AdamW at `bert_lr` with 10% warm-up and linear decay, weight decay 0.01,
gradients clipped at 1 (the shared cross-encoder fine-tuning's settings); they run on
`bert_threads` (0: every core) and, with `bf16` (the demo profile's choice, for CPUs with AMX or
AVX-512 BF16), under bfloat16 autocast in training and scoring (`runs_on`); the interaction models
run on `threads` in float32.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl
import torch

from dagster_ir.evaluation import evaluate_run
from dagster_ir.methods.baselines.bert_passages import BertPassages, PassageConfig, PassageEncoder
from dagster_ir.methods.baselines.cedr import CEDRKNRM
from dagster_ir.methods.baselines.drmm import DRMM, DRMMConfig
from dagster_ir.methods.baselines.duet import DUET, DUETConfig
from dagster_ir.methods.baselines.knrm import KNRM, ConvKNRM, ConvKNRMConfig, KNRMConfig
from dagster_ir.methods.baselines.matchpyramid import MatchPyramid, MatchPyramidConfig
from dagster_ir.methods.baselines.names import BERT_MODELS, WORD_MODELS
from dagster_ir.methods.baselines.pacrr import PACRR, PACRRConfig, copacrr
from dagster_ir.neural.cross_encoder import CrossEncoder, lce_loss
from dagster_ir.neural.memory import release_freed_memory
from dagster_ir.neural.threads import torch_threads
from dagster_ir.neural.training import TrainConfig, TrainResult, shuffled_batches, train
from dagster_ir.retrieval.fast_bert import bf16_supported
from dagster_ir.retrieval.runs import strictly_decreasing, top_k
from dagster_ir.schemas import NEGATIVES, RUN, validate

Example = tuple[str, str, tuple[str, ...]]  # (query_id, positive doc_id, negative doc_ids)
LOSSES = {
    "drmm": "hinge",
    "knrm": "hinge",
    "conv-knrm": "hinge",
    "matchpyramid": "hinge",
    "pacrr": "softmax",
    "co-pacrr": "softmax",
    "duet": "softmax",
    "bert-firstp": "softmax",
    "bert-maxp": "softmax",
    "cedr-knrm": "softmax",
}
MODELS = WORD_MODELS + BERT_MODELS


@dataclass(frozen=True)
class BaselineConfig:
    """One profile's settings for every baseline (sizes per model in `sizes`)."""

    query_words: int = 10
    doc_words: int = 1000
    n_negatives: int = 1
    epochs: int = 10
    steps_per_epoch: int = 64  # at most this many batches an epoch (every example once when fewer)
    batch_size: int = 16
    lr: float = 1e-3
    lrs: Mapping[str, float] = field(default_factory=dict)  # interaction model -> its learning rate instead of `lr`
    bert_lr: float = 2e-5
    schedule: str = "constant"
    seed: int = 42
    rerank_depth: int = 100
    selection_measure: str = "nDCG@10"
    eval_batch_size: int = 128
    device: str = "cpu"
    threads: int = (
        0  # torch intra-op threads while training and scoring the interaction models; 0 keeps torch's setting
    )
    bert_threads: int = 0  # the same for the BERT models (0: torch's setting, every core)
    bf16: bool = False  # BERT models: bfloat16 autocast for the backbone while training and scoring
    backbone: str = ""  # BERT models: "" = the bundled MiniLM
    bert_max_length: int = 256
    passages: PassageConfig = PassageConfig()
    sizes: Mapping[str, Mapping] = field(default_factory=dict)  # model -> config overrides
    # training pairs: "candidates" = positives judged relevant within the candidates' top train_depth,
    # negatives from that depth (the task reranking sees); "negatives" = the shared negatives asset
    train_pairs: str = "candidates"
    train_depth: int | None = None  # None: rerank_depth

    def __post_init__(self) -> None:
        if self.train_pairs not in ("candidates", "negatives"):
            raise ValueError(
                f"BaselineConfig.train_pairs must be 'candidates' or 'negatives', got {self.train_pairs!r}"
            )
        if self.train_depth is not None and self.train_depth < 1:
            raise ValueError(f"BaselineConfig.train_depth must be >= 1 or None, got {self.train_depth}")
        for name in (
            "query_words",
            "doc_words",
            "n_negatives",
            "epochs",
            "steps_per_epoch",
            "batch_size",
            "rerank_depth",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"BaselineConfig.{name} must be >= 1, got {getattr(self, name)}")
        unknown = sorted(set(self.sizes) - set(MODELS))
        if unknown:
            raise ValueError(f"BaselineConfig.sizes: unknown models {unknown} (have {list(MODELS)})")
        unknown = sorted(set(self.lrs) - set(WORD_MODELS))
        if unknown:
            raise ValueError(
                f"BaselineConfig.lrs: {unknown} are not interaction models (have {list(WORD_MODELS)}; "
                "the BERT models take bert_lr)"
            )
        if any(not rate > 0 for rate in self.lrs.values()):
            raise ValueError(f"BaselineConfig.lrs: learning rates must be > 0, got {dict(self.lrs)}")


PROFILES: dict[str, BaselineConfig] = {
    "demo": BaselineConfig(
        query_words=8,
        doc_words=120,
        epochs=4,
        steps_per_epoch=24,
        batch_size=16,
        lr=1e-3,
        rerank_depth=20,
        # KNRM trains only w . phi + b (12 weights over fixed vectors): at 1e-3 it barely moves in 96 steps (Cranfield,
        # 5 validation folds, nDCG@10 of the kept epoch: 1e-3 .273 with the last epoch best in 3, 1e-2 .292,
        # 1e-1 .296; BM25 .322), so it gets 1e-1, chosen there
        lrs={"knrm": 1e-1},
        threads=1,
        bert_threads=0,
        bf16=True,
        bert_max_length=128,
        passages=PassageConfig(passage_words=60, stride=30, max_passages=3),
        sizes={
            "conv-knrm": {"filters": 16},
            "pacrr": {"filters": 8, "combine": 16},
            "co-pacrr": {"filters": 8, "combine": 16},
            "duet": {"filters": 16, "hidden": 16, "pool": 20},
            "matchpyramid": {"filters": 8, "hidden": 16},
        },
    ),
    "paper": BaselineConfig(),
}


def profile(name: str) -> BaselineConfig:
    if name not in PROFILES:
        raise ValueError(f"unknown baselines profile {name!r} (have {sorted(PROFILES)})")
    return PROFILES[name]


def build_word_model(name: str, vectors: np.ndarray, config: BaselineConfig) -> torch.nn.Module:
    """A freshly initialised interaction model (seeded by config.seed)."""
    sizes = dict(config.sizes.get(name, {}))
    torch.manual_seed(config.seed)
    if name == "drmm":
        return DRMM(vectors, replace(DRMMConfig(), **sizes))
    if name == "knrm":
        return KNRM(vectors, replace(KNRMConfig(), **sizes))
    if name == "conv-knrm":
        return ConvKNRM(vectors, replace(ConvKNRMConfig(), **sizes))
    if name == "matchpyramid":
        return MatchPyramid(vectors, replace(MatchPyramidConfig(), **sizes))
    if name in ("pacrr", "co-pacrr"):
        base = replace(PACRRConfig(query_words=config.query_words), **sizes)
        return PACRR(vectors, base) if name == "pacrr" else copacrr(vectors, base)
    if name == "duet":
        return DUET(vectors, replace(DUETConfig(query_words=config.query_words, doc_words=config.doc_words), **sizes))
    raise ValueError(f"unknown interaction model {name!r} (have {list(WORD_MODELS)})")


def build_bert_model(name: str, config: BaselineConfig) -> tuple[torch.nn.Module, PassageEncoder]:
    """A BERT baseline and its passage encoder (backbone `config.backbone`, head seeded by config.seed)."""
    if name not in BERT_MODELS:
        raise ValueError(f"unknown BERT model {name!r} (have {list(BERT_MODELS)})")
    cross = CrossEncoder.from_pretrained(config.backbone, max_length=config.bert_max_length, seed=config.seed)
    passages = replace(config.passages, aggregation="first" if name == "bert-firstp" else "max")
    torch.manual_seed(config.seed)
    model = CEDRKNRM(cross) if name == "cedr-knrm" else BertPassages(cross, passages)
    return model, PassageEncoder(cross, passages)


def examples_from_negatives(negatives: pl.DataFrame, query_ids: Sequence[str], n_negatives: int) -> list[Example]:
    """One example per (query, positive) of `query_ids`: its first `n_negatives` negatives by sample_no (cycled)."""
    validate(negatives, NEGATIVES, "negatives")
    wanted = pl.Series(list(query_ids), dtype=pl.String).implode()
    grouped = (
        negatives.filter(pl.col("query_id").is_in(wanted))
        .sort("query_id", "pos_doc_id", "sample_no")
        .group_by("query_id", "pos_doc_id", maintain_order=True)
        .agg("neg_doc_id")
    )
    return [(q, p, tuple(itertools.islice(itertools.cycle(n), n_negatives))) for q, p, n in grouped.iter_rows()]


def pairwise_loss(scores: torch.Tensor, kind: str) -> torch.Tensor:
    """scores (B, 1 + n), the positive first: mean hinge (margin 1) or softmax cross-entropy."""
    if kind == "hinge":
        return torch.clamp(1.0 - scores[:, :1] + scores[:, 1:], min=0.0).mean()
    if kind == "softmax":
        return lce_loss(scores)
    raise ValueError(f"unknown loss {kind!r} (hinge, softmax)")


def score_pairs(model: torch.nn.Module, encoder, pairs: Sequence[tuple[str, str]]) -> torch.Tensor:
    """Scores of (query_id, doc_id) pairs as one batch, on the model's device (gradients flow)."""
    device = next(model.parameters()).device
    return model({k: v.to(device) for k, v in encoder.batch(pairs).items()})


def runs_on(name: str, config: BaselineConfig) -> tuple[int, bool]:
    """(torch threads, bfloat16 autocast) for model `name`: the BERT models' settings or the interaction models'."""
    return (config.bert_threads, config.bf16) if name in BERT_MODELS else (config.threads, False)


def check_precision(config: BaselineConfig) -> list[str]:
    """Warnings about `config.bf16`: on a CPU without native bfloat16 (AVX-512 BF16, AMX) it is emulated, slower than fp32."""
    if config.bf16 and torch.device(config.device).type == "cpu" and not bf16_supported():
        return [
            "bf16=True on a CPU without native bfloat16 arithmetic (AVX-512 BF16 or AMX): the BERT baselines "
            "run emulated, slower than float32; set bf16: false for speed (the scores change slightly)"
        ]
    return []


def rerank_with(
    model: torch.nn.Module,
    encoder,
    candidates: pl.DataFrame,
    query_ids: Sequence[str],
    depth: int,
    run_name: str,
    batch_size: int = 128,
    threads: int = 0,
    bf16: bool = False,
) -> pl.DataFrame:
    """The candidates' top `depth` of `query_ids` rescored by `model` and re-ranked (RUN; ties keep the first-stage
    order, tied scores nudged down a few float64 steps so evaluators keep it: `strictly_decreasing`).

    `bf16`: the model runs under bfloat16 autocast (scores are cast back to float64 either way).
    """
    wanted = pl.Series(list(query_ids), dtype=pl.String).implode()
    chosen = top_k(candidates.filter(pl.col("query_id").is_in(wanted)), depth)
    pairs = list(zip(chosen["query_id"], chosen["doc_id"], strict=True))
    scores = np.zeros(len(pairs))
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        with (
            torch.inference_mode(),
            torch_threads(threads),
            torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16),
        ):
            for start in range(0, len(pairs), batch_size):
                scores[start : start + batch_size] = (
                    score_pairs(model, encoder, pairs[start : start + batch_size]).double().cpu().numpy()
                )
    finally:
        model.train(was_training)
    rescored = chosen.select("query_id", "doc_id", pl.Series("score", scores), first_rank=pl.col("rank"))
    return strictly_decreasing(
        rescored.sort(["query_id", "score", "first_rank"], descending=[False, True, False])
        .with_columns(rank=(pl.int_range(pl.len()).over("query_id") + 1).cast(pl.Int32), run_name=pl.lit(run_name))
        .select(list(RUN))
    ).sort(["query_id", "rank"])


def mean_measure(run: pl.DataFrame, qrels: pl.DataFrame, query_ids: Sequence[str], measure: str) -> float:
    """Mean of `measure` over the judged queries among `query_ids` (unanswered ones count 0)."""
    judged = qrels.filter(pl.col("query_id").is_in(pl.Series(list(query_ids), dtype=pl.String).implode()))
    if judged.height == 0:
        raise ValueError(f"mean_measure: none of the {len(query_ids)} queries has qrels; cannot compute {measure}")
    return float(evaluate_run(run, judged, [measure])["value"].mean())


def train_baseline(
    name: str,
    model: torch.nn.Module,
    encoder,
    examples: Sequence[Example],
    config: BaselineConfig,
    checkpoint_dir,
    evaluate: Callable[[torch.nn.Module], float] | None = None,
) -> TrainResult:
    """Train `model` (in place) with the shared loop; with `evaluate`, the best epoch's weights are kept."""
    if not examples:
        raise ValueError(
            f"train_baseline: no training examples for {name} (no training query has a positive and a negative)"
        )
    kind = LOSSES[name]
    sampling = name == "bert-maxp"  # MaxP trains on one passage of each document (Dai and Callan); CEDR on all

    def make_batches(epoch: int, rng: np.random.Generator) -> list:
        if sampling:
            encoder.rng = np.random.default_rng([config.seed, epoch, 7])
        return shuffled_batches(examples, config.batch_size, rng)[: config.steps_per_epoch]

    def loss_fn(module: torch.nn.Module, batch: Sequence[Example]):
        width = 1 + config.n_negatives
        pairs = [(q, d) for q, pos, negs in batch for d in (pos, *negs)]
        if sampling:
            encoder.sample_passage = True
        try:
            scores = score_pairs(module, encoder, pairs).reshape(len(batch), width)
        finally:
            if sampling:
                encoder.sample_passage = False
        accuracy = float((scores[:, :1] > scores[:, 1:]).float().mean())
        return pairwise_loss(scores, kind), {"accuracy": accuracy}

    bert = name in BERT_MODELS
    threads, bf16 = runs_on(name, config)
    loop = TrainConfig(
        lr=learning_rate(name, config),
        warmup_ratio=0.1 if bert else 0.0,
        schedule="linear" if bert else config.schedule,
        weight_decay=0.01 if bert else 0.0,
        epochs=config.epochs,
        batch_size=config.batch_size,
        seed=config.seed,
        max_grad_norm=1.0 if bert else None,
        device=config.device,
        bf16=bf16,
        # CEDR reads the backbone's layers, not its score head (or pooler): under DDP those
        # parameters get no gradient, which DDP must be told (no effect in one process)
        find_unused_parameters=name == "cedr-knrm",
    )
    # BERT steps allocate activations of a new shape each time (dynamic padding), which glibc's heap
    # keeps resident: give them back after every step (a few ms against a step's seconds)
    on_log = (lambda step, logs: release_freed_memory(collect=False)) if bert else None
    with torch_threads(threads):
        return train(model, make_batches, loss_fn, loop, checkpoint_dir, evaluate=evaluate, on_log=on_log)


def learning_rate(name: str, config: BaselineConfig) -> float:
    """Model `name`'s learning rate: `bert_lr` for the BERT models, else its entry in `lrs`, else `lr`."""
    return config.bert_lr if name in BERT_MODELS else config.lrs.get(name, config.lr)


def validation_evaluator(
    name: str, encoder, candidates: pl.DataFrame, qrels: pl.DataFrame, query_ids: Sequence[str], config: BaselineConfig
) -> Callable[[torch.nn.Module], float] | None:
    """The epoch-choosing callback for model `name`: rerank the validation queries, mean `selection_measure`
    (None without queries)."""
    if not query_ids:
        return None
    threads, bf16 = runs_on(name, config)

    def evaluate(module: torch.nn.Module) -> float:
        run = rerank_with(
            module,
            encoder,
            candidates,
            query_ids,
            config.rerank_depth,
            "validation",
            config.eval_batch_size,
            threads,
            bf16,
        )
        return mean_measure(run, qrels, query_ids, config.selection_measure)

    return evaluate
