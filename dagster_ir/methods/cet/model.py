"""CET: coupled relevance and selection models against pooling bias (Cai et al., CIKM 2022).

A relevance model R and a selection model S - the same cross-encoder architecture with separate
parameters - are trained together on triples (q, d_i labelled positive, d_j unlabelled negative).
Each estimates the inverse-propensity weight of the other's pairwise loss with its current
parameters (equations 18-21):

    w_r = exp(S(q, d_j) / tau) / exp(S(q, d_i) / tau)     L'(R) = -w_r log sigma(R(q, d_i) - R(q, d_j))
    w_s = exp(R(q, d_j) / tau) / exp(R(q, d_i) / tau)     L'(S) = -w_s log sigma(S(q, d_i) - S(q, d_j))

summed over a query's pairs and averaged over the queries of the batch. Only R ranks; S is kept for
analysis. Implementation choices:

* **No gradient through the weights.** w_r and w_s are computed from the scores of the same
  forward pass and detached (`bias_weights`), so L'(R) moves only R and L'(S) only S.
* **Numerical guard (optional).** A weight is computed in log space, (s_j - s_i) / tau, and, when
  `max_weight` is set, clamped above at log(max_weight) before it is exponentiated (in float32): it
  is then finite, in (0, max_weight], and a pair whose weight underflows to 0 simply contributes
  nothing. `max_weight` caps how much one pair can dominate a batch when the other model scores a
  negative far above the positive. The paper has no clamp: the `paper` profile sets
  `max_weight=None` (the weight is the plain exp); the `demo` profile keeps 100. The share of
  weights the clamp cut is logged per step (`clamped`) and reported per ranker.
* **One optimizer.** Both models live in one module (`CoupledRanker`) trained by the shared loop
  (`dagster_ir.neural.training.train`) with one AdamW over both parameter sets and the loss L'(R) + L'(S). The weights
  being constants, the gradient of the sum with respect to R's parameters is that of L'(R) and
  likewise for S, and AdamW's update is per parameter: this is exactly two AdamW optimizers with
  the same settings, both stepped every batch - except gradient-norm clipping, which the loop
  applies to the joint gradient; the paper profile disables clipping (`max_grad_norm=None`).
* **Weights under dropout.** The weights come from the training forward pass (dropout active)
  rather than a second pass in eval mode, which would double the cost.
* Baselines use the same module without S (`selection=None`): the loss is then the plain pairwise
  loss -log sigma(R(q, d_i) - R(q, d_j)), and the baselines differ only in their negatives (see
  `lab`) - except DML, which trains naive's negatives with its own loss (`dml`).
* **Fresh triples per epoch.** `train_ranker` takes either fixed examples or a function of the
  epoch; the lab passes the latter, drawing new negatives every epoch (Algorithm 1 samples new
  triples at every iteration; we resample once per pass over the labels).

API
---
`RankerConfig`, `CetConfig`, `LabConfig`, `PROFILES` ("demo", "paper"), `profile(name)`.
`bias_weights(pos, neg, tau, max_weight)`, `pairwise_losses(pos, neg)`, `query_mean(values, index, n)`,
`cet_losses(r_pos, r_neg, s_pos, s_neg, index, n, tau, max_weight) -> CetLosses`.
`CoupledRanker.build(config, coupled)`; `query_pairs(negatives) -> list[QueryPairs]`;
`tokenize_texts(model, queries, corpus, query_ids, doc_ids)`;
`train_ranker(model, examples, texts, config, checkpoint_dir, *, evaluate=None, on_log=None)`;
`save_ranker(model, folder) -> RankerFolders`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl
import torch
import torch.nn.functional as F

from dagster_ir.methods.cet.dml import DmlConfig, dml_losses
from dagster_ir.neural.cross_encoder import CrossEncoder
from dagster_ir.neural.training import TrainConfig, TrainResult, on_rank_zero, shuffled_batches, train, unwrap
from dagster_ir.schemas import NEGATIVES, validate

METHODS: tuple[str, ...] = ("naive", "zhan", "rocketqa", "rance", "dml", "cet")
LOSSES: tuple[str, ...] = ("pairwise", "cet", "dml")


# --- configuration -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankerConfig:
    """The cross-encoder both R and S are: backbone, input lengths, optional layer cut."""

    backbone: str = ""  # "" = the bundled all-MiniLM-L6-v2
    layers: int | None = None  # keep only the backbone's first n transformer layers (speed); None: all
    max_length: int = 256
    max_query_length: int = 64
    use_title: bool = True  # document text = "title text" when the corpus has titles

    def __post_init__(self) -> None:
        if self.layers is not None and self.layers < 1:
            raise ValueError(f"RankerConfig.layers must be >= 1 or None, got {self.layers}")


@dataclass(frozen=True)
class CetConfig:
    """One ranker's training: the model, the loop's settings, CET's tau and weight clamp, DML's settings."""

    ranker: RankerConfig = RankerConfig()
    train: TrainConfig = TrainConfig(lr=3e-6, warmup_ratio=0.1, batch_size=64, max_grad_norm=None)
    tau: float = 1.0
    max_weight: float | None = 100.0  # None: no clamp (the paper)
    dml: DmlConfig = DmlConfig()

    def __post_init__(self) -> None:
        if not self.tau > 0:
            raise ValueError(f"CetConfig.tau must be > 0, got {self.tau}")
        if self.max_weight is not None and (not self.max_weight >= 1.0 or not math.isfinite(self.max_weight)):
            raise ValueError(f"CetConfig.max_weight must be None or finite and >= 1, got {self.max_weight}")


@dataclass(frozen=True)
class LabConfig:
    """The whole lab: which rankers, their negatives, the baselines' settings, reranking, tau grid.

    strong_run / basic_run name candidate runs: the strong retriever (ANCE's role; negatives of
    naive, rocketqa, rance, dml and cet, and the candidates every ranker reranks) and the basic one
    (zhan's negatives; `bm25_bert` adds the "BM25 + BERT" row: zhan's ranker reranking the basic
    run). Negatives are drawn uniformly from a run's top `negative_depth` (None: `rerank_depth`, the
    depth reranked) minus the labels (RANCE: by its rank weights over the same depth), `n_per_positive`
    per label, of the training queries only, afresh every epoch with a seed derived from
    (negative_seed, epoch) unless `resample` is off. With `select_on_dev` (the default) each ranker
    keeps its best epoch by MRR@10 of its reranking of the dev queries against their sparse labels
    (all a trainer has); off, the last epoch's weights are kept.

    RocketQA's eta is a threshold on naive's raw score. With `eta` None it is chosen on dev: the
    grid is the `eta_quantiles` of naive's scores of its own first-epoch negatives (a uniform
    sample of the pool), one rocketqa ranker is trained per grid value ("rocketqa-q<x>"), and the
    one with the best dev MRR@10 is the "rocketqa" row. Likewise `taus` adds "cet-tau<x>" rankers
    for the tau sweep. Dev MRR@10 (on the `dev_judgments`, "dense" or "sparse") of every ranker
    picks the best baseline and draws Figure 4.
    """

    cet: CetConfig = CetConfig()
    methods: tuple[str, ...] = METHODS
    taus: tuple[float, ...] = ()  # extra CET rankers "cet-tau<x>" for the sensitivity plot
    strong_run: str = "dense"
    basic_run: str = "bm25"
    negative_depth: int | None = None  # None: rerank_depth
    n_per_positive: int = 1
    negative_seed: int = 42
    resample: bool = True  # fresh negatives every epoch (Algorithm 1); False: one draw for all epochs
    eta: float | None = None  # rocketqa: drop d_j when R0(q, d_j) > eta (raw score); None: sweep on dev
    eta_quantiles: tuple[float, ...] = (0.5, 0.8, 0.95)
    rance_smoothing: int = 5
    rance_gain_k: float = 2.0
    rerank_depth: int = 100
    score_batch_size: int = 64
    select_on_dev: bool = True  # keep each ranker's best epoch by dev MRR@10 on the sparse labels; False: the last
    select_start: bool = True  # with select_on_dev, the untrained start competes with the epochs too
    bm25_bert: bool = True  # the "BM25 + BERT" row (needs zhan)
    dev_judgments: str = "dense"  # what dev MRR@10 (best baseline, eta, Figure 4) is measured against

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(f"LabConfig.methods: choose from {METHODS}, got {self.methods}")
        if "rocketqa" in self.methods and "naive" not in self.methods:
            raise ValueError("LabConfig.methods: rocketqa needs naive (its first ranker)")
        if any(not t > 0 for t in self.taus):
            raise ValueError(f"LabConfig.taus must be > 0, got {self.taus}")
        if "rocketqa" in self.methods and self.eta is None and not self.eta_quantiles:
            raise ValueError("LabConfig: rocketqa needs eta or eta_quantiles to sweep")
        if any(not 0.0 < q <= 1.0 for q in self.eta_quantiles):
            raise ValueError(f"LabConfig.eta_quantiles must lie in (0, 1], got {self.eta_quantiles}")
        if self.eta is not None and not math.isfinite(self.eta):
            raise ValueError(f"LabConfig.eta must be finite or None, got {self.eta}")
        if self.dev_judgments not in ("dense", "sparse"):
            raise ValueError(f"LabConfig.dev_judgments: 'dense' or 'sparse', not {self.dev_judgments!r}")
        for name in ("n_per_positive", "rerank_depth", "score_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"LabConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.negative_depth is not None and self.negative_depth < 1:
            raise ValueError(f"LabConfig.negative_depth must be >= 1 or None, got {self.negative_depth}")

    @property
    def pair_depth(self) -> int:
        """The candidate depth negatives are drawn from: `negative_depth`, else the depth reranked."""
        return self.negative_depth or self.rerank_depth


PROFILES: dict[str, LabConfig] = {
    # Small scale for 2 CPU cores: the first 2 layers of MiniLM at 64 tokens, 1 epoch over the
    # sparse labels (one per training query) in batches of 8 queries, the test queries' dense top 20
    # reranked; Figure 4's grids at their smallest (tau 1, 2; eta at naive's 0.5 and 0.9 quantiles).
    # Measured there: 20 steps leave the loss at ln 2; 2 epochs train it; 6 epochs drive it to ~0
    # (memorised) without reranking better - 362 labels are too few for a cross-encoder to beat the
    # dense retriever's order, so at this scale the table exercises the lab rather than reproduces
    # the paper (use the paper profile on a GPU for that). 1 epoch (46 steps; 2 before issue #20,
    # `epochs: 2` in the launchpad) halves the lab's eight trainings, the demo's second largest cost.
    # Negatives from the dense top 20, the depth reranked; each ranker is scored on dev after its
    # epoch (select_on_dev), a reranking the dev MRR@10 the lab reports reuses, so it costs nothing more.
    "demo": LabConfig(
        cet=CetConfig(
            ranker=RankerConfig(layers=2, max_length=64, max_query_length=24),
            train=TrainConfig(lr=2e-4, warmup_ratio=0.1, epochs=1, batch_size=8, max_grad_norm=1.0),
        ),
        taus=(2.0,),  # Figure 4's tau panel at its smallest: tau 1 (the cet row) and 2
        eta_quantiles=(0.5, 0.9),
        rance_smoothing=2,
        rerank_depth=20,
    ),
    # Section 5.3: BERT-base, 256 tokens (passages), AdamW lr 3e-6 with linear warm-up 0.1, batch 64,
    # one negative per positive from the top-1000; 150k steps (the checkpoint probed in 6.5).
    "paper": LabConfig(
        cet=CetConfig(
            ranker=RankerConfig(backbone="bert-base-uncased", max_length=256, max_query_length=64),
            train=TrainConfig(lr=3e-6, warmup_ratio=0.1, epochs=20, batch_size=64, max_steps=150_000,
                              max_grad_norm=None),
            max_weight=None,  # the paper's weights are not clamped
        ),
        eta_quantiles=(0.5, 0.7, 0.8, 0.9, 0.95, 0.99),
        taus=(0.25, 0.5, 2.0, 4.0),
        rerank_depth=1000,  # negatives from the same top 1000
    ),
}  # fmt: skip


def profile(name: str) -> LabConfig:
    """The named profile; a clear error for an unknown name."""
    if name not in PROFILES:
        raise ValueError(f"CET profile {name!r}: choose from {sorted(PROFILES)}")
    return PROFILES[name]


def tau_run_name(tau: float) -> str:
    """ "cet-tau0.5" for 0.5, "cet-tau2" for 2.0."""
    return f"cet-tau{tau:g}"


# --- the loss ------------------------------------------------------------------------------------


def bias_weights(pos: torch.Tensor, neg: torch.Tensor, tau: float, max_weight: float | None) -> torch.Tensor:
    """exp(neg / tau) / exp(pos / tau) per pair, computed in log space, clamped at max_weight unless
    it is None, detached."""
    log_weight = (neg.detach().float() - pos.detach().float()) / tau
    if max_weight is None:
        return log_weight.exp()
    return log_weight.clamp(max=math.log(max_weight)).exp()


def pairwise_losses(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """-log sigma(pos - neg) per pair (= softplus(neg - pos), stable for large differences)."""
    return F.softplus(neg.float() - pos.float())


def query_mean(values: torch.Tensor, query_index: torch.Tensor, n_queries: int) -> torch.Tensor:
    """Sum `values` per query (query_index in 0..n-1), then average over the n queries."""
    sums = torch.zeros(n_queries, dtype=values.dtype, device=values.device).index_add(0, query_index, values)
    return sums.mean()


@dataclass(frozen=True)
class CetLosses:
    """L'(R), L'(S) and the (detached) weights that made them."""

    relevance: torch.Tensor
    selection: torch.Tensor
    w_r: torch.Tensor
    w_s: torch.Tensor


def cet_losses(
    r_pos: torch.Tensor,
    r_neg: torch.Tensor,
    s_pos: torch.Tensor,
    s_neg: torch.Tensor,
    query_index: torch.Tensor,
    n_queries: int,
    tau: float = 1.0,
    max_weight: float | None = 100.0,
) -> CetLosses:
    """Equations 18-21: each model's pairwise loss weighted by the other's detached propensity ratio."""
    w_r = bias_weights(s_pos, s_neg, tau, max_weight)
    w_s = bias_weights(r_pos, r_neg, tau, max_weight)
    return CetLosses(
        relevance=query_mean(w_r * pairwise_losses(r_pos, r_neg), query_index, n_queries),
        selection=query_mean(w_s * pairwise_losses(s_pos, s_neg), query_index, n_queries),
        w_r=w_r,
        w_s=w_s,
    )


# --- the model -----------------------------------------------------------------------------------


class CoupledRanker(torch.nn.Module):
    """R (`relevance`) and, for CET, S (`selection`): separate cross-encoders over the same inputs."""

    def __init__(self, relevance: CrossEncoder, selection: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.relevance = relevance
        self.selection = selection

    @classmethod
    def build(cls, config: RankerConfig, coupled: bool, seed: int = 0) -> CoupledRanker:
        """R's score head seeded by `seed` (so every method's R starts alike), S's by seed + 1."""
        relevance = _load_cross_encoder(config, seed)
        return cls(relevance, _load_cross_encoder(config, seed + 1) if coupled else None)

    @property
    def coupled(self) -> bool:
        return self.selection is not None

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(R scores, S scores or None), one per row."""
        relevance = self.relevance(input_ids, attention_mask, token_type_ids)
        if self.selection is None:
            return relevance, None
        return relevance, self.selection(input_ids, attention_mask, token_type_ids)


def _load_cross_encoder(config: RankerConfig, seed: int) -> CrossEncoder:
    overrides = {"num_hidden_layers": config.layers} if config.layers else {}
    # CET's R and S keep the [CLS] head (the cosine start of the other rerankers is not measured for CET yet)
    return CrossEncoder.from_pretrained(
        config.backbone,
        max_length=config.max_length,
        max_query_length=config.max_query_length,
        seed=seed,
        head="cls",
        **overrides,
    )


@dataclass(frozen=True)
class RankerFolders:
    """Where `save_ranker` wrote R and S (None without S)."""

    relevance: Path
    selection: Path | None


def save_ranker(model: CoupledRanker, folder: str | os.PathLike[str]) -> RankerFolders:
    """R to folder/relevance and S to folder/selection, each a Hugging Face folder (safetensors).

    Under torchrun (every process holding the same trained weights) rank 0 writes them."""
    folder = Path(folder)
    relevance = folder / "relevance"
    on_rank_zero(model.relevance.save, relevance)
    selection = None
    if isinstance(model.selection, CrossEncoder):
        selection = folder / "selection"
        on_rank_zero(model.selection.save, selection)
    return RankerFolders(relevance, selection)


# --- training data -------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryPairs:
    """One training example: a query and its (labelled positive, sampled negative) pairs."""

    query_id: str
    pairs: tuple[tuple[str, str], ...]


def query_pairs(negatives: pl.DataFrame) -> list[QueryPairs]:
    """A NEGATIVES table as one example per query, pairs ordered by (positive, sample_no)."""
    validate(negatives, NEGATIVES, "negatives")
    grouped = (
        negatives.sort("query_id", "pos_doc_id", "sample_no")
        .group_by("query_id", maintain_order=True)
        .agg("pos_doc_id", "neg_doc_id")
    )
    return [QueryPairs(q, tuple(zip(pos, neg, strict=True))) for q, pos, neg in grouped.iter_rows()]


@dataclass(frozen=True)
class TokenizedTexts:
    """WordPiece ids (no special tokens) of the queries and documents training needs."""

    queries: dict[str, list[int]]
    docs: dict[str, list[int]]


def query_texts(queries: pl.DataFrame, query_ids: Iterable[str]) -> pl.DataFrame:
    """(query_id, text) of the `query_ids`; an error names the ones without text."""
    wanted = pl.Series("query_id", list(query_ids), pl.String).unique()
    frame = queries.select("query_id", "text").join(wanted.to_frame(), on="query_id", how="semi").unique("query_id")
    _check_found(wanted, frame["query_id"], "query_id")
    return frame


def document_texts(corpus: pl.DataFrame | pl.LazyFrame, doc_ids: Iterable[str], use_title: bool = True) -> pl.DataFrame:
    """(doc_id, text) of the `doc_ids`, text = "title text" when `use_title` and the corpus has titles."""
    wanted = pl.Series("doc_id", list(doc_ids), pl.String).unique()
    docs = corpus.lazy().join(wanted.to_frame().lazy(), on="doc_id", how="semi")
    has_title = use_title and "title" in docs.collect_schema()
    text = (
        pl.concat_str([pl.col("title"), pl.col("text")], separator=" ").str.strip_chars()
        if has_title
        else pl.col("text")
    )
    frame = docs.select("doc_id", text=text).unique("doc_id").collect()
    _check_found(wanted, frame["doc_id"], "doc_id")
    return frame


def _check_found(wanted: pl.Series, found: pl.Series, key: str) -> None:
    missing = wanted.filter(~wanted.is_in(found.implode()))
    if missing.len():
        raise ValueError(f"no text for {missing.len()} {key}s, e.g. {missing.sort().head(5).to_list()}")


def tokenize_texts(
    model: CrossEncoder,
    queries: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    query_ids: Iterable[str],
    doc_ids: Iterable[str],
    use_title: bool = True,
) -> TokenizedTexts:
    """Tokenise each needed text once; documents cut to the model's max_length tokens."""
    query_frame = query_texts(queries, query_ids)
    doc_frame = document_texts(corpus, doc_ids, use_title)
    doc_tokens = [ids[: model.max_length] for ids in model.tokenize(doc_frame["text"].to_list())]
    return TokenizedTexts(
        queries=dict(zip(query_frame["query_id"], model.tokenize(query_frame["text"].to_list()), strict=True)),
        docs=dict(zip(doc_frame["doc_id"], doc_tokens, strict=True)),
    )


# --- training ------------------------------------------------------------------------------------

LossFn = Callable[[torch.nn.Module, Sequence[QueryPairs]], tuple[torch.Tensor, dict[str, float]]]


def make_loss_fn(texts: TokenizedTexts, config: CetConfig, loss: str | None = None) -> LossFn:
    """The loop's loss: CET's L'(R) + L'(S) for a coupled ranker, DML's for `loss="dml"`, the plain
    pairwise loss otherwise."""
    if loss is not None and loss not in LOSSES:
        raise ValueError(f"make_loss_fn: loss must be one of {LOSSES}, got {loss!r}")

    def loss_fn(model: torch.nn.Module, batch: Sequence[QueryPairs]) -> tuple[torch.Tensor, dict[str, float]]:
        bare: CoupledRanker = unwrap(model)
        encoder = bare.relevance
        flat = [(i, example.query_id, pos, neg) for i, example in enumerate(batch) for pos, neg in example.pairs]
        inputs = [encoder.encode_pair(texts.queries[q], texts.docs[d]) for _, q, pos, neg in flat for d in (pos, neg)]
        relevance, selection = model(**encoder.collate(inputs))
        index = torch.tensor([i for i, *_ in flat], device=relevance.device)
        r_pos, r_neg = relevance[0::2], relevance[1::2]
        if selection is None and loss == "dml":
            dml = dml_losses(r_pos, r_neg, index, len(batch), config.dml)
            return dml.loss, {
                "loss_document": float(dml.document.detach()),
                "loss_instance": float(dml.instance.detach()),
                "w_document": float(dml.w_document.mean()),
                "pairs": float(len(flat)),
            }
        if selection is None:
            value = query_mean(pairwise_losses(r_pos, r_neg), index, len(batch))
            return value, {"pairs": float(len(flat))}
        losses = cet_losses(
            r_pos, r_neg, selection[0::2], selection[1::2], index, len(batch), config.tau, config.max_weight
        )
        weights = torch.cat([losses.w_r, losses.w_s])
        clamped = (weights >= config.max_weight * (1 - 1e-6)) if config.max_weight is not None else weights < 0
        return losses.relevance + losses.selection, {
            "loss_r": float(losses.relevance.detach()),
            "loss_s": float(losses.selection.detach()),
            "w_r": float(losses.w_r.mean()),
            "w_s": float(losses.w_s.mean()),
            "clamped": float(clamped.float().mean()),
            "pairs": float(len(flat)),
        }

    return loss_fn


def train_ranker(
    model: CoupledRanker,
    examples: Sequence[QueryPairs] | Callable[[int], Sequence[QueryPairs]],
    texts: TokenizedTexts,
    config: CetConfig,
    checkpoint_dir: str | os.PathLike[str],
    *,
    evaluate: Callable[[torch.nn.Module], float] | None = None,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
    loss: str | None = None,
) -> TrainResult:
    """Train `model` in place with the shared loop, one example per query, resuming from `checkpoint_dir`.

    `examples` is a fixed list or a function of the (0-based) epoch returning that epoch's examples
    (fresh negatives per epoch); `texts` must then hold every text those examples use by the time
    they are returned. `loss`: see `make_loss_fn`.
    """
    examples_for = examples if callable(examples) else (lambda epoch: examples)

    def make_batches(epoch: int, rng: np.random.Generator) -> list[list[QueryPairs]]:
        chosen = list(examples_for(epoch))
        if not chosen:
            raise ValueError(
                f"train_ranker: no training examples in epoch {epoch} (no query has a label and a negative)"
            )
        return shuffled_batches(chosen, config.train.batch_size, rng)

    if not callable(examples) and not examples:
        raise ValueError("train_ranker: no training examples (no query has a label and a negative)")
    return train(
        model,
        make_batches,
        make_loss_fn(texts, config, loss),
        config.train,
        checkpoint_dir,
        evaluate=evaluate,
        on_log=on_log,
    )


def with_tau(config: CetConfig, tau: float) -> CetConfig:
    """`config` with another tau (the sensitivity runs)."""
    return replace(config, tau=tau)


__all__ = [
    "METHODS",
    "PROFILES",
    "CetConfig",
    "CetLosses",
    "CoupledRanker",
    "LOSSES",
    "LabConfig",
    "QueryPairs",
    "RankerConfig",
    "RankerFolders",
    "TokenizedTexts",
    "bias_weights",
    "cet_losses",
    "make_loss_fn",
    "pairwise_losses",
    "profile",
    "query_mean",
    "query_pairs",
    "save_ranker",
    "tau_run_name",
    "document_texts",
    "query_texts",
    "tokenize_texts",
    "train_ranker",
    "with_tau",
]
