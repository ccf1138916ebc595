"""Fusion of BM25 with Model 1 (and other) scores: per-query normalisation, coordinate ascent.

`divide_by_query` / `query_idf_sums` normalise, `feature_frame` lines the runs up per candidate,
`learn_fusion` fits linear weights on training queries (RankLib-style coordinate ascent maximising an
ir_measures measure), `FusionModel.apply` scores new queries.
"""

from dagster_ir.fusion.bm25 import TokenBm25Config, bm25_rerank, bm25_scores
from dagster_ir.fusion.coordinate_ascent import AscentResult, CoordinateAscentConfig, coordinate_ascent
from dagster_ir.fusion.fuse import FusionConfig, FusionModel, feature_frame, learn_fusion
from dagster_ir.fusion.model1_runs import (
    BERT_RUN,
    FEATURE_RUNS,
    Model1RunsConfig,
    bm25_norms,
    candidates,
    fuse_with_bm25,
    fused_name,
    normalised_bm25,
)
from dagster_ir.fusion.normalize import divide_by_query, query_idf_sums
from dagster_ir.fusion.objective import RankingObjective

__all__ = [
    "BERT_RUN",
    "FEATURE_RUNS",
    "Model1RunsConfig",
    "bm25_norms",
    "candidates",
    "fuse_with_bm25",
    "fused_name",
    "normalised_bm25",
    "AscentResult",
    "CoordinateAscentConfig",
    "FusionConfig",
    "FusionModel",
    "RankingObjective",
    "TokenBm25Config",
    "bm25_rerank",
    "bm25_scores",
    "coordinate_ascent",
    "divide_by_query",
    "feature_frame",
    "learn_fusion",
    "query_idf_sums",
]
