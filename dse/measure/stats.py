"""Latency statistics: percentiles with distribution-free confidence intervals.

The CI of a quantile comes from binomial order statistics: for the q-quantile of n independent
samples, the number of samples below the true quantile is Binomial(n, q), so a pair of order
statistics (x_(l), x_(u)) brackets it with probability F(u-1) - F(l-1). No distribution is
assumed, which matters for latencies: they are skewed and often multi-modal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dse.exceptions import MeasurementError

CONFIDENCE = 0.95

# (name, quantile) of every percentile reported; each gets a CI when n supports one.
PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))


def quantile_ci_ranks(n: int, q: float, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """1-based ranks (l, u) with P(x_(l) <= quantile_q < x_(u)) >= ``confidence``, or None when
    ``n`` samples are too few for such an interval (e.g. p99 needs a few hundred)."""
    from scipy.stats import binom

    alpha = 1.0 - confidence
    low = int(binom.ppf(alpha / 2, n, q))          # smallest k with F(k) >= alpha/2
    high = int(binom.ppf(1 - alpha / 2, n, q)) + 1  # F(high - 1) >= 1 - alpha/2
    if low < 1 or high > n:
        return None
    return low, high


def quantile_ci(sorted_samples: np.ndarray, q: float,
                confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    ranks = quantile_ci_ranks(len(sorted_samples), q, confidence)
    if ranks is None:
        return None
    return float(sorted_samples[ranks[0] - 1]), float(sorted_samples[ranks[1] - 1])


def median_rel_halfwidth(samples: Sequence[float] | np.ndarray) -> float:
    """The larger distance from the median to an end of its 95% CI, relative to the median;
    infinity while there are too few samples for a CI."""
    data = np.sort(np.asarray(samples, dtype=np.float64))
    ci = quantile_ci(data, 0.5)
    median = float(np.median(data)) if len(data) else 0.0
    if ci is None or median <= 0:
        return float("inf")
    return max(median - ci[0], ci[1] - median) / median


@dataclass(frozen=True)
class LatencyStats:
    """Summary of one single-stream latency run. Times are per call (one batch), in ms.

    ``pXX_ci_ms`` is the 95% confidence interval of that percentile, or None when the sample
    count cannot support one. ``target_met`` says whether the median's CI reached the requested
    relative half-width before a limit stopped the run.
    """

    n: int
    seconds: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    p50_ci_ms: tuple[float, float] | None
    p90_ci_ms: tuple[float, float] | None
    p95_ci_ms: tuple[float, float] | None
    p99_ci_ms: tuple[float, float] | None
    p999_ci_ms: tuple[float, float] | None
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    rel_ci: float
    target_rel_ci: float
    target_met: bool
    warmup_iters: int = 0
    warmup_seconds: float = 0.0
    first_call_ms: float = float("nan")
    timer_overhead_ns: float = float("nan")
    samples_ms: list[float] = field(default_factory=list, repr=False)

    def throughput(self, batch_size: int) -> float:
        """Samples per second at ``batch_size``, from the mean latency (work done / time)."""
        return batch_size * 1000.0 / self.mean_ms


def summarize(samples_ms: Sequence[float], *, seconds: float, target_rel_ci: float = 0.01,
              warmup_iters: int = 0, warmup_seconds: float = 0.0,
              first_call_ms: float = float("nan"),
              timer_overhead_ns: float = float("nan")) -> LatencyStats:
    """Every statistic of a latency sample (``samples_ms`` in the order they were taken)."""
    if len(samples_ms) == 0:
        raise MeasurementError("no latency samples were taken")
    data = np.asarray(samples_ms, dtype=np.float64)
    ordered = np.sort(data)
    values = {name: float(np.quantile(ordered, q)) for name, q in PERCENTILES}
    cis = {name: quantile_ci(ordered, q) for name, q in PERCENTILES}
    q25, q75 = np.quantile(ordered, [0.25, 0.75])
    rel_ci = median_rel_halfwidth(ordered)
    return LatencyStats(
        n=len(data), seconds=seconds,
        p50_ms=values["p50"], p90_ms=values["p90"], p95_ms=values["p95"], p99_ms=values["p99"],
        p999_ms=values["p999"],
        p50_ci_ms=cis["p50"], p90_ci_ms=cis["p90"], p95_ci_ms=cis["p95"], p99_ci_ms=cis["p99"],
        p999_ci_ms=cis["p999"],
        mean_ms=float(data.mean()), std_ms=float(data.std(ddof=1)) if len(data) > 1 else 0.0,
        min_ms=float(ordered[0]), max_ms=float(ordered[-1]), iqr_ms=float(q75 - q25),
        rel_ci=rel_ci, target_rel_ci=target_rel_ci, target_met=rel_ci <= target_rel_ci,
        warmup_iters=warmup_iters, warmup_seconds=warmup_seconds, first_call_ms=first_call_ms,
        timer_overhead_ns=timer_overhead_ns, samples_ms=[float(v) for v in data],
    )


def drift_pct(samples_ms: Sequence[float]) -> float:
    """Median of the last tenth of a run against the first tenth, in percent (sustained mode):
    positive when the device got slower as it heated up."""
    data = np.asarray(samples_ms, dtype=np.float64)
    tenth = len(data) // 10
    if tenth < 1:
        raise MeasurementError(f"drift needs at least 10 samples, got {len(data)}")
    first, last = float(np.median(data[:tenth])), float(np.median(data[-tenth:]))
    return 100.0 * (last - first) / first
