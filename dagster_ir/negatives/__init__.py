"""Negative sampling for training rerankers: strategies over candidate runs, false negatives."""

from dagster_ir.negatives.sampling import (
    NegativeConfig,
    NegativeSample,
    SamplingCounts,
    false_negative_share,
    sample_negatives,
)

__all__ = [
    "NegativeConfig",
    "NegativeSample",
    "SamplingCounts",
    "false_negative_share",
    "sample_negatives",
]
