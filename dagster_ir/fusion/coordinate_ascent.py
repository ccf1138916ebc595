"""Coordinate ascent for linear ranking weights, after RankLib's CoorAscent (Metzler & Croft 2007).

Each pass visits the coordinates in a random order. For one coordinate a line search tries steps of
growing size (``step *= step_scale``, `max_steps` of them) upward, then downward, then the weight 0,
keeping the best value of the objective; after an improvement the weights are scaled to unit L1
norm (a positive scale does not change a linear ranking). A restart ends when a pass gains less
than `tolerance` or no coordinate improved. The best weights over all restarts win.

Deviation from RankLib, on purpose: RankLib starts every restart from uniform weights and only
the coordinate order is random; here restart 0 starts uniform and later restarts from random
weights (uniform in [-1, 1], normalised), which the issue asks for ("random restarts") and which explores more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class CoordinateAscentConfig:
    """RankLib's defaults: 5 restarts, 25 steps per direction, step 0.05 of |w| (0.001 from 0), x2."""

    restarts: int = 5
    max_steps: int = 25
    step_base: float = 0.05
    first_step: float = 0.001
    step_scale: float = 2.0
    tolerance: float = 0.001
    max_passes: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        if self.restarts < 1 or self.max_steps < 1 or self.max_passes < 1:
            raise ValueError(f"CoordinateAscentConfig: restarts, max_steps, max_passes must be >= 1: {self}")
        if self.step_base <= 0 or self.first_step <= 0 or self.step_scale <= 1:
            raise ValueError(f"CoordinateAscentConfig: positive steps and step_scale > 1 needed: {self}")


@dataclass(frozen=True)
class AscentResult:
    """The best weights (unit L1 norm), their objective value and the best value of each restart."""

    weights: np.ndarray
    score: float
    restart_scores: list[float] = field(default_factory=list)
    evaluations: int = 0


def coordinate_ascent(
    objective: Callable[[np.ndarray], float], n_features: int, config: CoordinateAscentConfig = CoordinateAscentConfig()
) -> AscentResult:
    """Maximise `objective(weights)` over linear weights of `n_features` features."""
    if n_features < 1:
        raise ValueError("coordinate_ascent: need at least one feature")
    rng = np.random.default_rng(config.seed)
    counter = _Counter(objective)
    best_weights, best_score, restart_scores = None, -np.inf, []
    for restart in range(config.restarts):
        start = np.full(n_features, 1.0 / n_features) if restart == 0 else _normalised(rng.uniform(-1, 1, n_features))
        weights, score = _ascend(counter, start, rng, config)
        restart_scores.append(score)
        if score > best_score:
            best_weights, best_score = weights, score
    return AscentResult(best_weights, float(best_score), restart_scores, counter.calls)


class _Counter:
    def __init__(self, objective: Callable[[np.ndarray], float]) -> None:
        self.objective = objective
        self.calls = 0

    def __call__(self, weights: np.ndarray) -> float:
        self.calls += 1
        return float(self.objective(weights))


def _ascend(
    objective: _Counter, weights: np.ndarray, rng: np.random.Generator, config: CoordinateAscentConfig
) -> tuple[np.ndarray, float]:
    weights = weights.copy()
    score = objective(weights)
    for _ in range(config.max_passes):
        pass_start, improved = score, False
        for feature in rng.permutation(weights.size):
            candidate, candidate_score = _line_search(objective, weights, feature, score, config)
            if candidate_score > score:
                weights, score, improved = _normalised(candidate), candidate_score, True
        if not improved or score - pass_start < config.tolerance:
            break
    return weights, score


def _line_search(
    objective: _Counter, weights: np.ndarray, feature: int, score: float, config: CoordinateAscentConfig
) -> tuple[np.ndarray, float]:
    """The best weight for one coordinate: growing steps up, then down, then zero (first success wins)."""
    original = weights[feature]
    for direction in (1.0, -1.0, 0.0):
        best_value, best_score = None, score
        for value in _trial_values(original, direction, config):
            trial = weights.copy()
            trial[feature] = value
            trial_score = objective(trial)
            if trial_score > best_score:
                best_value, best_score = value, trial_score
        if best_value is not None:
            result = weights.copy()
            result[feature] = best_value
            return result, best_score
    return weights, score


def _trial_values(original: float, direction: float, config: CoordinateAscentConfig) -> list[float]:
    if direction == 0.0:
        return [0.0] if original != 0.0 else []
    step = config.first_step * direction
    if original != 0.0 and abs(step) > 0.5 * abs(original):
        step = config.step_base * abs(original) * direction
    values, total = [], step
    for _ in range(config.max_steps):
        values.append(original + total)
        step *= config.step_scale
        total += step
    return values


def _normalised(weights: np.ndarray) -> np.ndarray:
    norm = np.abs(weights).sum()
    return weights / norm if norm > 0 else weights
