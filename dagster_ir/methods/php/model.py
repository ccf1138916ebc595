"""The PHP model: a `CrossEncoder` (its score head: see `neural.cross_encoder`) plus a BERT-style MLM head whose
decoder is the input embedding matrix. Loss = LCE + `mlm_weight` * MLM (mean over masked tokens).

A stage folder is a cross-encoder folder (see `neural.cross_encoder`) plus `mlm_head.safetensors`,
so fine-tuning and plain transformers load it like any other.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from dagster_ir.methods.php.config import IGNORE, MLM_HEAD_FILE, PHP_FILE, PhpConfig
from dagster_ir.methods.php.masking import PhpInputs
from dagster_ir.neural.backbone import backbone_path
from dagster_ir.neural.cross_encoder import CrossEncoder, lce_loss, pad_pairs
from dagster_ir.neural.training import unwrap
from dagster_ir.storage.atomic import atomic_path


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
        self.mlm_head_source: str | None = None  # where the head's weights came from (from_pretrained)

    @classmethod
    def from_pretrained(cls, path: str, config: PhpConfig, seed: int = 0) -> PhpModel:
        """Scorer from `path` (backbone or stage folder); MLM head from the folder's head file, a BERT
        checkpoint's `cls.predictions`, or new (seeded, with a warning) - none when mlm_weight is 0.
        `mlm_head_source` says which."""
        scorer = CrossEncoder.from_pretrained(
            path, max_length=config.max_length, max_query_length=config.max_query_length, seed=seed
        )
        if config.mlm_weight == 0:
            return cls(scorer, None)
        hidden = scorer.model.config.hidden_size
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            head = MlmHead(
                hidden,
                scorer.model.get_input_embeddings().weight.shape[0],
                eps=getattr(scorer.model.config, "layer_norm_eps", 1e-12),
            )
        source = _load_head_weights(head, backbone_path(path))
        if source is None:
            source = f"new (seed {seed})"
            warnings.warn(
                f"{path}: no MLM head weights (no {MLM_HEAD_FILE}, no cls.predictions in its "
                f"model.safetensors): the MLM head starts at random (seed {seed})",
                stacklevel=2,
            )
        model = cls(scorer, head)
        model.mlm_head_source = source
        return model

    def forward(self, input_ids, attention_mask, token_type_ids=None, mlm_labels=None):
        """(scores (N,), MLM loss or None)."""
        want_mlm = self.mlm_head is not None and mlm_labels is not None
        scores, states = self.scorer.score(input_ids, attention_mask, token_type_ids, with_states=want_mlm)
        if not want_mlm:
            return scores, None
        chosen = mlm_labels != IGNORE
        if not bool(chosen.any()):
            zero = states.sum() + sum(p.sum() for p in self.mlm_head.parameters())
            return scores, zero * 0.0  # nothing masked: a zero loss that keeps every parameter in the graph
        logits = self.mlm_head(states[chosen], self.scorer.model.get_input_embeddings().weight)
        return scores, F.cross_entropy(logits.float(), mlm_labels[chosen])

    def save(self, folder: str | os.PathLike[str], info: dict | None = None) -> Path:
        """A cross-encoder folder plus `mlm_head.safetensors` and `php.json` (`info`), atomically."""
        from safetensors.torch import save_file

        folder = Path(folder)
        with atomic_path(folder, directory=True) as tmp:
            self.scorer.write_into(tmp)
            if self.mlm_head is not None:
                save_file(
                    {k: v.detach().cpu().contiguous() for k, v in self.mlm_head.state_dict().items()},
                    str(tmp / MLM_HEAD_FILE),
                )
            (tmp / PHP_FILE).write_text(json.dumps(info or {}, indent=1, default=str), encoding="utf-8")
        return folder


def _load_head_weights(head: MlmHead, path: str) -> str | None:
    """Copy MLM head weights from `path`'s head file or a BERT checkpoint; say which (None: neither)."""
    from safetensors import safe_open

    folder = Path(path)
    own, model_file = folder / MLM_HEAD_FILE, folder / "model.safetensors"
    if own.is_file():
        from safetensors.torch import load_file

        head.load_state_dict(load_file(str(own)))
        return str(own)
    if not model_file.is_file():
        model_file = _hub_file(path)
    if model_file is None:
        return None
    with safe_open(str(model_file), "pt") as handle:
        available = set(handle.keys())
        found = {ours: next((n for n in names if n in available), None) for ours, names in _BERT_HEAD_KEYS.items()}
        if all(found.values()):
            head.load_state_dict({ours: handle.get_tensor(name) for ours, name in found.items()})
            return f"{model_file} (cls.predictions)"
    return None


def _hub_file(name: str) -> Path | None:
    try:
        from transformers.utils import cached_file

        resolved = cached_file(name, "model.safetensors", _raise_exceptions_for_missing_entries=False)
    except (OSError, ValueError):
        return None
    return Path(resolved) if resolved else None


def php_loss(
    config: PhpConfig,
    inputs: PhpInputs,
    epoch_seed: Callable[[int], int],
    ranking: Callable[[torch.Tensor], torch.Tensor] = lce_loss,
    name: str = "lce",
):
    """loss_fn for `train`: a micro-batch of example indices -> ranking (LCE) + mlm_weight * MLM.

    `ranking` maps the (examples, 1 + negatives) scores to a loss, logged as `name`; the pre-training
    baselines pass their own (`baseline_training.baseline_loss`)."""

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
        rank = ranking(scores.view(len(batch), -1))
        logs = {name: float(rank.detach())}
        if mlm is None:
            return rank, logs
        logs["mlm"] = float(mlm.detach())
        return rank + config.mlm_weight * mlm, logs

    return loss_fn
