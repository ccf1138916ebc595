"""What every trained ranker shares: backbone loading, the training loop, the cross-encoder, fine-tuning, reranking.
Used by the methods (`dagster_ir.methods`) and by the `php` group's `cross_encoder` and `reranked_runs` assets.
Start reading at `training` (checkpoints, bit-exact resume, DDP), then `cross_encoder`, `finetune`, `rerank`;
`distributed` (torchrun launch, relaunch, metrics) and `train_job` (any training function as a torchrun job).
`distill` warm-starts a cross-encoder from the bi-encoder's scores (Margin-MSE, opt-in).

The names below are re-exported lazily (PEP 562), so importing this package does not import torch.
"""

from importlib import import_module

_EXPORTS = {
    "training": (
        "TrainConfig",
        "TrainResult",
        "CheckpointError",
        "train",
        "shuffled_batches",
        "unwrap",
        "world",
        "latest_checkpoint",
        "on_rank_zero",
    ),
    "cross_encoder": ("CrossEncoder", "Pair", "lce_loss", "pad_pairs"),
    "rerank": ("CrossEncoderScorer", "PairScorer", "RerankConfig", "rerank", "score_encoded"),
    "finetune": ("FineTuneConfig", "fine_tune", "dev_evaluator"),
    "distill": ("DistillConfig", "distill", "warm_start", "start_record"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
