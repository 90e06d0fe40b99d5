"""Effective sample size of correlated latencies: autocorrelation time and the interval it implies."""

from __future__ import annotations

import math

import numpy as np

from dse.util import quantile_ci_ranks

# Lags beyond this are not summed: it bounds the cost on long runs, and a correlation still
# positive that far out means the run is not stationary, which stats.halves_agree() reports.
_MAX_LAG = 200

# The sum often ends within a few lags, and each lag costs one pass over the samples; a run still
# correlated after this many lags gets the rest from one FFT, which costs some tens of passes (50 to
# 100 measured, n = 100k to 450k) however many lags it yields.
_DIRECT_LAGS = 32


def autocovariances(centered: np.ndarray, max_lag: int) -> np.ndarray:
    """``mean(x[:-k] * x[k:])`` for k = 0..``max_lag`` of a centred series, by FFT in O(n log n).

    The series is zero-padded to at least ``n + max_lag`` points, so the circular correlation the
    FFT computes has no wrapped-around terms at these lags; each sum is divided by its own number
    of terms, ``n - k``, as the direct mean is.
    """
    n = len(centered)
    if not 0 <= max_lag < n:
        raise ValueError(f"max_lag must lie in [0, n), got {max_lag=} for n={n}")
    size = 1 << (n + max_lag - 1).bit_length()  # a power of two: the fastest FFT length
    spectrum = np.fft.rfft(centered, size)
    sums = np.fft.irfft(spectrum.real ** 2 + spectrum.imag ** 2, size)[: max_lag + 1]
    return np.asarray(sums / (n - np.arange(max_lag + 1)), dtype=np.float64)


def autocorrelation_time(samples: np.ndarray, threshold: float) -> float:
    """tau of the indicator series 1[x_t <= threshold], in the order the samples were taken:
    1 + 2 * (sum of autocorrelations up to the first non-positive one).

    The first lags are computed directly; past :data:`_DIRECT_LAGS` the rest come from
    :func:`autocovariances` (the same figures up to floating-point rounding).
    """
    indicator = (samples <= threshold).astype(np.float64)
    indicator -= indicator.mean()
    variance = float(np.mean(indicator * indicator))
    if variance == 0.0:
        return 1.0
    lags = min(_MAX_LAG, len(indicator) // 4)  # lags 1 .. lags - 1 are summed
    tau = 1.0
    for lag in range(1, min(lags, _DIRECT_LAGS)):
        rho = float(np.mean(indicator[:-lag] * indicator[lag:])) / variance
        if rho <= 0.0:
            return tau
        tau += 2.0 * rho
    if lags <= _DIRECT_LAGS:
        return tau
    rhos = autocovariances(indicator, lags - 1)[_DIRECT_LAGS:] / variance
    ended = np.flatnonzero(rhos <= 0.0)
    positive = rhos[: ended[0]] if len(ended) else rhos
    return tau + 2.0 * float(np.sum(positive))


def effective_quantile_ci(data: np.ndarray, q: float, tau: float,
                          confidence: float) -> tuple[float, float] | None:
    """The order-statistic interval of the q-quantile of ``data`` counted as n / ``tau``
    independent samples."""
    n = len(data)
    # Selection, not a sort: only a few order statistics are needed (np.quantile selects too, and
    # gives the same value on unsorted data as on sorted).
    effective = max(1, int(n / tau))
    ranks = quantile_ci_ranks(effective, q, confidence)
    if ranks is None:
        return None
    # Back to ranks of the full sample, rounding outwards so the interval never shrinks.
    scale = n / effective
    low = max(1, math.floor(ranks[0] * scale - (scale - 1)))
    high = min(n, math.ceil(ranks[1] * scale))
    selected = np.partition(data, (low - 1, high - 1))
    return float(selected[low - 1]), float(selected[high - 1])
