"""The adaptive stopping rule of a latency run: whether the samples so far pin the median (and
every required quantile) down to the target, and when it is worth asking.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dse.measure.stats import (
    autocorrelation_time,
    halves_agree,
    median_rel_halfwidth,
    quantile_ci,
    quantile_ci_ranks,
    relative_halfwidth,
    samples_for_ci,
)

#: At most about this share of a timed window goes to deciding whether to stop. The checks run
#: between timed calls, inside the telemetry window, where their time would be charged to the model.
CHECK_SHARE = 0.01

#: The first block of several stops only once the pooled run is projected to hold this many
#: times a percentile's sample floor: the pooled run's correlation is measured later, over
#: every block, and a first block that only just passed (its estimate of the correlation a
#: little low) left the pooled run short of the floor — a p99 missing from 369 calls.
POOLED_FLOOR_MARGIN = 1.25


class StoppingCheck:
    """Whether a run may stop, asked between timed calls and kept cheap.

    Two questions: whether the sample *floors* are met (``min_iters``, and enough effective
    samples for an interval of every required quantile in the pooled run of ``blocks`` blocks),
    and whether the run is *done* (the floors, the median's interval within the target, the
    run's halves agreeing, and each quantile of ``precision`` projected within its relative
    half-width).

    Checks come at geometrically spaced sample counts (each at least 10% after the last), and
    only while the time spent checking, this check included (estimated by the last one's cost; for
    the first, by a check on stand-in data), stays within :data:`CHECK_SHARE` of the time elapsed.
    A check costs a few passes over the samples; spaced by count alone, checks at 100k samples of
    a 10 µs call took 15-25% of the window, and most of it for a no-op call. The samples are copied
    into an array as they come (only the new ones at each check), not converted whole each time.
    """

    def __init__(self, target_rel_ci: float, min_iters: int,
                 required_quantiles: Sequence[float] = (), blocks: int = 1,
                 precision: Mapping[float, float] | None = None) -> None:
        self.target_rel_ci = target_rel_ci
        self.min_iters = min_iters
        # The median's CI is checked anyway; any other required quantile must have one too, in
        # the pooled run: ``blocks`` blocks of this one's length and correlation.
        self.quantiles = [q for q in required_quantiles if q != 0.5]
        self.precision = {q: target for q, target in (precision or {}).items() if q != 0.5}
        self.blocks = blocks
        self.next_n = min_iters
        self.seconds = 0.0  # spent in checks so far
        self._array = np.empty(max(1024, min_iters))
        self._filled = 0
        # Checks on stand-in data, before the window opens: the first runs scipy's and numpy's
        # first-call paths outside the window, the second measures what a check costs here.
        stand_in = np.linspace(1.0, 2.0, max(min_iters, 20))
        self._last_cost = math.inf
        for _ in range(2):
            start = time.perf_counter()
            self._done(stand_in, every_part=True)
            self._last_cost = min(self._last_cost, time.perf_counter() - start)

    def due(self, n: int, elapsed: float) -> bool:
        return n >= self.next_n and self.seconds + self._last_cost <= CHECK_SHARE * elapsed

    def passes(self, samples: list[float]) -> bool:
        """Check now whether the run is done (floors, target, halves, precision)."""
        return self._timed(samples, lambda data: self._done(data))

    def floors_met(self, samples: list[float]) -> bool:
        """Check now whether the sample floors are met (the harness asks this alone once the
        run is past its ``max_seconds``: precision has had its time, the floors have not)."""
        return self._timed(samples, self._floors)

    def _timed(self, samples: list[float], question: Callable[[np.ndarray], bool]) -> bool:
        start = time.perf_counter()
        n = len(samples)
        answer = question(self._mirror(samples))
        self._last_cost = time.perf_counter() - start
        self.seconds += self._last_cost
        self.next_n = n + max(10, n // 10)
        return answer

    def _done(self, data: np.ndarray, every_part: bool = False) -> bool:
        # A precise median of a run whose halves disagree is precise about a mixture of two
        # machine states: keep measuring then, until the halves agree or time runs out.
        # ``every_part`` (the stand-in checks): no short cut, so the cost measured is a pass's.
        parts: tuple[Callable[[], bool], ...] = (
            lambda: median_rel_halfwidth(data) <= self.target_rel_ci,
            lambda: halves_agree(data), lambda: self._floors(data),
            lambda: all(self._projected_rel_ci(data, q) <= target
                        for q, target in self.precision.items()))
        if every_part:
            return all([part() for part in parts])
        return all(part() for part in parts)

    def _floors(self, data: np.ndarray) -> bool:
        return len(data) >= self.min_iters and all(self._pooled_has_ci(data, q)
                                                   for q in self.quantiles)

    def _pooled_has_ci(self, data: np.ndarray, quantile: float) -> bool:
        """Whether ``blocks`` runs like ``data`` would give ``quantile`` a 95% interval: their
        effective sample count (n x blocks / the autocorrelation time) reaches its floor, with
        :data:`POOLED_FLOOR_MARGIN`. With one block, exactly whether :func:`quantile_ci` has
        one."""
        if self.blocks == 1:
            return quantile_ci(data, quantile) is not None
        return self._pooled_effective(data, quantile) >= POOLED_FLOOR_MARGIN * samples_for_ci(
            quantile)

    def _pooled_effective(self, data: np.ndarray, quantile: float) -> float:
        tau = autocorrelation_time(data, float(np.quantile(data, quantile)))
        return len(data) * self.blocks / tau

    def _projected_rel_ci(self, data: np.ndarray, quantile: float) -> float:
        """The relative half-width ``quantile``'s interval would have in the pooled run (one
        block: the interval itself): the order statistics its ranks would pick, read off this
        block's distribution. Infinity while the pooled run would have none."""
        if self.blocks == 1:
            interval = quantile_ci(data, quantile)
        else:
            effective = int(self._pooled_effective(data, quantile))
            ranks = quantile_ci_ranks(effective, quantile) if effective > 1 else None
            interval = None if ranks is None else (
                float(np.quantile(data, ranks[0] / effective)),
                float(np.quantile(data, ranks[1] / effective)))
        return relative_halfwidth(float(np.quantile(data, quantile)), interval)

    def _mirror(self, samples: list[float]) -> np.ndarray:
        n = len(samples)
        if n > len(self._array):
            grown = np.empty(max(n, 2 * len(self._array)))
            grown[: self._filled] = self._array[: self._filled]
            self._array = grown
        self._array[self._filled : n] = samples[self._filled :]
        self._filled = n
        return self._array[:n]
