"""Negative sampling for training rerankers: strategies over candidate runs, false negatives."""

from dagster_ir.negatives.sampling import (
    NegativeConfig,
    NegativeSample,
    SamplingCounts,
    candidate_pairs,
    epoch_seed,
    false_negative_share,
    for_epoch,
    sample_negatives,
)

__all__ = [
    "NegativeConfig",
    "NegativeSample",
    "SamplingCounts",
    "candidate_pairs",
    "epoch_seed",
    "false_negative_share",
    "for_epoch",
    "sample_negatives",
]
