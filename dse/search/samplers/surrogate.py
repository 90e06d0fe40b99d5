"""dse's default sampler: a few candidates spread over the space, then always the unmeasured
candidate a model of the measurements so far expects to extend the Pareto front the most.

Each proposal fits a regression forest (:mod:`dse.search.samplers.forest`) on the profile's
measured candidates — their parameters as features (:mod:`dse.search.samplers.features`), their
objectives as targets — scores unmeasured candidates by the hypervolume their optimistic
prediction adds to the front (:mod:`dse.search.samplers.acquisition`) and proposes the best. The
candidates scored are the whole space when it is discrete and holds at most ``LIST_LIMIT``
combinations, else random ones plus neighbours of the front (one parameter changed). A candidate
already proposed on this study is never proposed again while an unmeasured one is left.

Each device's model learns from its own study only; a new device starts from the first device's
front through the campaign's warm start (:mod:`dse.search.warm_start`). Learning inside the sampler
from another device's study cost more candidates than it saved on the recorded pairs
(docs/benchmarks.md, "A second device").

Optuna integration: the proposal is made in ``before_trial`` and handed out parameter by
parameter in ``sample_independent``, so conditional parameters work as in any define-by-run
study; enqueued trials (baseline, warm-start seeds, re-queues) keep their fixed parameters.
Without a :class:`SamplerContext` (a study opened without its device's space) every proposal is
random.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna

from dse.core import TrialAttr
from dse.search.candidate_space import LISTING_LIMIT, CandidateSpace, Params, params_key
from dse.search.samplers.acquisition import choose
from dse.search.samplers.features import FeatureEncoder
from dse.search.samplers.forest import ForestSurrogate
from dse.util import FloatArray, undominated

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

#: A discrete space of at most this many candidates is scored in full at every proposal (the
#: limit up to which the search loop also counts a space, to stop once it is measured in full).
LIST_LIMIT = LISTING_LIMIT
#: Random candidates scored per proposal in a larger or continuous space ...
POOL_DRAWS = 1000
#: ... plus about this many neighbours of the front's members (at least 2 each).
NEIGHBOURS = 600
#: Optimism: prediction less BETA times the trees' spread. On the recorded tables of
#: benchmarks/search_efficiency.py (20 seeds each): 1.0 missed 99 % within the budget on 2 of 20
#: cnn-digits seeds, 1.25 and 1.5 reached it on every seed, 2 needed about a third more
#: candidates on the transformer cut (measured with a random start of 5).
BETA = 1.5
#: The start: after a first random candidate, each the farthest (L1 over the features) from those
#: asked — space-filling — rather than drawn at random. Over 40 seeds of the recorded tables it
#: needed fewer candidates on all five (medians, e.g. onnx-deploy 1 core 15 -> 12, transformer
#: 27 -> 24).
SPREAD_START = True


@dataclass
class SamplerContext:
    """What a space-aware sampler knows beyond Optuna's study: the device's candidate space."""

    candidates: CandidateSpace


@dataclass(frozen=True)
class _Measured:
    """Distinct measured candidates of a study: parameters, minimised objectives, feasibility;
    and the parameters of those that failed (could not be built, run or measured)."""

    params: list[Params]
    values: FloatArray
    feasible: np.ndarray
    failed: list[Params]


def measured(study: optuna.Study) -> tuple[_Measured, set[str], list[Params]]:
    """The study's distinct completed candidates (and failed ones); the keys of every candidate
    it has asked (whatever became of them); the parameters of trials still running."""
    signs = np.array([1.0 if d == optuna.study.StudyDirection.MINIMIZE else -1.0
                      for d in study.directions])
    params: list[Params] = []
    values: list[list[float]] = []
    feasible: list[bool] = []
    seen: set[str] = set()
    asked: set[str] = set()
    running: list[Params] = []
    failed: list[Params] = []
    failed_keys: set[str] = set()
    for trial in study.get_trials(deepcopy=False):
        if not trial.params:
            continue
        key = params_key(trial.params)
        asked.add(key)
        if trial.state == optuna.trial.TrialState.RUNNING:
            running.append(dict(trial.params))
        if (trial.state == optuna.trial.TrialState.FAIL and key not in failed_keys
                and not trial.user_attrs.get(TrialAttr.INTERRUPTED)):
            failed_keys.add(key)
            failed.append(dict(trial.params))
        if (trial.state != optuna.trial.TrialState.COMPLETE or trial.values is None
                or key in seen or not all(math.isfinite(v) for v in trial.values)):
            continue
        seen.add(key)
        params.append(dict(trial.params))
        values.append(list(signs * np.asarray(trial.values, dtype=np.float64)))
        feasible.append(all(c <= 0 for c in trial.constraints.values()))
    array = np.array(values, dtype=np.float64).reshape(len(values), len(signs))
    failed = [p for p in failed if params_key(p) not in seen]  # a later success wins
    return _Measured(params, array, np.array(feasible, dtype=bool), failed), asked, running


class SurrogateSampler(optuna.samplers.BaseSampler):
    """See the module's documentation. Until ``startup_trials`` candidates are measured the
    model does not steer: the first candidate is drawn as Optuna's ``RandomSampler(seed)`` would,
    each next one is the farthest from those asked (``SPREAD_START``; drawn at random without
    it)."""

    def __init__(self, context: SamplerContext | None, *, seed: int, startup_trials: int) -> None:
        self.context = context
        self.startup_trials = startup_trials
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._rng = np.random.default_rng(seed)
        self._proposals: dict[int, Params] = {}
        self._pool: list[Params] | None = None  # the listed space ([]: not listable)
        self._pool_keys: list[str] = []
        self._pool_features: FloatArray | None = None
        self._pool_encoder: FeatureEncoder | None = None
        self._encoder: FeatureEncoder | None = None

    # -- Optuna's sampler interface -----------------------------------------------------------

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if self.context is None or "fixed_params" in trial.system_attrs:
            return
        proposal = self.propose(study)
        if proposal is not None:
            self._proposals[trial.number] = proposal

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        proposal = self._proposals.get(trial.number, {})
        if param_name in proposal:
            value = proposal[param_name]
            try:
                if param_distribution._contains(param_distribution.to_internal_repr(value)):
                    return value
            except (ValueError, TypeError):
                pass
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial,
                    state: optuna.trial.TrialState, values: Sequence[float] | None) -> None:
        self._proposals.pop(trial.number, None)

    def reseed_rng(self) -> None:
        self._random.reseed_rng()
        self._rng = np.random.default_rng()

    # -- proposing ----------------------------------------------------------------------------

    def propose(self, study: optuna.Study) -> Params | None:
        """The next candidate's parameters; None for a random one (the first; the whole start
        without ``SPREAD_START``; or nothing unmeasured left to score)."""
        assert self.context is not None
        own, asked, running = measured(study)
        starting = len(own.params) < self.startup_trials
        if starting and (not SPREAD_START or not asked):
            return None
        pool, keys, pool_features = self._candidates(own)
        fresh = np.array([key not in asked for key in keys], dtype=bool)
        if not fresh.any():
            return None
        pool = [p for p, keep in zip(pool, fresh, strict=True) if keep]
        if starting:
            return pool[self._farthest(study, pool_features[fresh])]
        encoder = self._encoder_for()
        low, span = _scale(own.values)
        model = ForestSurrogate(encoder.encode(own.params), own.values,
                                seed=int(self._rng.integers(2**31)))
        prediction = model.predict(pool_features[fresh])
        optimistic = (prediction.mean - BETA * prediction.spread - low) / span
        front = (own.values[own.feasible] - low) / span
        if running:  # measured elsewhere right now: assume its predicted result (a fantasy)
            front = np.vstack([front, (model.predict(encoder.encode(running)).mean - low) / span])
        reference = np.full(own.values.shape[1], 1.1)
        front = front[np.all(front < reference, axis=1)]
        success = None
        if own.failed:  # steer off what looks like the candidates that failed
            success = _success_chance(encoder.encode(own.params + own.failed),
                                      len(own.params), pool_features[fresh],
                                      seed=int(self._rng.integers(2**31)))
        return pool[choose(optimistic, front, reference, self._rng, success)]

    def _farthest(self, study: optuna.Study, features: FloatArray) -> int:
        """The row of ``features`` farthest (L1) from every candidate the study has asked; ties
        broken at random."""
        asked = [t.params for t in study.get_trials(deepcopy=False) if t.params]
        distance = np.full(len(features), np.inf)
        for row in self._encoder_for().encode(asked):  # one asked row at a time: memory O(pool)
            distance = np.minimum(distance, np.abs(features - row).sum(axis=1))
        best = np.flatnonzero(distance >= distance.max() - 1e-12)
        return int(self._rng.choice(best))

    def _candidates(self, own: _Measured) -> tuple[list[Params], list[str], FloatArray]:
        """The candidates to score, their keys and their features (a listed space's are kept)."""
        assert self.context is not None
        space = self.context.candidates
        if self._pool is None:
            self._pool = space.listing(LIST_LIMIT) or []
            self._pool_keys = [params_key(p) for p in self._pool]
        if self._pool:
            encoder = self._encoder_for()
            if self._pool_features is None or self._pool_encoder is not encoder:
                self._pool_features, self._pool_encoder = encoder.encode(self._pool), encoder
            return self._pool, self._pool_keys, self._pool_features
        pool = [space.draw(self._rng) for _ in range(POOL_DRAWS)]
        members = np.flatnonzero(undominated(own.values, own.values, own.values))  # the front's
        each = max(2, NEIGHBOURS // max(1, len(members)))
        for index in members:
            pool.extend(space.neighbour(own.params[index], self._rng) for _ in range(each))
        return pool, [params_key(p) for p in pool], self._encoder_for().encode(pool)

    def _encoder_for(self) -> FeatureEncoder:
        assert self.context is not None
        distributions = self.context.candidates.distributions
        if self._encoder is None or set(self._encoder.columns) != set(distributions):
            self._encoder = FeatureEncoder(distributions)
        return self._encoder


def _success_chance(features: FloatArray, succeeded: int, pool: FloatArray, *,
                    seed: int) -> FloatArray:
    """Per pool row, a forest classifier's chance that it measures (trained on ``features``, of
    which the first ``succeeded`` rows measured and the rest failed)."""
    from sklearn.ensemble import RandomForestClassifier

    labels = np.arange(len(features)) < succeeded
    classifier = RandomForestClassifier(n_estimators=32, random_state=seed, n_jobs=1)
    classifier.fit(features, labels)
    chances: FloatArray = classifier.predict_proba(pool)[:, list(classifier.classes_).index(True)]
    return chances


def _scale(values: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per objective: the lowest value and the range (1 where all values are equal)."""
    low = values.min(axis=0)
    span = values.max(axis=0) - low
    return low, np.where(span > 0, span, 1.0)
