"""Linear fusion of normalised scores: weights learned by coordinate ascent on training queries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from dagster_ir.fusion.coordinate_ascent import CoordinateAscentConfig, coordinate_ascent
from dagster_ir.fusion.objective import RankingObjective
from dagster_ir.retrieval.trec import rank_run
from dagster_ir.schemas import RUN


@dataclass(frozen=True)
class FusionConfig:
    """measure: the ir_measures measure the weights maximise on the training queries."""

    measure: str = "nDCG@10"
    ascent: CoordinateAscentConfig = field(default_factory=CoordinateAscentConfig)


@dataclass(frozen=True)
class FusionModel:
    """Weights of named features (unit L1 norm) and the training objective they reached."""

    features: tuple[str, ...]
    weights: tuple[float, ...]
    train_score: float

    def apply(self, candidates: pl.DataFrame, run_name: str) -> pl.DataFrame:
        """A RUN frame: score = sum of weight * feature for every candidate."""
        missing = [f for f in self.features if f not in candidates.columns]
        if missing:
            raise KeyError(f"fusion: candidates lack feature columns {missing}")
        score = sum(pl.col(f) * w for f, w in zip(self.features, self.weights, strict=True))
        scored = candidates.select("query_id", "doc_id", score=score, run_name=pl.lit(run_name))
        return rank_run(scored).select(list(RUN)).cast(RUN)


def feature_frame(runs: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """(query_id, doc_id, one column per run's score) over the candidates of the first run.

    A candidate another run lacks gets that run's lowest score for the query (ranked below its
    documents); a query the other run lacks entirely gets 0.
    """
    if not runs:
        raise ValueError("feature_frame: no runs")
    names = list(runs)
    frame = runs[names[0]].select("query_id", "doc_id", pl.col("score").alias(names[0]))
    for name in names[1:]:
        scores = runs[name].select("query_id", "doc_id", pl.col("score").alias(name))
        frame = frame.join(scores, on=["query_id", "doc_id"], how="left", maintain_order="left")
        floor = scores.group_by("query_id").agg(pl.col(name).min().alias("_floor"))
        frame = (
            frame.join(floor, on="query_id", how="left", maintain_order="left")
            .with_columns(pl.col(name).fill_null(pl.col("_floor")).fill_null(0.0))
            .drop("_floor")
        )
    return frame


def learn_fusion(
    candidates: pl.DataFrame, features: list[str], qrels: pl.DataFrame, config: FusionConfig = FusionConfig()
) -> FusionModel:
    """Weights for `features` maximising `config.measure` over the judged queries of `candidates`."""
    objective = RankingObjective(candidates, features, qrels, config.measure)
    result = coordinate_ascent(objective, len(features), config.ascent)
    return FusionModel(tuple(features), tuple(float(w) for w in np.asarray(result.weights)), result.score)
