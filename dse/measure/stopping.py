"""The adaptive stopping rule of a latency run: whether the samples so far pin the median (and
every required quantile) down to the target, and when it is worth asking.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np

from dse.measure.stats import (
    autocorrelation_time,
    halves_agree,
    median_rel_halfwidth,
    quantile_ci,
    samples_for_ci,
)

#: At most about this share of a timed window goes to deciding whether to stop. The checks run
#: between timed calls, inside the telemetry window, where their time would be charged to the model.
CHECK_SHARE = 0.01


class StoppingCheck:
    """Whether a run may stop, asked between timed calls and kept cheap.

    Checks come at geometrically spaced sample counts (each at least 10% after the last), and
    only while the time spent checking, this check included (estimated by the last one's cost; for
    the first, by a check on stand-in data), stays within :data:`CHECK_SHARE` of the time elapsed.
    A check costs a few passes over the samples; spaced by count alone, checks at 100k samples of
    a 10 µs call took 15-25% of the window, and most of it for a no-op call. The samples are copied
    into an array as they come (only the new ones at each check), not converted whole each time.
    Which samples a check sees, and what it decides from them, is unchanged: only when it looks.
    """

    def __init__(self, target_rel_ci: float, min_iters: int,
                 required_quantiles: Sequence[float] = (), blocks: int = 1) -> None:
        self.target_rel_ci = target_rel_ci
        # The median's CI is checked anyway; any other required quantile must have one too, in
        # the pooled run: ``blocks`` blocks of this one's length and correlation.
        self.quantiles = [q for q in required_quantiles if q != 0.5]
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
            median_rel_halfwidth(stand_in)
            halves_agree(stand_in)  # every part: a check that passes the first pays for all
            for quantile in self.quantiles:
                self._pooled_has_ci(stand_in, quantile)
            self._last_cost = min(self._last_cost, time.perf_counter() - start)

    def due(self, n: int, elapsed: float) -> bool:
        return n >= self.next_n and self.seconds + self._last_cost <= CHECK_SHARE * elapsed

    def passes(self, samples: list[float]) -> bool:
        """Check now: the median's CI is within the target and the run's halves agree."""
        start = time.perf_counter()
        n = len(samples)
        data = self._mirror(samples)
        # A precise median of a run whose halves disagree is precise about a mixture of two
        # machine states: keep measuring then, until the halves agree or time runs out.
        done = (median_rel_halfwidth(data) <= self.target_rel_ci and halves_agree(data)
                and all(self._pooled_has_ci(data, q) for q in self.quantiles))
        self._last_cost = time.perf_counter() - start
        self.seconds += self._last_cost
        self.next_n = n + max(10, n // 10)
        return done

    def _pooled_has_ci(self, data: np.ndarray, quantile: float) -> bool:
        """Whether ``blocks`` runs like ``data`` would give ``quantile`` a 95% interval: their
        effective sample count (n x blocks / the autocorrelation time) reaches its floor. With
        one block, exactly whether :func:`quantile_ci` has one."""
        if self.blocks == 1:
            return quantile_ci(data, quantile) is not None
        tau = autocorrelation_time(data, float(np.quantile(data, quantile)))
        return int(len(data) * self.blocks / tau) >= samples_for_ci(quantile)

    def _mirror(self, samples: list[float]) -> np.ndarray:
        n = len(samples)
        if n > len(self._array):
            grown = np.empty(max(n, 2 * len(self._array)))
            grown[: self._filled] = self._array[: self._filled]
            self._array = grown
        self._array[self._filled : n] = samples[self._filled :]
        self._filled = n
        return self._array[:n]
