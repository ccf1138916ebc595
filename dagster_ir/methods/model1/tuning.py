"""What the paper tunes on the development set for the non-parametric Model 1: lambda and p_self.

Paper 001 (section 3 and "All hyper-parameters are tuned on a development set"): the collection
weight lambda of Eq. 3 and the self-translation probability T(t|t) are set empirically. We choose
both per vocabulary from a small grid by the Model 1 ranking of BM25's candidates of the
validation queries (`dev` under a fixed split, the validation fold under cross-validation), never
the test queries. Our decision: the grid is scored with Model 1 alone, not fused with BM25 (the
fusion weights are learned afterwards, on train/fusion), so one choice costs one scoring pass.

Changing p_self needs no new EM: `prune` thresholds and caps the EM table before it sets the self
translation, so the other entries of a row do not depend on p_self and `with_self_prob` re-mixes a
pruned table exactly (`prune(t, p) == with_self_prob(prune(t, p0), p)`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from dagster_ir.evaluation import evaluate_run
from dagster_ir.methods.model1.index import CollectionStats, ForwardIndex
from dagster_ir.methods.model1.scoring import Model1Scorer, ScoringConfig
from dagster_ir.methods.model1.table import TranslationTable, with_self_prob

TUNING_COLUMNS = {
    "vocabulary": pl.String,
    "lam": pl.Float64,
    "self_prob": pl.Float64,
    "measure": pl.String,
    "score": pl.Float64,
    "chosen": pl.Boolean,
}


@dataclass(frozen=True)
class TuningGrid:
    """The grid of (lambda, p_self) scored on the validation queries, and the measure that chooses.

    Ties go to the first point in grid order (lambdas outer, p_self inner)."""

    lams: tuple[float, ...] = (0.05, 0.1, 0.3)
    self_probs: tuple[float, ...] = (0.05, 0.2, 0.5)
    measure: str = "nDCG@10"

    def __post_init__(self) -> None:
        if not self.lams or not self.self_probs:
            raise ValueError(f"TuningGrid: give at least one lambda and one p_self: {self}")
        if any(not 0 < v <= 1 for v in (*self.lams, *self.self_probs)):
            raise ValueError(f"TuningGrid: lambdas and p_self must be in (0, 1]: {self}")


@dataclass(frozen=True)
class Tuned:
    """The chosen scoring settings and table, and the score of every grid point (TUNING_COLUMNS)."""

    scoring: ScoringConfig
    table: TranslationTable
    grid: pl.DataFrame

    @property
    def self_prob(self) -> float:
        return float(self.grid.filter("chosen")["self_prob"][0])


def tune_model1(
    table: TranslationTable,
    index: ForwardIndex,
    stats: CollectionStats,
    run: pl.DataFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    base: ScoringConfig,
    grid: TuningGrid = TuningGrid(),
) -> Tuned:
    """Score `run` (the validation queries' candidates) with Model 1 at every grid point and keep the best."""
    if run.height == 0:
        raise ValueError("tune_model1: no validation candidates to tune on")
    judged = qrels.filter(pl.col("query_id").is_in(run["query_id"].unique().implode()))
    tables = {p: with_self_prob(table, p) for p in grid.self_probs}
    rows = []
    for lam in grid.lams:  # grid order: the first of equal scores wins
        for self_prob in grid.self_probs:
            scorer = Model1Scorer(tables[self_prob], index, stats, replace(base, lam=lam))
            values = evaluate_run(scorer.rerank(run, queries, "model1"), judged, [grid.measure])
            rows.append(
                {
                    "vocabulary": table.vocabulary.kind,
                    "lam": lam,
                    "self_prob": self_prob,
                    "measure": grid.measure,
                    "score": float(values["value"].mean()) if values.height else 0.0,
                }
            )
    best = max(range(len(rows)), key=lambda i: (rows[i]["score"], -i))
    frame = pl.DataFrame(rows).with_columns(chosen=pl.Series([i == best for i in range(len(rows))]))
    lam, self_prob = rows[best]["lam"], rows[best]["self_prob"]
    return Tuned(replace(base, lam=lam), tables[self_prob], frame.cast(TUNING_COLUMNS))
