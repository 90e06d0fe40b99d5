"""Multi-fidelity screening on the device: what the driver sends (:class:`Screening`, a snapshot of
the device's noise-aware front), the short protocol the worker screens with, and its verdict on
whether a screened candidate could still enter the front.

The driver side (keeping each device's front, building a :class:`Screening` per job) is
``dse.search.screening``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from dse.core import is_measured
from dse.measure import samples_for_ci
from dse.spec import MeasureSpec
from dse.util import dominates


@dataclass(frozen=True)
class FrontPoint:
    """A point of a device's noise-aware front: its trial, and per objective the pessimistic end
    of its measurement (the confidence interval's bad end, else the value), in metric units."""

    trial: int
    values: tuple[float, ...]


@dataclass(frozen=True)
class Screening:
    """Screen the candidate before its full measurement (multi-fidelity).

    The worker times the candidate briefly (``target_rel_ci``, at most ``max_seconds``) and
    stops there when even its optimistic objective vector is dominated by a point of ``front``
    (a snapshot of the device's noise-aware front; an older one is weaker, so staleness only
    costs savings). Optimistic per objective: the good end of the confidence interval where
    ``ci`` names one (``(low metric, high metric, quantile)``), the exact value for what is known
    before timing (accuracy, size), else the value made better by ``margin`` (a fraction).
    """

    objectives: tuple[str, ...]
    maximize: tuple[bool, ...]
    ci: tuple[tuple[str, str, float] | None, ...]
    front: tuple[FrontPoint, ...]
    target_rel_ci: float
    max_seconds: float
    margin: float


#: A relative half-width no interval exceeds in practice: the screening's precision "target".
NO_PRECISION_GATE = 99.0


def screening_measure(measure: MeasureSpec, screening: Screening) -> MeasureSpec:
    """The screening protocol: the campaign's, loosened to the screening's target and time (never
    tighter or longer than the campaign's own), with no offline or sustained run; enough samples
    for each objective's confidence interval where the time allows (p99 needs a few hundred)."""
    quantiles = [bounds[2] for bounds in screening.ci if bounds is not None]
    needed = max([samples_for_ci(q) for q in quantiles], default=1)
    seconds = min(screening.max_seconds, measure.max_seconds)
    # Twice the bare minimum: correlated samples count for less (see dse.measure.stats).
    min_iters = min(max(measure.min_iters, 2 * needed), measure.max_iters)
    return measure.model_copy(update={
        "target_rel_ci": max(screening.target_rel_ci, measure.target_rel_ci),
        "min_iters": min_iters,
        # No floor on time: the sample count above is what a verdict needs. No extension and
        # no precision gate either: a screening too short for an interval keeps its candidate
        # in (the full protocol measures it), which costs less than a longer screening.
        "min_seconds": 0.0, "max_seconds": seconds, "max_extension": 1.0,
        "precision": dict.fromkeys(measure.precision, NO_PRECISION_GATE),
        # Each block warms up: together within the screening's time, not a multiple of it.
        "warmup_max_seconds": min(measure.warmup_max_seconds, seconds) / measure.blocks,
        "offline_concurrency": 0, "sustained_seconds": 0.0})


def screening_verdict(metrics: Mapping[str, float], exact: Collection[str],
                      screening: Screening) -> tuple[bool, str]:
    """Whether a screened candidate could still enter the front, and why (one line).

    Its optimistic objective vector (see :class:`Screening`; ``exact``: the metrics known before
    timing) must be dominated by a front point's pessimistic vector for the answer to be no. An
    objective the screening could not bound (not measured, or too few samples for its interval)
    keeps the candidate in: nothing shows it cannot enter.
    """
    optimistic = []
    for name, maximize, bounds in zip(screening.objectives, screening.maximize, screening.ci,
                                      strict=True):
        value = metrics.get(name, math.nan)
        if not is_measured(name, value):
            return True, f"{name} not measured by the screening"
        if name in exact or math.isinf(value):  # an infinitely bad value has no noise
            best = value
        elif bounds is not None:
            ends = [metrics.get(bound, math.nan) for bound in bounds[:2]]
            if not all(math.isfinite(end) for end in ends):
                return True, f"the screening gave {name} no confidence interval"
            best = max(value, *ends) if maximize else min(value, *ends)
        else:
            step = screening.margin * abs(value)
            best = value + step if maximize else value - step
        optimistic.append(best)
    for point in screening.front:
        if dominates(_as_minimization(point.values, screening.maximize),
                     _as_minimization(optimistic, screening.maximize)):
            shown = ", ".join(f"{n} {v:.4g}" for n, v in zip(screening.objectives, optimistic,
                                                             strict=True))
            return False, f"dominated by front trial #{point.trial} even at best ({shown})"
    return True, "could enter the front"


def _as_minimization(values: Sequence[float], maximize: Sequence[bool]) -> list[float]:
    """Maximised objectives negated, so that smaller is better in every one."""
    return [-v if up else v for v, up in zip(values, maximize, strict=True)]
