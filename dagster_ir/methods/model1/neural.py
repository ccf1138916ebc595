"""Neural Model 1 (Boytsov & Kolter): T(q|d) from a small network, trained end to end for ranking.

    T(q|d) = sigmoid(F3(relu(F2(relu(F1([x_q, x_d, x_q * x_d]))))))
    x_q = P_q(tanh(layernorm_q(embed_q(q)))),  x_d = P_d(tanh(layernorm_d(embed_d(d))))
    log P(Q|D) / |Q| = 1/|Q| sum_q log[(1 - lambda) * sum_i T(q|d_i) / |D| + lambda * P(q|C)]

The embeddings start from the backbone's input embeddings (word pieces). With `self_prob` set,
T(t|t) = self_prob and every other T is multiplied by 1 - self_prob (the paper's exact-match trick;
rows are not rescaled to sum to 1, so T is a similarity, not a distribution). The inner sum over
document positions equals the non-parametric sum over unique tokens weighted by P(d|D), so a table
exported with `export_table` and scored by `Model1Scorer` gives the same scores wherever every pair
involved was retained.

Training as the paper (section 4): pairwise margin loss summed over the batch (`loss_reduction`;
with AdamW a sum and a mean differ only through epsilon and weight decay), each epoch one positive
and one negative per training query, negatives drawn per positive from BM25's top 500 (20 of
them; the paper: 20 per query, the same where a query has one positive), AdamW at 3e-3 after a
linear warm-up, multiplied by 0.9 after every epoch (`TrainConfig.epoch_decay` of the shared loop
`dagster_ir.neural.training.train`), the best epoch by nDCG@10 on the validation candidates.

Scoring: the paper's neural Model 1 scores with Eq. 4, P(Q|D) = prod_q sum_i T(q|d_i) / |D|, with
no collection term: `lam = 0` (the `paper` profile). The `demo` profile keeps lambda 0.1 (Eq. 3),
which scored higher on wiki-car's dev queries (nDCG@10 0.327 against 0.316; see the README). The export is scored by the non-parametric
scorer (Eq. 3, the lambda tuned for word pieces), as the paper runs it with the non-parametric code.

`Model1Layer` (the MLP and the aggregation) is shared with `dagster_ir.methods.model1.bert`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import polars as pl
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from safetensors.torch import load_model, save_model

from dagster_ir.methods.model1.bitext import document_text
from dagster_ir.methods.model1.index import CollectionStats
from dagster_ir.methods.model1.table import TranslationTable
from dagster_ir.methods.model1.vocabulary import Ragged, Vocabulary, ragged_arange, wordpiece_vocabulary
from dagster_ir.negatives import NegativeConfig
from dagster_ir.neural.training import TrainConfig, TrainResult, against_start, train, unwrap
from dagster_ir.retrieval.trec import rank_run
from dagster_ir.schemas import NEGATIVES, RUN, validate
from dagster_ir.storage.atomic import atomic_path

LOSS_REDUCTIONS = ("sum", "mean")
PAPER_NEGATIVES = NegativeConfig(strategy="random", depth=500, n_per_positive=20, seed=0)
MODEL_FILE = "model.safetensors"
SETTINGS_FILE = "neural_model1.json"

# --- configuration --------------------------------------------------------------------------


@dataclass(frozen=True)
class Model1LayerConfig:
    """The Model 1 layer: projection and hidden sizes (not given in the paper), exact-match and smoothing.

    self_prob: T(t|t) for identical token ids (None: off); lam, unseen_prob: as in `ScoringConfig`,
        except that lam = 0 is allowed: Eq. 4, no collection term (a zero inner sum is floored at unseen_prob).
    initial_translation: T of every pair before training (the bias of F3 is its logit). Our choice,
        not the paper's: small, so that an untrained model ranks like exact matching (self_prob)
        instead of preferring any pair over identical tokens (a fresh sigmoid says 0.5 everywhere).
    """

    proj_dim: int = 128
    hidden_dim: int = 128
    self_prob: float | None = 0.2
    lam: float = 0.1
    unseen_prob: float = 1e-9
    initial_translation: float = 0.02

    def __post_init__(self) -> None:
        if self.proj_dim < 1 or self.hidden_dim < 1:
            raise ValueError(f"Model1LayerConfig: sizes must be >= 1: {self}")
        if not 0 <= self.lam <= 1 or not 0 < self.unseen_prob < 1:
            raise ValueError(f"Model1LayerConfig: need 0 <= lam <= 1 and 0 < unseen_prob < 1: {self}")
        if self.self_prob is not None and not 0 < self.self_prob < 1:
            raise ValueError(f"Model1LayerConfig: self_prob must be in (0, 1) or None: {self}")
        if not 0 < self.initial_translation < 1:
            raise ValueError(f"Model1LayerConfig: initial_translation must be in (0, 1): {self}")


@dataclass(frozen=True)
class NeuralModel1Config:
    """Model, data and training settings of the context-free neural Model 1.

    export_threshold: keep exported T >= this (the paper: "smaller than 10^-?"; default 1e-3).
    export_targets: target (query side) vocabulary of the export: "collection" (every word piece of
        corpus and queries, the paper) or "queries" (only word pieces of the queries: far smaller).
    export_block_pairs: (source, target) pairs evaluated at once during export (bounds memory).
    negatives: how training negatives are drawn from the BM25 run (the paper: 20 from the top 500).
    loss_reduction: "sum" (the paper) or "mean" of the margin loss over the batch.
    max_doc_length: word pieces of a document the model reads; the export's scorer reads the same.
    """

    backbone: str = ""
    layer: Model1LayerConfig = field(default_factory=Model1LayerConfig)
    max_query_length: int = 32
    max_doc_length: int = 512
    margin: float = 1.0
    rerank_batch_size: int = 64
    dev_depth: int = 20  # dev candidates per query for choosing the epoch
    select_start: bool = True  # the untrained start competes with the epochs on dev (kept if none beats it)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=3e-3,
            weight_decay=1e-7,
            epochs=32,
            batch_size=32,
            warmup_ratio=0.1,
            schedule="constant",
            epoch_decay=0.9,
            seed=0,
        )
    )
    export_threshold: float = 1e-3
    export_targets: str = "collection"
    export_block_pairs: int = 2_000_000
    negatives: NegativeConfig = field(default_factory=lambda: PAPER_NEGATIVES)
    loss_reduction: str = "sum"

    def __post_init__(self) -> None:
        if self.loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"loss_reduction must be one of {LOSS_REDUCTIONS}, got {self.loss_reduction!r}")
        if self.export_targets not in ("collection", "queries"):
            raise ValueError(f"export_targets must be 'collection' or 'queries', got {self.export_targets!r}")
        if self.max_query_length < 1 or self.max_doc_length < 1 or self.margin <= 0:
            raise ValueError(f"NeuralModel1Config: lengths >= 1 and margin > 0 needed: {self}")


PROFILES: dict[str, NeuralModel1Config] = {
    # A few dozen steps on 2 CPU cores: a higher rate than the paper's 3e-3 so that T moves at all,
    # short documents, a higher export threshold to keep the demo table small, lambda 0.1 (Eq. 3).
    "demo": NeuralModel1Config(
        layer=Model1LayerConfig(proj_dim=32, hidden_dim=32),
        max_query_length=16,
        max_doc_length=128,
        dev_depth=10,
        export_threshold=5e-3,
        export_targets="queries",
        train=TrainConfig(
            lr=1e-2,
            weight_decay=1e-7,
            epochs=3,
            batch_size=32,
            warmup_ratio=0.1,
            schedule="constant",
            epoch_decay=0.9,
            seed=0,
        ),
    ),
    "paper": NeuralModel1Config(backbone="bert-base-uncased", layer=Model1LayerConfig(lam=0.0)),
}


# --- the Model 1 layer ----------------------------------------------------------------------


class TranslationMLP(torch.nn.Module):
    """T(q|d) = sigmoid(F3(relu(F2(relu(F1([x_q, x_d, x_q * x_d])))))) for every (q, d) pair.

    F1 is applied as three blocks of its weight (x_q, x_d and x_q * x_d parts), which is the same
    map without building the concatenation for every pair.
    """

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.dim = dim
        self.f1 = torch.nn.Linear(3 * dim, hidden)
        self.f2 = torch.nn.Linear(hidden, hidden)
        self.f3 = torch.nn.Linear(hidden, 1)

    def forward(self, x_q: torch.Tensor, x_d: torch.Tensor) -> torch.Tensor:
        """x_q (B, Lq, dim), x_d (B, Ld, dim) -> T (B, Lq, Ld) in (0, 1)."""
        w_q, w_d, w_h = self.f1.weight.split(self.dim, dim=1)
        query_part = x_q @ w_q.T  # (B, Lq, h)
        doc_part = x_d @ w_d.T + self.f1.bias  # (B, Ld, h)
        product = (x_q.unsqueeze(2) * x_d.unsqueeze(1)) @ w_h.T  # (B, Lq, Ld, h)
        hidden = F.relu(product + query_part.unsqueeze(2) + doc_part.unsqueeze(1))
        hidden = F.relu(self.f2(hidden))
        return torch.sigmoid(self.f3(hidden).squeeze(-1))


class Model1Layer(torch.nn.Module):
    """Projections x = P(tanh(layernorm(v))) of query and document vectors, the MLP, and log P(Q|D)/|Q|.

    `collection_probs` (a buffer, saved with the weights) holds P(t|C) for every token id.
    """

    def __init__(self, input_dim: int, config: Model1LayerConfig, collection_probs: torch.Tensor) -> None:
        super().__init__()
        self.config = config
        self.norm_q = torch.nn.LayerNorm(input_dim)
        self.norm_d = torch.nn.LayerNorm(input_dim)
        self.proj_q = torch.nn.Linear(input_dim, config.proj_dim)
        self.proj_d = torch.nn.Linear(input_dim, config.proj_dim)
        self.mlp = TranslationMLP(config.proj_dim, config.hidden_dim)
        with torch.no_grad():
            self.mlp.f3.bias.fill_(math.log(config.initial_translation / (1.0 - config.initial_translation)))
        self.register_buffer("collection_probs", collection_probs.float().clone())

    def project_query(self, vectors: torch.Tensor) -> torch.Tensor:
        return self.proj_q(torch.tanh(self.norm_q(vectors)))

    def project_doc(self, vectors: torch.Tensor) -> torch.Tensor:
        return self.proj_d(torch.tanh(self.norm_d(vectors)))

    def translation(
        self, x_q: torch.Tensor, x_d: torch.Tensor, q_ids: torch.Tensor, d_ids: torch.Tensor
    ) -> torch.Tensor:
        """T(q|d) (B, Lq, Ld) with the self-translation rule applied (by token id)."""
        t = self.mlp(x_q, x_d)
        p = self.config.self_prob
        if p is None:
            return t
        same = q_ids.unsqueeze(2) == d_ids.unsqueeze(1)
        return torch.where(same, torch.full_like(t, p), (1.0 - p) * t)

    def score(self, t: torch.Tensor, q_ids: torch.Tensor, q_mask: torch.Tensor, d_mask: torch.Tensor) -> torch.Tensor:
        """log P(Q|D) / |Q| per row from T (B, Lq, Ld) and the masks (1 = real token)."""
        d_mask = d_mask.to(t.dtype)
        q_mask = q_mask.to(t.dtype)
        translated = (t * d_mask.unsqueeze(1)).sum(-1) / d_mask.sum(-1).clamp_min(1).unsqueeze(1)
        lam = self.config.lam
        if lam == 0:  # Eq. 4
            inner = translated.clamp_min(self.config.unseen_prob)
        else:
            inner = (1.0 - lam) * translated + lam * self.collection_probs[q_ids]
        return (torch.log(inner) * q_mask).sum(-1) / q_mask.sum(-1).clamp_min(1)


# --- the context-free model -----------------------------------------------------------------


class NeuralModel1(torch.nn.Module):
    """Context-free neural Model 1 over word pieces: embeddings -> `Model1Layer`."""

    def __init__(self, embeddings: torch.Tensor, collection_probs: torch.Tensor, config: NeuralModel1Config) -> None:
        super().__init__()
        self.config = config
        self.embed_q = torch.nn.Embedding.from_pretrained(embeddings.clone(), freeze=False)
        self.embed_d = torch.nn.Embedding.from_pretrained(embeddings.clone(), freeze=False)
        self.layer = Model1Layer(embeddings.shape[1], config.layer, collection_probs)

    @classmethod
    def from_backbone(cls, collection_probs: np.ndarray, config: NeuralModel1Config) -> NeuralModel1:
        """Embeddings copied from the backbone's input embeddings; the rest initialised by the seed."""
        from dagster_ir.neural.backbone import load_encoder

        embeddings = load_encoder(config.backbone).get_input_embeddings().weight.detach()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.train.seed)
            return cls(embeddings, torch.as_tensor(collection_probs), config)

    def encode_pairs(
        self, texts: NeuralTexts, query_ids: Sequence[str], doc_ids: Sequence[str]
    ) -> dict[str, torch.Tensor]:
        """The forward inputs for (query, document) pairs, padded, on the model's device."""
        q, q_mask = texts.queries.padded(query_ids, self.config.max_query_length)
        d, d_mask = texts.docs.padded(doc_ids, self.config.max_doc_length)
        device = _device_of(self)
        return {"q_ids": q.to(device), "q_mask": q_mask.to(device), "d_ids": d.to(device), "d_mask": d_mask.to(device)}

    def forward(
        self, q_ids: torch.Tensor, q_mask: torch.Tensor, d_ids: torch.Tensor, d_mask: torch.Tensor
    ) -> torch.Tensor:
        """log P(Q|D) / |Q| for each (query, document) row."""
        x_q = self.layer.project_query(self.embed_q(q_ids))
        x_d = self.layer.project_doc(self.embed_d(d_ids))
        t = self.layer.translation(x_q, x_d, q_ids, d_ids)
        return self.layer.score(t, q_ids, q_mask, d_mask)

    def save(self, folder: str | os.PathLike[str]) -> Path:
        """`model.safetensors` and `neural_model1.json` (the config), written atomically."""
        folder = Path(folder)
        with atomic_path(folder, directory=True) as tmp:
            save_model(self, str(tmp / MODEL_FILE))
            settings = {
                "config": _config_dict(self.config),
                "vocab_size": self.embed_q.num_embeddings,
                "embedding_dim": self.embed_q.embedding_dim,
            }
            (tmp / SETTINGS_FILE).write_text(json.dumps(settings, indent=1), encoding="utf-8")
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> NeuralModel1:
        """A model written by `save`."""
        settings = _read_settings(Path(folder) / SETTINGS_FILE)
        config = config_from_dict(settings["config"])
        shape = (settings["vocab_size"], settings["embedding_dim"])
        model = cls(torch.zeros(shape), torch.zeros(shape[0]), config)
        load_model(model, str(Path(folder) / MODEL_FILE))
        return model


def _config_dict(config: NeuralModel1Config) -> dict:
    return asdict(config)


def config_from_dict(values: dict) -> NeuralModel1Config:
    """The inverse of `dataclasses.asdict` for NeuralModel1Config."""
    negatives = NegativeConfig(**values["negatives"]) if "negatives" in values else PAPER_NEGATIVES
    return NeuralModel1Config(
        **{
            **values,
            "layer": Model1LayerConfig(**values["layer"]),
            "train": TrainConfig(**values["train"]),
            "negatives": negatives,
        }
    )


def _read_settings(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: cannot read the model settings ({error})") from error


# --- texts as padded tensors ----------------------------------------------------------------


class TokenizedTexts:
    """Word-piece ids of texts keyed by id (query ids or doc ids), tokenised once."""

    def __init__(self, keys: pl.Series, tokens: Ragged) -> None:
        if keys.len() != len(tokens):
            raise ValueError(f"TokenizedTexts: {keys.len()} keys, {len(tokens)} token rows")
        self.tokens = tokens
        self._row = {key: i for i, key in enumerate(keys.to_list())}

    @classmethod
    def of_queries(cls, queries: pl.DataFrame, vocabulary: Vocabulary) -> TokenizedTexts:
        return cls(queries["query_id"], vocabulary.encode(queries["text"].to_list()))

    @classmethod
    def of_documents(
        cls, corpus: pl.DataFrame | pl.LazyFrame, doc_ids: pl.Series, vocabulary: Vocabulary
    ) -> TokenizedTexts:
        """The documents `doc_ids` of a CORPUS frame (title, newline, text, as the index sees them)."""
        wanted = pl.DataFrame({"doc_id": doc_ids.unique()})
        docs = (
            corpus.lazy().join(wanted.lazy(), on="doc_id", how="semi").select("doc_id", text=document_text()).collect()
        )
        missing = wanted.join(docs, on="doc_id", how="anti")
        if missing.height:
            raise KeyError(f"document {missing['doc_id'][0]!r} is not in the corpus ({missing.height} missing)")
        return cls(docs["doc_id"], vocabulary.encode(docs["text"].to_list()))

    def rows(self, keys: Sequence[str]) -> np.ndarray:
        try:
            return np.array([self._row[k] for k in keys], dtype=np.int64)
        except KeyError as error:
            raise KeyError(f"no tokenised text for {error.args[0]!r}") from None

    def lengths(self, keys: Sequence[str], max_length: int) -> np.ndarray:
        return np.minimum(self.tokens.lengths[self.rows(keys)], max_length)

    def padded(self, keys: Sequence[str], max_length: int, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, mask) of shape (len(keys), longest kept length), each text cut to `max_length`."""
        return pad_rows(self.tokens, self.rows(keys), max_length, pad_id)


def pad_rows(tokens: Ragged, rows: np.ndarray, max_length: int, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of a Ragged array cut to `max_length` and right-padded to the longest (vectorised)."""
    lengths = np.minimum(tokens.lengths[rows], max_length)
    width = max(int(lengths.max(initial=0)), 1)
    ids = np.full((rows.size, width), pad_id, dtype=np.int64)
    mask = np.zeros((rows.size, width), dtype=np.int64)
    position = ragged_arange(lengths)
    row = np.repeat(np.arange(rows.size), lengths)
    ids[row, position] = tokens.ids[np.repeat(tokens.offsets[rows], lengths) + position]
    mask[row, position] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


# --- training data and loss -----------------------------------------------------------------


def epoch_triples(negatives: pl.DataFrame, rng: np.random.Generator) -> list[tuple[str, str, str]]:
    """One (query, positive, negative) per query, drawn uniformly from its NEGATIVES rows."""
    validate(negatives, NEGATIVES, "negatives")
    rows = negatives.sort("query_id", "pos_doc_id", "sample_no")
    ids = rows["query_id"].rle_id().to_numpy()
    starts = np.flatnonzero(np.diff(ids, prepend=-1))
    counts = np.diff(np.append(starts, ids.size))
    picked = starts + (rng.random(starts.size) * counts).astype(np.int64)
    chosen = rows[picked]
    return list(
        zip(chosen["query_id"].to_list(), chosen["pos_doc_id"].to_list(), chosen["neg_doc_id"].to_list(), strict=True)
    )


def margin_loss(positive: torch.Tensor, negative: torch.Tensor, margin: float) -> torch.Tensor:
    """Mean over pairs of max(0, margin - s+ + s-) (`pairwise_loss` scales it to the paper's sum)."""
    return F.relu(margin - positive + negative).mean()


def make_epoch_batches(negatives: pl.DataFrame, batch_size: int) -> Callable[[int, np.random.Generator], list]:
    """`make_batches` for the shared loop: each epoch, one triple per query, shuffled, in batches."""

    def make(epoch: int, rng: np.random.Generator) -> list[list[tuple[str, str, str]]]:
        triples = epoch_triples(negatives, rng)
        order = rng.permutation(len(triples))
        return [[triples[i] for i in order[s : s + batch_size]] for s in range(0, len(order), batch_size)]

    return make


# --- training, scoring, export --------------------------------------------------------------


@dataclass
class NeuralTexts:
    """Tokenised queries and documents the model trains and scores on."""

    queries: TokenizedTexts
    docs: TokenizedTexts


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def pairwise_loss(texts: NeuralTexts, margin: float, scale: float = 1.0):
    """`loss_fn` for the shared loop: margin loss of a micro-batch of (query, positive, negative).

    Works for any model with `encode_pairs(texts, query_ids, doc_ids) -> dict` and `forward(**dict)`.
    """

    def loss_fn(model: torch.nn.Module, batch: list[tuple[str, str, str]]):
        queries = [q for q, _, _ in batch]
        docs = [p for _, p, _ in batch] + [n for _, _, n in batch]
        scores = model(**unwrap(model).encode_pairs(texts, queries + queries, docs))
        positive, negative = scores[: len(batch)], scores[len(batch) :]
        loss = scale * margin_loss(positive, negative, margin)
        return loss, {"accuracy": float((positive > negative).float().mean())}

    return loss_fn


@torch.inference_mode()
def score_pairs(model: torch.nn.Module, texts: NeuralTexts, pairs: pl.DataFrame, batch_size: int) -> np.ndarray:
    """Scores of (query_id, doc_id) rows; batches of similar document length (dynamic padding)."""
    if pairs.height == 0:
        return np.zeros(0)
    model.eval()
    query_ids, doc_ids = pairs["query_id"].to_list(), pairs["doc_id"].to_list()
    order = np.argsort(texts.docs.tokens.lengths[texts.docs.rows(doc_ids)], kind="stable")
    scores = np.empty(pairs.height)
    for start in range(0, order.size, batch_size):
        part = order[start : start + batch_size]
        inputs = model.encode_pairs(texts, [query_ids[i] for i in part], [doc_ids[i] for i in part])
        scores[part] = model(**inputs).float().cpu().numpy()
    return scores


def rerank(
    model: torch.nn.Module, texts: NeuralTexts, run: pl.DataFrame, run_name: str, batch_size: int
) -> pl.DataFrame:
    """Every (query, doc) of `run` scored by `model` and ranked; a RUN frame named `run_name`."""
    pairs = run.select("query_id", "doc_id").unique(maintain_order=True)
    scored = pairs.with_columns(
        score=pl.Series(score_pairs(model, texts, pairs, batch_size)), run_name=pl.lit(run_name)
    )
    return rank_run(scored).select(list(RUN)).cast(RUN)


def dev_ndcg(texts: NeuralTexts, dev_run: pl.DataFrame, qrels: pl.DataFrame, batch_size: int):
    """`evaluate` for the shared loop: nDCG@10 of the model reranking the dev candidates."""
    from dagster_ir.evaluation import aggregate, evaluate_run

    judged = qrels.join(dev_run.select("query_id").unique(), on="query_id", how="semi")

    def evaluate(model: torch.nn.Module) -> float:
        reranked = rerank(model, texts, dev_run, "dev", batch_size)
        return float(aggregate(evaluate_run(reranked, judged, ["nDCG@10"]))["mean"][0])

    return evaluate


def train_ranker(
    model: torch.nn.Module,
    texts: NeuralTexts,
    negatives: pl.DataFrame,
    checkpoint_dir: str | os.PathLike[str],
    *,
    dev_run: pl.DataFrame | None = None,
    qrels: pl.DataFrame | None = None,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
) -> tuple[TrainResult, float | None, bool]:
    """Train a neural or BERT Model 1 with the shared loop; with `dev_run` and `qrels` the best dev
    epoch (nDCG@10 reranking the dev candidates) is kept, or the start (`against_start`: the
    untrained weights, BERT's pretrained encoder under a fresh head) when it scores above every
    epoch. Returns (the training record, the start's dev score or None, whether the start was kept)."""
    config = model.config
    evaluate = None
    if dev_run is not None and qrels is not None and dev_run.height:
        evaluate = dev_ndcg(texts, dev_run, qrels, config.rerank_batch_size)
    # the shared loop averages micro-batch losses over the global batch: times its size, the sum
    scale = float(config.train.batch_size) if config.loss_reduction == "sum" else 1.0
    loss = pairwise_loss(texts, config.margin, scale)
    return against_start(
        model,
        evaluate,
        keep_start=config.select_start,
        run=partial(
            train,
            model,
            make_epoch_batches(negatives, config.train.batch_size),
            loss,
            config.train,
            checkpoint_dir,
            on_log=on_log,
            evaluate=evaluate,
        ),
    )


@torch.inference_mode()
def export_table(
    model: NeuralModel1,
    vocabulary: Vocabulary,
    sources: np.ndarray,
    targets: np.ndarray,
    *,
    threshold: float | None = None,
    block_pairs: int | None = None,
) -> TranslationTable:
    """T(q|d) for every source d in `sources` and target q in `targets`, kept where T >= threshold.

    Evaluated in blocks of source tokens (at most `block_pairs` pairs at once); the self-translation
    rule is applied as in the model. Returns a table over `vocabulary` (the backbone's word pieces).
    """
    threshold = model.config.export_threshold if threshold is None else threshold
    block_pairs = block_pairs or model.config.export_block_pairs
    model.eval()
    sources, targets = np.asarray(sources, dtype=np.int64), np.asarray(targets, dtype=np.int64)
    device = _device_of(model)
    target_ids = torch.as_tensor(targets, device=device)
    x_q = model.layer.project_query(model.embed_q(target_ids)).unsqueeze(0)
    x_d_all = model.layer.project_doc(model.embed_d(torch.as_tensor(sources, device=device)))
    step = max(1, block_pairs // max(targets.size, 1))
    rows, cols, vals = [], [], []
    for start in range(0, sources.size, step):
        source_ids = torch.as_tensor(sources[start : start + step], device=device)
        t = model.layer.translation(
            x_q, x_d_all[start : start + step].unsqueeze(0), target_ids.unsqueeze(0), source_ids.unsqueeze(0)
        )[0].T  # (block, targets)
        keep = (t >= threshold).nonzero().cpu().numpy()
        rows.append(sources[start + keep[:, 0]])
        cols.append(targets[keep[:, 1]])
        vals.append(t[keep[:, 0], keep[:, 1]].float().cpu().numpy())
    n = len(vocabulary)
    matrix = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n), dtype=np.float32
    )
    return TranslationTable(vocabulary, matrix)


def export_vocabulary(
    config: NeuralModel1Config, corpus_stats: CollectionStats, queries: pl.DataFrame, vocabulary: Vocabulary
) -> tuple[np.ndarray, np.ndarray]:
    """(sources, targets) of the export: word pieces of the corpus, and those of the collection or queries."""
    sources = np.flatnonzero(corpus_stats.doc_freq > 0)
    query_tokens = np.unique(vocabulary.encode(queries["text"].to_list()).ids)
    if config.export_targets == "queries":
        return sources, query_tokens
    return sources, np.union1d(sources, query_tokens)


def build_model(corpus_stats: CollectionStats, config: NeuralModel1Config) -> tuple[NeuralModel1, Vocabulary]:
    """A fresh model (embeddings from the backbone) and its word-piece vocabulary."""
    vocabulary = wordpiece_vocabulary(config.backbone)
    probs = corpus_stats.collection_probs(config.layer.unseen_prob)
    if probs.size != len(vocabulary):
        raise ValueError(f"collection statistics cover {probs.size} tokens, the backbone has {len(vocabulary)}")
    return NeuralModel1.from_backbone(probs, config), vocabulary
