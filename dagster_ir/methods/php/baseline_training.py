"""Pre-train a Table 3 baseline (ICT, WLP, PROP, HARP) on its BASELINE_EXAMPLES, as PHP is trained.

Same model (`PhpModel`: cross-encoder + MLM head), backbone, input budget, TrainConfig and MLM
weight as PHP (`PhpConfig`); one run over the examples for as many epochs as PHP's three stages
together (`baseline_train_config`), and at most as many optimizer steps as PHP took when `max_steps`
is given (the `php_baselines` asset passes PHP's), so the budget matches. The ranking loss is LCE over 1 + n
candidates (ICT, WLP) or the pairwise hinge max(0, 1 - s+ + s-) (PROP, HARP); see `baselines`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import polars as pl
import torch

from dagster_ir.methods.php.baselines import BASELINE_EXAMPLES, METHODS, PAIRWISE
from dagster_ir.methods.php.config import IGNORE, STAGE_ORDER, PhpConfig, seed_of
from dagster_ir.methods.php.masking import mask_tokens
from dagster_ir.methods.php.model import PhpModel, php_loss
from dagster_ir.methods.php.stages import StageResult
from dagster_ir.neural.cross_encoder import Pair, lce_loss
from dagster_ir.neural.training import TrainConfig, on_rank_zero, shuffled_batches, train
from dagster_ir.schemas import validate


def pairwise_hinge(scores: torch.Tensor) -> torch.Tensor:
    """Mean of max(0, 1 - s(preferred) + s(other)) over each row's other candidates; scores (batch, 1 + n)."""
    if scores.ndim != 2 or scores.shape[1] < 2:
        raise ValueError(f"pairwise_hinge: scores must be (batch, 1 + n) with n >= 1, got {tuple(scores.shape)}")
    scores = scores.float()
    return torch.relu(1.0 - scores[:, :1] + scores[:, 1:]).mean()


def baseline_train_config(config: PhpConfig) -> TrainConfig:
    """PHP's TrainConfig with the epochs of its three stages together (the same budget)."""
    return replace(config.train, epochs=sum(config.epochs(stage) for stage in STAGE_ORDER))


class BaselineInputs:
    """Tokenised candidates of BASELINE_EXAMPLES: `example(i, rng)` gives the (masked) pairs and MLM labels."""

    def __init__(self, examples: pl.DataFrame, model, config: PhpConfig) -> None:
        validate(examples, BASELINE_EXAMPLES, "baseline examples")
        widths = examples["docs"].list.len()
        if examples.height and (widths != examples["queries"].list.len()).any():
            raise ValueError("baseline examples: every row needs as many queries as docs")
        if examples.height and widths.n_unique() > 1:
            raise ValueError(f"baseline examples: one width per method, got {sorted(widths.unique().to_list())}")
        self.model, self.config = model, config
        texts = pl.concat([examples["queries"].explode(), examples["docs"].explode()]).unique().sort().to_list()
        # cut at the budget while tokenising: encode_pair never reads further (whole articles are long)
        ids = (
            model.tokenizer(
                texts, add_special_tokens=False, truncation=True, max_length=model.max_length, verbose=False
            )["input_ids"]
            if texts
            else []
        )
        tokens = dict(zip(texts, ids, strict=True))
        self.examples = [
            [(tokens[q], tokens[d]) for q, d in zip(qs, ds, strict=True)]
            for qs, ds in examples.select("queries", "docs").iter_rows()
        ]
        self.mask_id, self.vocab_size = model.tokenizer.mask_token_id, len(model.tokenizer)

    def __len__(self) -> int:
        return len(self.examples)

    def example(self, index: int, rng: np.random.Generator) -> tuple[list[Pair], list[np.ndarray]]:
        pairs, labels = [], []
        for query, doc in self.examples[index]:
            pair = self.model.encode_pair(query, doc)
            ids = np.asarray(pair.input_ids)
            if self.config.mlm_weight == 0:
                pairs.append(pair)
                labels.append(np.full(len(ids), IGNORE, dtype=np.int64))
                continue
            special = np.zeros(len(ids), dtype=bool)
            special[[0, pair.token_type_ids.index(1) - 1, len(ids) - 1]] = True
            masked, label = mask_tokens(
                ids,
                special,
                np.zeros(len(ids), dtype=bool),
                rng,
                anchor_prob=self.config.mask_prob,
                other_prob=self.config.mask_prob,
                mask_id=self.mask_id,
                vocab_size=self.vocab_size,
            )
            pairs.append(Pair(masked.tolist(), pair.token_type_ids))
            labels.append(label)
        return pairs, labels


def baseline_loss(method: str, config: PhpConfig, inputs: BaselineInputs, epoch_seed: Callable[[int], int]):
    """loss_fn for `train`: ranking loss (LCE or pairwise hinge) + mlm_weight * MLM, as PHP's own."""
    ranking = pairwise_hinge if method in PAIRWISE else lce_loss
    return php_loss(config, inputs, epoch_seed, ranking=ranking, name="rank")


def pretrain_baseline(
    method: str,
    examples: pl.DataFrame,
    config: PhpConfig,
    out_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
    *,
    init: str | None = None,
    max_steps: int | None = None,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
) -> StageResult:
    """Pre-train `method` from `init` (default: the backbone) on its examples; save a PHP-style folder.

    `max_steps` (e.g. the optimizer steps PHP's three stages took together) replaces the TrainConfig's cap.
    """
    from dagster_ir.neural.backbone import backbone_path

    if method not in METHODS:
        raise ValueError(f"unknown pre-training baseline {method!r}: choose from {METHODS}")
    examples = examples.filter(pl.col("method") == method)
    if config.max_examples is not None and examples.height > config.max_examples:
        chosen = np.sort(
            np.random.default_rng(config.train.seed).choice(examples.height, config.max_examples, replace=False)
        )
        examples = examples[chosen]
    init = init or backbone_path(config.backbone)
    train_config = baseline_train_config(config)
    if max_steps is not None:
        if max_steps < 1:
            raise ValueError(f"pretrain_baseline: max_steps must be >= 1, got {max_steps}")
        train_config = replace(train_config, max_steps=max_steps)
    model = PhpModel.from_pretrained(init, config, seed=train_config.seed)
    info = {"method": method, "init": init, "examples": examples.height, "config": asdict(config)}
    if examples.height == 0:
        on_rank_zero(model.save, out_dir, {**info, "skipped": True})
        return StageResult(method, Path(out_dir), init, 0, None)
    inputs = BaselineInputs(examples, model.scorer, config)
    items = list(range(len(inputs)))

    def make_batches(epoch: int, rng: np.random.Generator) -> list[list[tuple[int, int]]]:
        return shuffled_batches([(i, epoch) for i in items], train_config.batch_size, rng)

    loss_fn = baseline_loss(method, config, inputs, lambda epoch: seed_of(train_config.seed, method, epoch))
    result = train(model, make_batches, loss_fn, train_config, checkpoint_dir, on_log=on_log)
    # under torchrun every process holds the same weights: rank 0 writes them
    on_rank_zero(model.save, out_dir, {**info, "steps": result.steps, "loss_curve": result.loss_curve})
    return StageResult(method, Path(out_dir), init, examples.height, result)
