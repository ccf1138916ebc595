"""PHP: progressive hyperlink prediction pre-training (HP -> SHP -> MRDS), with anchor-aware MLM.

A segment s of article d is the query; the articles d links to are documents in four groups
D1..D4 (`php_groups`). Each stage contrasts one positive against n negatives:

    hp:   positives D1 u D2 u D3, negatives D4
    shp:  positives D1 u D2,      negatives D3
    mrds: positives D1,           negatives D2

Examples (`build_php_examples`): one per (d, s, positive), with `n_negatives` negatives of the
same (d, s) drawn by a generator seeded from (seed, stage, d, s), so the table depends on content
only. When (d, s) has fewer negatives than n, every negative is used and the list is filled by
cycling through them in a fresh random order (the paper's repeated sampling); such examples are
flagged `with_replacement` and counted. A (d, s) without negatives gives no example, unless
`fill_negatives` says where else to take them (not in the paper; for small dumps, where few
segments hold two groups - the bundled sample has one SHP segment and no MRDS one):
"lower" takes the segment's links of the groups below the stage's negatives (SHP: D4, MRDS: D3
then D4), "lower+random" then articles of the link graph that d does not link to. Both keep the
paper's order D1 > D2 > D3 > D4 > unlinked, so a positive still outranks every negative it meets.

Inputs: `[CLS] s [SEP] d_i [SEP]`, d_i being the lead (segment 1) of the linked article; s keeps
at most `max_query_length` tokens and the lead what is left of `max_length` (`PhpInputs`).
Masking (`mask_tokens`): the tokens of the anchor text a_i inside s (the anchors of s that link to
d_i, found through the fast tokenizer's offset mapping) are selected with `anchor_mask_prob`
(0.5), all other tokens with `mask_prob` (0.15), special tokens never; a selected token becomes
[MASK] (80%), a random token (10%) or stays (10%). The masks of an example come from a generator
seeded by (seed, epoch, example), so they do not depend on batching, process count or resuming.

Model (`PhpModel`): a `CrossEncoder` (score = MLP over [CLS]) plus a BERT-style MLM head whose
decoder is the input embedding matrix. Loss = LCE + `mlm_weight` * MLM (mean over masked tokens).
Each stage starts from the previous stage's folder (`pretrain_stage`); a stage folder is a
cross-encoder folder (see `cross_encoder`) plus `mlm_head.safetensors`, so fine-tuning and plain
transformers load it like any other.

Ablations are named configurations (`ablation_config`): "<stage>-only" (one stage from the
backbone), "no-mlm", "anchor-<ratio>" (e.g. "anchor-0.15").
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import polars as pl
import torch
import torch.nn.functional as F

from dagster_ir.models.backbone import backbone_path
from dagster_ir.models.cross_encoder import CrossEncoder, Pair, lce_loss, pad_pairs
from dagster_ir.models.training import TrainConfig, TrainResult, shuffled_batches, train, unwrap
from dagster_ir.schemas import LINKS, PHP_EXAMPLES, PHP_GROUPS, SEGMENTS, validate
from dagster_ir.storage.atomic import atomic_path

STAGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "hp": (("D1", "D2", "D3"), ("D4",)),
    "shp": (("D1", "D2"), ("D3",)),
    "mrds": (("D1",), ("D2",)),
}
STAGE_ORDER = ("hp", "shp", "mrds")
GROUP_ORDER = ("D1", "D2", "D3", "D4")
FILL_NEGATIVES = ("none", "lower", "lower+random")
MLM_HEAD_FILE = "mlm_head.safetensors"
PHP_FILE = "php.json"
IGNORE = -100  # label of tokens that are not predicted


@dataclass(frozen=True)
class PhpConfig:
    """PHP examples and pre-training settings (defaults: the paper's, see PROFILES)."""

    backbone: str = ""  # "" = the bundled all-MiniLM-L6-v2; the paper profile uses bert-base-uncased
    stages: tuple[str, ...] = STAGE_ORDER  # ("shp",) = the single-stage ablation
    hp_epochs: int = 1
    shp_epochs: int = 1
    mrds_epochs: int = 2
    n_negatives: int = 24
    max_examples: int | None = None  # per stage, a seeded sample of the examples (None = all)
    max_length: int = 512
    max_query_length: int = 256
    mlm_weight: float = 1.0  # 0: no MLM (ablation)
    anchor_mask_prob: float = 0.5
    mask_prob: float = 0.15
    exclude_eval_articles: bool = True  # leave out the articles of the fine-tuning collection's dev/test queries
    fill_negatives: str = "none"  # "none" (paper) | "lower" | "lower+random": see the module docstring
    train: TrainConfig = TrainConfig(lr=1e-5, warmup_ratio=0.1, weight_decay=0.01, batch_size=24)

    def __post_init__(self) -> None:
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown or not self.stages:
            raise ValueError(f"PhpConfig.stages: choose from {STAGE_ORDER}, got {self.stages}")
        if self.n_negatives < 1:
            raise ValueError(f"PhpConfig.n_negatives must be >= 1, got {self.n_negatives}")
        for name in ("anchor_mask_prob", "mask_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"PhpConfig.{name} must lie in [0, 1], got {getattr(self, name)}")
        if self.mlm_weight < 0:
            raise ValueError(f"PhpConfig.mlm_weight must be >= 0, got {self.mlm_weight}")
        if self.fill_negatives not in FILL_NEGATIVES:
            raise ValueError(f"PhpConfig.fill_negatives: choose from {FILL_NEGATIVES}, got {self.fill_negatives!r}")

    def epochs(self, stage: str) -> int:
        return {"hp": self.hp_epochs, "shp": self.shp_epochs, "mrds": self.mrds_epochs}[stage]


PROFILES: dict[str, PhpConfig] = {
    "demo": PhpConfig(
        n_negatives=3, max_examples=200, max_length=96, max_query_length=48, fill_negatives="lower+random",
        train=TrainConfig(lr=1e-4, warmup_ratio=0.1, weight_decay=0.01, batch_size=8, max_steps=30),
    ),
    "paper": PhpConfig(backbone="bert-base-uncased"),
}  # fmt: skip


def ablation_config(base: PhpConfig, name: str) -> PhpConfig:
    """The settings of a named ablation: "<stage>-only", "no-mlm" or "anchor-<ratio>"."""
    if name.endswith("-only") and name.removesuffix("-only") in STAGES:
        return replace(base, stages=(name.removesuffix("-only"),))
    if name == "no-mlm":
        return replace(base, mlm_weight=0.0)
    if name.startswith("anchor-"):
        try:
            return replace(base, anchor_mask_prob=float(name.removeprefix("anchor-")))
        except ValueError:
            pass
    raise ValueError(f"unknown PHP ablation {name!r}: use '<stage>-only' ({', '.join(STAGE_ORDER)}), "
                     "'no-mlm' or 'anchor-<ratio>'")


# --- examples ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExampleCounts:
    """What building one stage's examples did."""

    stage: str
    examples: int  # rows of the examples table
    segments: int  # distinct (d, s) queries
    with_replacement: int  # examples whose negatives repeat (fewer than n available)
    positives_without_negatives: int  # (d, s, positive) dropped: no negative in s
    filled_from_lower: int  # examples whose negatives come from lower groups (fill_negatives)
    filled_from_random: int  # examples whose negatives are articles d does not link to (fill_negatives)
    excluded_rows: int  # php_groups rows left out (articles of evaluation queries)
    sampled_out: int  # examples dropped by max_examples


def stage_groups(stage: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(positive groups, negative groups) of a stage."""
    if stage not in STAGES:
        raise ValueError(f"unknown PHP stage {stage!r}: choose from {STAGE_ORDER}")
    return STAGES[stage]


def build_php_examples(
    groups: pl.DataFrame,
    stage: str,
    config: PhpConfig,
    exclude_articles: Iterable[str] = (),
) -> tuple[pl.DataFrame, ExampleCounts]:
    """PHP_EXAMPLES rows of one stage (see the module docstring), sorted by (d, s, positive)."""
    validate(groups, PHP_GROUPS, "php_groups")
    positive_groups, negative_groups = stage_groups(stage)
    excluded = pl.Series(sorted(set(exclude_articles)), dtype=pl.String)
    keep = ~pl.col("article_id").is_in(excluded.implode()) & ~pl.col("linked_id").is_in(excluded.implode())
    kept = groups.filter(keep)
    lower_groups = GROUP_ORDER[max(GROUP_ORDER.index(g) for g in negative_groups) + 1:]
    per_segment = (
        kept.group_by("article_id", "segment_no")
        .agg(
            positives=pl.col("linked_id").filter(pl.col("group").is_in(positive_groups)).sort(),
            negatives=pl.col("linked_id").filter(pl.col("group").is_in(negative_groups)).sort(),
            lower=pl.col("linked_id").filter(pl.col("group").is_in(lower_groups)).unique().sort(),
        )
        .filter(pl.col("positives").list.len() > 0)
        .sort("article_id", "segment_no")
    )
    universe, linked_from = [], {}
    if config.fill_negatives == "lower+random":
        universe = sorted(set(kept["article_id"]) | set(kept["linked_id"]))
        linked_from = {a: set(ids) for a, ids in kept.group_by("article_id").agg("linked_id").iter_rows()}
    rows, dropped, from_lower, from_random = [], 0, 0, 0
    for article, segment, positives, negatives, lower in per_segment.iter_rows():
        source = None
        if not negatives and config.fill_negatives != "none" and lower:
            negatives, source = lower, "lower"
        if not negatives and config.fill_negatives == "lower+random":
            negatives = [a for a in universe if a != article and a not in linked_from.get(article, ())]
            source = "random"
        if not negatives:
            dropped += len(positives)
            continue
        rng = np.random.default_rng(_seed(config.train.seed, stage, article, str(segment)))
        for positive in positives:
            chosen, repeated = _draw_negatives(negatives, config.n_negatives, rng)
            rows.append((stage, article, segment, positive, chosen, repeated))
        from_lower += len(positives) if source == "lower" else 0
        from_random += len(positives) if source == "random" else 0
    frame = pl.DataFrame(rows, schema=PHP_EXAMPLES, orient="row")
    frame, sampled_out = _cap(frame, config.max_examples, config.train.seed)
    counts = ExampleCounts(
        stage=stage,
        examples=frame.height,
        segments=frame.select("article_id", "segment_no").n_unique() if frame.height else 0,
        with_replacement=int(frame["with_replacement"].sum()),
        positives_without_negatives=dropped,
        filled_from_lower=from_lower,
        filled_from_random=from_random,
        excluded_rows=groups.height - kept.height,
        sampled_out=sampled_out,
    )
    return frame, counts


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "little")


def _draw_negatives(negatives: list[str], n: int, rng: np.random.Generator) -> tuple[list[str], bool]:
    """n negatives: a sample without replacement, or every one cycled in random orders when too few."""
    if len(negatives) >= n:
        return [negatives[i] for i in rng.choice(len(negatives), size=n, replace=False)], False
    rounds = math.ceil(n / len(negatives))
    order = np.concatenate([rng.permutation(len(negatives)) for _ in range(rounds)])[:n]
    return [negatives[i] for i in order], True


def _cap(frame: pl.DataFrame, max_examples: int | None, seed: int) -> tuple[pl.DataFrame, int]:
    if max_examples is None or frame.height <= max_examples:
        return frame, 0
    chosen = np.sort(np.random.default_rng(seed).choice(frame.height, size=max_examples, replace=False))
    return frame[chosen], frame.height - max_examples


# --- inputs and masking -----------------------------------------------------------------------


def mask_tokens(
    input_ids: np.ndarray,
    special: np.ndarray,
    anchor: np.ndarray,
    rng: np.random.Generator,
    *,
    anchor_prob: float,
    other_prob: float,
    mask_id: int,
    vocab_size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(masked ids, labels): BERT masking with a higher selection rate on anchor tokens.

    Tokens are selected with `anchor_prob` where `anchor`, else `other_prob`, never where
    `special`; a selected token becomes `mask_id` (80%), a random id below `vocab_size` (10%), or
    stays (10%). Labels hold the original id of selected tokens and IGNORE elsewhere.
    """
    rate = np.where(anchor, anchor_prob, other_prob)
    selected = (rng.random(len(input_ids)) < rate) & ~special
    action = rng.random(len(input_ids))
    masked = input_ids.copy()
    masked[selected & (action < 0.8)] = mask_id
    randomised = selected & (action >= 0.8) & (action < 0.9)
    masked[randomised] = rng.integers(0, vocab_size, size=int(randomised.sum()))
    labels = np.where(selected, input_ids, IGNORE)
    return masked, labels


def anchor_token_flags(offsets: Sequence[tuple[int, int]], spans: Iterable[tuple[int, int]]) -> np.ndarray:
    """For each token (char offsets [start, end)), whether it overlaps one of the char `spans`."""
    starts = np.array([o[0] for o in offsets], dtype=np.int64)
    ends = np.array([o[1] for o in offsets], dtype=np.int64)
    flags = np.zeros(len(offsets), dtype=bool)
    for start, end in spans:
        flags |= (starts < end) & (ends > start)
    return flags


@dataclass
class _Query:
    ids: np.ndarray  # int32 token ids (arrays, not lists: a ninth of the memory)
    anchors: dict[str, np.ndarray] = field(default_factory=dict)  # linked article -> anchor flags over ids


class PhpInputs:
    """Tokenised queries (segments with anchor flags) and documents (leads) of a stage's examples."""

    def __init__(self, examples: pl.DataFrame, segments: pl.DataFrame | pl.LazyFrame, links: pl.DataFrame | pl.LazyFrame,
                 model: CrossEncoder, config: PhpConfig) -> None:
        validate(examples, PHP_EXAMPLES, "php_examples")
        validate(segments, SEGMENTS, "segments")
        validate(links, LINKS, "wiki_links")
        self.model = model
        self.config = config
        self.examples = [(a, s, [p, *n]) for a, s, p, n in
                         examples.select("article_id", "segment_no", "pos_id", "neg_ids").iter_rows()]
        self.queries = self._tokenize_queries(examples, segments, links)
        self.docs = self._tokenize_leads(examples, segments)
        tokenizer = model.tokenizer
        self.mask_id, self.vocab_size = tokenizer.mask_token_id, len(tokenizer)

    def __len__(self) -> int:
        return len(self.examples)

    def _tokenize_queries(self, examples, segments, links) -> dict[tuple[str, int], _Query]:
        keys = examples.select("article_id", "segment_no").unique()
        texts = segments.lazy().join(keys.lazy(), on=["article_id", "segment_no"], how="semi").select(
            "article_id", "segment_no", "text").collect()
        _require(keys, texts, ["article_id", "segment_no"], "segments of the examples")
        encoded = self.model.tokenizer(texts["text"].to_list(), add_special_tokens=False, return_offsets_mapping=True)
        spans = (links.lazy().join(keys.lazy(), left_on=["src_id", "src_segment"], right_on=["article_id", "segment_no"],
                                   how="semi").filter(pl.col("target_id").is_not_null())
                 .group_by("src_id", "src_segment", "target_id")
                 .agg(pl.struct("anchor_start", "anchor_end")).collect())
        by_segment: dict[tuple[str, int], dict[str, list[tuple[int, int]]]] = {}
        for src, seg, target, pairs in spans.iter_rows():
            by_segment.setdefault((src, seg), {})[target] = [(p["anchor_start"], p["anchor_end"]) for p in pairs]
        limit = self.model.max_query_length
        queries = {}
        for (article, segment), ids, offsets in zip(texts.select("article_id", "segment_no").iter_rows(),
                                                    encoded["input_ids"], encoded["offset_mapping"], strict=True):
            targets = by_segment.get((article, segment), {})
            anchors = {t: anchor_token_flags(offsets, s)[:limit] for t, s in targets.items()}
            queries[(article, segment)] = _Query(np.asarray(ids[:limit], dtype=np.int32), anchors)
        return queries

    def _tokenize_leads(self, examples, segments) -> dict[str, np.ndarray]:
        ids = pl.concat([examples["pos_id"], examples["neg_ids"].explode()]).unique().to_frame("article_id")
        leads = segments.lazy().filter(pl.col("segment_no") == 1).join(ids.lazy(), on="article_id", how="semi").select(
            "article_id", "text").unique("article_id").collect()
        _require(ids, leads, ["article_id"], "leads (segment 1) of linked articles")
        room = self.model.max_length - 3
        tokens = [np.asarray(t[:room], dtype=np.int32) for t in self.model.tokenize(leads["text"].to_list())]
        return dict(zip(leads["article_id"], tokens, strict=True))

    def example(self, index: int, rng: np.random.Generator) -> tuple[list[Pair], list[np.ndarray]]:
        """The 1 + n masked pairs of example `index` (positive first) and their MLM labels."""
        article, segment, docs = self.examples[index]
        query = self.queries[(article, segment)]
        pairs, labels = [], []
        for doc in docs:
            pair = self.model.encode_pair(query.ids.tolist(), self.docs[doc].tolist())
            ids = np.asarray(pair.input_ids)
            special = np.zeros(len(ids), dtype=bool)
            special[[0, len(query.ids) + 1, len(ids) - 1]] = True
            anchor = np.zeros(len(ids), dtype=bool)
            if doc in query.anchors:
                anchor[1 : 1 + len(query.ids)] = query.anchors[doc]
            masked, label = mask_tokens(ids, special, anchor, rng, anchor_prob=self.config.anchor_mask_prob,
                                        other_prob=self.config.mask_prob, mask_id=self.mask_id,
                                        vocab_size=self.vocab_size)
            pairs.append(Pair(masked.tolist(), pair.token_type_ids))
            labels.append(label)
        return pairs, labels


def _require(wanted: pl.DataFrame, found: pl.DataFrame, keys: list[str], what: str) -> None:
    missing = wanted.join(found, on=keys, how="anti")
    if missing.height:
        raise ValueError(f"PHP: {missing.height} {what} not found in wiki_articles, e.g. {missing.head(3).rows()}")


# --- model ------------------------------------------------------------------------------------


class MlmHead(torch.nn.Module):
    """BERT's prediction head: dense -> GELU -> LayerNorm, then the (tied) embedding matrix + bias."""

    def __init__(self, hidden_size: int, vocab_size: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.dense = torch.nn.Linear(hidden_size, hidden_size)
        self.layer_norm = torch.nn.LayerNorm(hidden_size, eps=eps)
        self.bias = torch.nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.layer_norm(F.gelu(self.dense(hidden))), embeddings, self.bias)


_BERT_HEAD_KEYS = {  # our name -> names in a BertForPreTraining / BertForMaskedLM checkpoint
    "dense.weight": ("cls.predictions.transform.dense.weight",),
    "dense.bias": ("cls.predictions.transform.dense.bias",),
    "layer_norm.weight": ("cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.gamma"),
    "layer_norm.bias": ("cls.predictions.transform.LayerNorm.bias", "cls.predictions.transform.LayerNorm.beta"),
    "bias": ("cls.predictions.bias",),
}


class PhpModel(torch.nn.Module):
    """A CrossEncoder plus an MLM head; forward gives scores and the MLM loss in one pass."""

    def __init__(self, scorer: CrossEncoder, mlm_head: MlmHead | None) -> None:
        super().__init__()
        self.scorer = scorer
        self.mlm_head = mlm_head

    @classmethod
    def from_pretrained(cls, path: str, config: PhpConfig, seed: int = 0) -> PhpModel:
        """Scorer from `path` (backbone or stage folder); MLM head from the folder's head file, a BERT
        checkpoint's `cls.predictions`, or new (seeded) - none when mlm_weight is 0."""
        scorer = CrossEncoder.from_pretrained(path, max_length=config.max_length,
                                              max_query_length=config.max_query_length, seed=seed)
        if config.mlm_weight == 0:
            return cls(scorer, None)
        hidden = scorer.model.config.hidden_size
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            head = MlmHead(hidden, scorer.model.get_input_embeddings().weight.shape[0],
                           eps=getattr(scorer.model.config, "layer_norm_eps", 1e-12))
        _load_head_weights(head, backbone_path(path))
        return cls(scorer, head)

    def forward(self, input_ids, attention_mask, token_type_ids=None, mlm_labels=None):
        """(scores (N,), MLM loss or None)."""
        if not self.scorer.uses_token_types:
            token_type_ids = None
        want_mlm = self.mlm_head is not None and mlm_labels is not None
        out = self.scorer.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                output_hidden_states=want_mlm)
        scores = out.logits.squeeze(-1)
        if not want_mlm:
            return scores, None
        chosen = mlm_labels != IGNORE
        if not bool(chosen.any()):
            zero = out.hidden_states[-1].sum() + sum(p.sum() for p in self.mlm_head.parameters())
            return scores, zero * 0.0  # nothing masked: a zero loss that keeps every parameter in the graph
        logits = self.mlm_head(out.hidden_states[-1][chosen], self.scorer.model.get_input_embeddings().weight)
        return scores, F.cross_entropy(logits.float(), mlm_labels[chosen])

    def save(self, folder: str | os.PathLike[str], info: dict | None = None) -> Path:
        """A cross-encoder folder plus `mlm_head.safetensors` and `php.json` (`info`), atomically."""
        from safetensors.torch import save_file

        folder = Path(folder)
        with atomic_path(folder, directory=True) as tmp:
            self.scorer.write_into(tmp)
            if self.mlm_head is not None:
                save_file({k: v.detach().cpu().contiguous() for k, v in self.mlm_head.state_dict().items()},
                          str(tmp / MLM_HEAD_FILE))
            (tmp / PHP_FILE).write_text(json.dumps(info or {}, indent=1, default=str), encoding="utf-8")
        return folder


def _load_head_weights(head: MlmHead, path: str) -> None:
    """Copy MLM head weights from `path`'s head file or a BERT checkpoint when there are any."""
    from safetensors import safe_open

    folder = Path(path)
    own, model_file = folder / MLM_HEAD_FILE, folder / "model.safetensors"
    if own.is_file():
        from safetensors.torch import load_file

        head.load_state_dict(load_file(str(own)))
        return
    if not model_file.is_file():
        model_file = _hub_file(path)
    if model_file is None:
        return
    with safe_open(str(model_file), "pt") as handle:
        available = set(handle.keys())
        found = {ours: next((n for n in names if n in available), None) for ours, names in _BERT_HEAD_KEYS.items()}
        if all(found.values()):
            head.load_state_dict({ours: handle.get_tensor(name) for ours, name in found.items()})


def _hub_file(name: str) -> Path | None:
    try:
        from transformers.utils import cached_file

        resolved = cached_file(name, "model.safetensors", _raise_exceptions_for_missing_entries=False)
    except (OSError, ValueError):
        return None
    return Path(resolved) if resolved else None


def php_loss(config: PhpConfig, inputs: PhpInputs, epoch_seed: Callable[[int], int]):
    """loss_fn for `train`: a micro-batch of example indices -> LCE + mlm_weight * MLM."""

    def loss_fn(model: torch.nn.Module, batch: list[tuple[int, int]]) -> tuple[torch.Tensor, dict[str, float]]:
        pairs, labels = [], []
        for index, epoch in batch:
            example_pairs, example_labels = inputs.example(index, np.random.default_rng([epoch_seed(epoch), index]))
            pairs += example_pairs
            labels += example_labels
        bare = unwrap(model)
        device = next(bare.parameters()).device
        tensors = pad_pairs(pairs, bare.scorer.tokenizer.pad_token_id, device)
        width = tensors["input_ids"].shape[1]
        label_tensor = torch.full((len(labels), width), IGNORE, dtype=torch.long)
        for row, label in enumerate(labels):
            label_tensor[row, : len(label)] = torch.from_numpy(label)
        use_mlm = config.mlm_weight > 0
        scores, mlm = model(**tensors, mlm_labels=label_tensor.to(device) if use_mlm else None)
        lce = lce_loss(scores.view(len(batch), -1))
        logs = {"lce": float(lce.detach())}
        if mlm is None:
            return lce, logs
        logs["mlm"] = float(mlm.detach())
        return lce + config.mlm_weight * mlm, logs

    return loss_fn


# --- stages -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageResult:
    """One pre-training stage: where its model is, and what training did (None when skipped)."""

    stage: str
    path: Path
    init: str
    examples: int
    train: TrainResult | None


def stage_train_config(config: PhpConfig, stage: str) -> TrainConfig:
    """The TrainConfig of a stage: the shared settings with the stage's epochs."""
    return replace(config.train, epochs=config.epochs(stage))


def pretrain_stage(
    stage: str,
    init: str,
    examples: pl.DataFrame,
    segments: pl.DataFrame | pl.LazyFrame,
    links: pl.DataFrame | pl.LazyFrame,
    config: PhpConfig,
    out_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
    *,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
) -> StageResult:
    """Pre-train one stage from `init` (backbone or previous stage folder) and save it to `out_dir`.

    With no examples the stage passes `init` through unchanged (recorded as skipped).
    """
    stage_groups(stage)
    examples = examples.filter(pl.col("stage") == stage)
    train_config = stage_train_config(config, stage)
    model = PhpModel.from_pretrained(init, config, seed=train_config.seed)
    info = {"stage": stage, "init": init, "examples": examples.height, "config": asdict(config)}
    if examples.height == 0:
        model.save(out_dir, {**info, "skipped": True})
        return StageResult(stage, Path(out_dir), init, 0, None)
    inputs = PhpInputs(examples, segments, links, model.scorer, config)
    items = list(range(len(inputs)))

    def make_batches(epoch: int, rng: np.random.Generator) -> list[list[tuple[int, int]]]:
        return shuffled_batches([(i, epoch) for i in items], train_config.batch_size, rng)

    loss_fn = php_loss(config, inputs, lambda epoch: _seed(train_config.seed, stage, epoch))
    result = train(model, make_batches, loss_fn, train_config, checkpoint_dir, on_log=on_log)
    model.save(out_dir, {**info, "steps": result.steps, "loss_curve": result.loss_curve})
    return StageResult(stage, Path(out_dir), init, examples.height, result)


def pretrain_chain(
    config: PhpConfig,
    examples: pl.DataFrame,
    segments: pl.DataFrame | pl.LazyFrame,
    links: pl.DataFrame | pl.LazyFrame,
    out_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
    *,
    on_log: Callable[[str, int, dict[str, float]], None] | None = None,
) -> list[StageResult]:
    """Every stage of `config.stages` in order, the first from the backbone, each from the one before.

    Stage folders go to `out_dir/<stage>` and training checkpoints to `checkpoint_dir/<stage>`.
    """
    init, results = backbone_path(config.backbone), []
    for stage in config.stages:
        log = None if on_log is None else (lambda step, logs, stage=stage: on_log(stage, step, logs))
        result = pretrain_stage(stage, init, examples, segments, links, config, Path(out_dir) / stage,
                                Path(checkpoint_dir) / stage, on_log=log)
        results.append(result)
        init = str(result.path)
    return results


def run_key(*parts: object) -> str:
    """A short stable hash of settings and input versions: names a training run's checkpoint folder."""
    return hashlib.blake2b(json.dumps(parts, sort_keys=True, default=str).encode(), digest_size=8).hexdigest()
