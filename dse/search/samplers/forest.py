"""A regression forest over candidate features that predicts every objective at once, with the
spread of its trees as the uncertainty of each prediction.

Why a forest: it fits a few hundred points in a fraction of a second on one core, needs no
tuning, takes categorical one-hot and log-scaled numeric columns alike, and its trees disagree
exactly where the data is thin — what an optimistic acquisition needs. (Optuna's GP takes
seconds per proposal at 70 trials: docs/benchmarks.md, "Samplers".)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.util import FloatArray

TREES = 48
LOG_SPAN = 10.0


@dataclass(frozen=True)
class Prediction:
    """Per candidate and objective: the trees' mean and standard deviation."""

    mean: FloatArray
    spread: FloatArray


class ForestSurrogate:
    """Fitted on ``features`` (one row per measured candidate) and ``targets`` (one column per
    objective, any scale).

    A column whose values keep one sign and span a factor of ``LOG_SPAN`` or more (latency,
    throughput, memory across batch sizes and model widths) is learnt on a log scale: its effects
    multiply, and on a linear scale the small values that make the front would be one leaf.
    Predictions come back on the targets' own scale."""

    def __init__(self, features: FloatArray, targets: FloatArray, *, seed: int) -> None:
        from sklearn.ensemble import RandomForestRegressor

        magnitude = np.abs(targets)
        same_sign = np.all(targets > 0, axis=0) | np.all(targets < 0, axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            spread = magnitude.max(axis=0) / magnitude.min(axis=0)
        self.logged = same_sign & (spread >= LOG_SPAN)
        self.signs = np.where(np.all(targets < 0, axis=0), -1.0, 1.0)
        learnt = np.where(self.logged, self.signs * np.log(np.maximum(magnitude, 1e-300)), targets)
        self.forest = RandomForestRegressor(
            n_estimators=TREES, min_samples_leaf=1, max_features=0.6, bootstrap=True,
            random_state=seed, n_jobs=1)
        self.forest.fit(features, learnt if learnt.shape[1] > 1 else learnt.ravel())
        self.outputs = targets.shape[1]

    def predict(self, features: FloatArray) -> Prediction:
        per_tree = np.stack([tree.predict(features) for tree in self.forest.estimators_])
        per_tree = per_tree.reshape(len(self.forest.estimators_), len(features), self.outputs)
        logged = self.logged
        per_tree[:, :, logged] = self.signs[logged] * np.exp(self.signs[logged] *
                                                             per_tree[:, :, logged])
        return Prediction(per_tree.mean(axis=0), per_tree.std(axis=0))
