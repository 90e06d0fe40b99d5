"""Distribution-free confidence intervals of quantiles from binomial order statistics: which
ranks bracket a quantile, and how many independent samples a percentile's interval needs. The
measurement (:mod:`dse.measure.stats`) and the YAML checks (sample floors) both read it.
"""

from __future__ import annotations

import functools
import math

CONFIDENCE = 0.95

# (name, quantile) of every percentile reported; each gets a CI when n supports one.
PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))

# samples_for_ci of each reported percentile at CONFIDENCE, as its search finds them
# (tests/measure/test_stats.py checks each is the first n with an interval): the YAML checks read
# these without importing scipy, which would cost every `dse validate` and `dse run` half a second.
_SAMPLE_FLOORS = {0.50: 6, 0.90: 36, 0.95: 72, 0.99: 368, 0.999: 3688}


def quantile_ci_ranks(n: int, q: float, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """1-based ranks (l, u) with P(x_(l) <= quantile_q < x_(u)) >= ``confidence``, or None when
    ``n`` samples are too few for such an interval (e.g. p99 needs a few hundred)."""
    alpha = 1.0 - confidence
    low = binomial_quantile(alpha / 2, n, q)           # smallest k with F(k) >= alpha/2
    high = binomial_quantile(1 - alpha / 2, n, q) + 1  # F(high - 1) >= 1 - alpha/2
    if low < 1 or high > n:
        return None
    return low, high


def binomial_quantile(level: float, n: int, p: float) -> int:
    """The smallest k in 0..n with P(X <= k) >= ``level`` for X ~ Binomial(``n``, ``p``).

    From scipy.special's binomial distribution function and its inverse in k (which is
    continuous: the step to the integer is checked against the distribution function itself).
    scipy.stats would give the same through ``binom.ppf`` but costs a second to import in every
    process that measures (0.3 s for scipy.special).
    """
    # Imported on first use, yet never inside a measurement window: dse.measure.stats, which
    # the harness imports before any window, imports scipy.special at its top.
    from scipy.special import bdtr, bdtrik

    guess = float(bdtrik(level, n, p))
    k = min(n, max(0, math.ceil(guess))) if math.isfinite(guess) else 0
    while k > 0 and float(bdtr(k - 1, n, p)) >= level:
        k -= 1
    while k < n and float(bdtr(k, n, p)) < level:
        k += 1
    return k


def student_t_quantile(level: float, degrees_of_freedom: float) -> float:
    """The ``level`` quantile of Student's t with ``degrees_of_freedom`` (scipy.special's
    inverse of its distribution function: scipy.stats costs a second to import)."""
    from scipy.special import stdtrit

    return float(stdtrit(degrees_of_freedom, level))


@functools.cache
def samples_for_ci(quantile: float, confidence: float = CONFIDENCE) -> int:
    """The fewest independent samples that give the ``quantile`` a confidence interval (6 for the
    median, 368 for p99, 3688 for p99.9); correlated samples need more
    (:mod:`dse.measure.stats`)."""
    if not 0 < quantile < 1:
        raise ValueError(f"quantile must lie in (0, 1), got {quantile}")
    if confidence == CONFIDENCE and quantile in _SAMPLE_FLOORS:
        return _SAMPLE_FLOORS[quantile]
    low, high = 2, 2
    while quantile_ci_ranks(high, quantile, confidence) is None:
        low, high = high, high * 2
    while low < high:  # the first n that has one; more samples never lose it
        middle = (low + high) // 2
        if quantile_ci_ranks(middle, quantile, confidence) is None:
            low = middle + 1
        else:
            high = middle
    return high


def percentile_quantile(name: str) -> float:
    """The quantile of a reported percentile's name (``p99`` -> 0.99); KeyError if none."""
    return dict(PERCENTILES)[name]


