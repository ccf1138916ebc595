"""Generic linear fusion of runs: per-query normalisation, coordinate ascent on an ir_measures measure.

`divide_by_query` normalises, `feature_frame` lines the runs up per candidate, `learn_fusion` fits
linear weights on training queries (RankLib-style coordinate ascent maximising an ir_measures
measure), `FusionModel.apply` scores new queries. Model 1's fusion runs use it from
`dagster_ir.methods.model1.runs`. `interpolate` blends a reranker with its first stage under one
weight chosen on validation queries (`interpolated_run`, the `<model>+bm25` rows).
"""

from dagster_ir.fusion.coordinate_ascent import AscentResult, CoordinateAscentConfig, coordinate_ascent
from dagster_ir.fusion.fuse import FusionConfig, FusionModel, feature_frame, learn_fusion
from dagster_ir.fusion.interpolate import GRID, WeightChoice, choose_weight, interpolate, interpolated_run
from dagster_ir.fusion.normalize import divide_by_query
from dagster_ir.fusion.objective import RankingObjective

__all__ = [
    "GRID",
    "AscentResult",
    "WeightChoice",
    "choose_weight",
    "interpolate",
    "interpolated_run",
    "CoordinateAscentConfig",
    "FusionConfig",
    "FusionModel",
    "RankingObjective",
    "coordinate_ascent",
    "divide_by_query",
    "feature_frame",
    "learn_fusion",
]
