"""Multi-fidelity measurement, the driver's side: what a device worker screens candidates against.

With ``search.screening.enabled`` every candidate a device measures is first timed briefly; the
full protocol follows only when it could still enter the device's front (successive halving with
one cut, decided on the device: see :class:`dse.trial.screening.Screening` and
``dse.trial.screening.screening_verdict``). The driver keeps, per device, the fully measured feasible
trials (:class:`FrontTracker`) and hands each job a snapshot of their noise-aware front, each
point at its pessimistic end.

Why a screened-out trial can never be on a reported front: its optimistic vector (the good end of
each confidence interval, or the value made better by the margin) is dominated by a front point's
pessimistic vector. That is noise-aware dominance as :func:`dse.search.pareto.noise_aware_mask`
applies it to the recorded values, only stricter, so the trial is off the noise-aware front, and
so off the strict one, which lies inside it. The values told to Optuna are the screening's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dse.core import Direction, TrialAttr, is_measured, metric
from dse.search.duel_records import DuelRecord, record_overrides
from dse.search.pareto import CI_COLUMNS, noise_aware_mask
from dse.spec import ConstraintSpec, ScreeningSpec
from dse.trial import FrontPoint, Screening

# The quantile behind each objective that has a confidence interval (CI_COLUMNS): the worker
# times enough samples for that interval to exist.
CI_QUANTILES: dict[str, float] = {"latency_p50_ms": 0.5, "latency_p99_ms": 0.99}


class FrontTracker:
    """One device's fully measured, feasible trials, and the noise-aware front they make (the
    verdicts of the device's earlier duels, ``duels``, deciding the pairs they ordered)."""

    def __init__(self, objectives: Sequence[str], constraints: Sequence[ConstraintSpec],
                 duels: Sequence[DuelRecord] = ()) -> None:
        self.objectives = list(objectives)
        self.constraints = list(constraints)
        self.duels = list(duels)
        self.maximize = [metric(name).direction is Direction.MAXIMIZE for name in objectives]
        self._trials: list[int] = []
        self._rows: list[tuple[list[float], list[float], list[float]]] = []
        self._front: tuple[FrontPoint, ...] = ()

    def add(self, trial: int, metrics: Mapping[str, float]) -> bool:
        """Count a fully measured trial if it is feasible and has every objective; whether it
        was counted."""
        values = [_number(metrics.get(name)) for name in self.objectives]
        if not all(is_measured(n, v) for n, v in zip(self.objectives, values, strict=True)) \
                or not self._feasible(metrics):
            return False
        lows, highs = [], []
        for name in self.objectives:
            bounds = CI_COLUMNS.get(name)
            lows.append(math.nan if bounds is None else _number(metrics.get(bounds[0])))
            highs.append(math.nan if bounds is None else _number(metrics.get(bounds[1])))
        self._trials.append(trial)
        self._rows.append((values, lows, highs))
        self._front = self._compute()
        return True

    def front(self) -> tuple[FrontPoint, ...]:
        """The noise-aware front, each point at its pessimistic end, in trial order."""
        return self._front

    def _feasible(self, metrics: Mapping[str, float]) -> bool:
        for constraint in self.constraints:
            value = _number(metrics.get(constraint.metric))
            if not is_measured(constraint.metric, value) or constraint.violation(value) > 0:
                return False
        return True

    def _compute(self) -> tuple[FrontPoint, ...]:
        values, lows, highs = (np.array([row[i] for row in self._rows], dtype=np.float64)
                               for i in range(3))
        mask = noise_aware_mask(values, lows, highs, self.objectives,
                                overrides=record_overrides(self._trials, self.duels,
                                                           self.objectives))
        points = []
        for keep, trial, row in zip(mask, self._trials, self._rows, strict=True):
            if keep:
                points.append(FrontPoint(trial, tuple(
                    _pessimistic(value, low, high, up) for value, low, high, up
                    in zip(*row, self.maximize, strict=True))))
        return tuple(points)


def screening_request(spec: ScreeningSpec, tracker: FrontTracker) -> Screening:
    """What a job carries for the worker to screen its candidate against ``tracker``'s front."""
    ci: list[tuple[str, str, float] | None] = []
    for name in tracker.objectives:
        bounds = CI_COLUMNS.get(name)
        ci.append(None if bounds is None else (bounds[0], bounds[1], CI_QUANTILES[name]))
    return Screening(tuple(tracker.objectives), tuple(tracker.maximize), tuple(ci),
                     tracker.front(), spec.target_rel_ci, spec.max_seconds, spec.margin)


def fidelity_attrs(provenance: Mapping[str, str]) -> dict[str, Any]:
    """A measured trial's user attributes for device time and fidelity, from its provenance:
    ``device_seconds`` (the device's exclusive measurement window) always where the worker
    timed one; with screening also ``fidelity`` (``screen`` | ``full``), ``screen_seconds`` and
    ``full_seconds``."""
    attrs: dict[str, Any] = {}
    start, end = (_number(provenance.get(key)) for key in ("measure_start", "measure_end"))
    if math.isfinite(start) and math.isfinite(end):
        attrs[TrialAttr.DEVICE_SECONDS] = end - start
    if "fidelity" in provenance:
        attrs[TrialAttr.FIDELITY] = provenance["fidelity"]
        for name, key in ((TrialAttr.SCREEN_SECONDS, "screen_seconds"),
                          (TrialAttr.FULL_SECONDS, "full_seconds")):
            seconds = _number(provenance.get(key))
            attrs[name] = seconds if math.isfinite(seconds) else 0.0
    return attrs


def _pessimistic(value: float, low: float, high: float, maximize: bool) -> float:
    # The value is measured (it may be a metric's infinitely bad one); a bound may be missing.
    ends = [value, *(v for v in (low, high) if math.isfinite(v))]
    return min(ends) if maximize else max(ends)


def _number(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return math.nan
    return math.nan
