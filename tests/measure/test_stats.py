"""Percentile confidence intervals from binomial order statistics."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from dse.core.exceptions import MeasurementError
from dse.measure.stats import drift_pct, quantile_ci_ranks, summarize


def test_median_ranks_match_the_textbook_table() -> None:
    # Classic distribution-free 95% CI of the median: n=10 -> (x_(2), x_(9)); n=20 -> (6, 15).
    assert quantile_ci_ranks(10, 0.5) == (2, 9)
    assert quantile_ci_ranks(20, 0.5) == (6, 15)


@pytest.mark.parametrize(("n", "q"), [(30, 0.5), (100, 0.9), (500, 0.99), (5000, 0.999)])
def test_ranks_cover_at_least_95_percent(n: int, q: float) -> None:
    ranks = quantile_ci_ranks(n, q)
    assert ranks is not None
    low, high = ranks
    coverage = binom.cdf(high - 1, n, q) - binom.cdf(low - 1, n, q)
    assert coverage >= 0.95


def test_too_few_samples_give_no_interval() -> None:
    assert quantile_ci_ranks(5, 0.5) is None
    assert quantile_ci_ranks(100, 0.99) is None
    stats = summarize(list(np.random.default_rng(6).uniform(1, 2, 100)), seconds=1.0)
    assert stats.p50_ci_ms is not None
    assert stats.p99_ci_ms is None


def test_empirical_coverage_of_the_median_interval() -> None:
    rng = np.random.default_rng(1)
    true_median = np.log(2)  # of an exponential with rate 1: skewed, like latencies
    hits = 0
    for _ in range(400):
        stats = summarize(list(rng.exponential(1.0, 60)), seconds=1.0)
        assert stats.p50_ci_ms is not None
        hits += stats.p50_ci_ms[0] <= true_median <= stats.p50_ci_ms[1]
    assert hits / 400 >= 0.93


def test_summary_statistics() -> None:
    data = [float(v) for v in range(1, 101)]
    stats = summarize(data, seconds=2.0)
    assert stats.p50_ms == pytest.approx(50.5)
    assert stats.iqr_ms == pytest.approx(np.quantile(data, 0.75) - np.quantile(data, 0.25))
    assert stats.min_ms == 1 and stats.max_ms == 100
    assert stats.throughput(8) == pytest.approx(8 * 1000 / 50.5)
    with pytest.raises(MeasurementError):
        summarize([], seconds=0.0)


def test_drift_compares_last_tenth_to_first() -> None:
    assert drift_pct([1.0] * 10 + [1.5] * 80 + [1.1] * 10) == pytest.approx(10.0)
    with pytest.raises(MeasurementError):
        drift_pct([1.0] * 5)


def test_a_run_that_changed_state_is_not_stationary() -> None:
    rng = np.random.default_rng(2)
    steady = list(rng.normal(1.0, 0.01, 400))
    shifted = list(rng.normal(1.0, 0.01, 200)) + list(rng.normal(1.5, 0.01, 200))
    assert summarize(steady, seconds=1.0).stationary
    assert not summarize(shifted, seconds=1.0).stationary


def test_independent_samples_keep_the_textbook_interval() -> None:
    from dse.measure.stats import autocorrelation_time, quantile_ci

    data = np.random.default_rng(4).exponential(1.0, 400)
    assert autocorrelation_time(data, float(np.median(data))) < 1.3
    ranks = quantile_ci_ranks(400, 0.5)
    assert ranks is not None
    ordered = np.sort(data)
    textbook = (ordered[ranks[0] - 1], ordered[ranks[1] - 1])
    ci = quantile_ci(data, 0.5)
    assert ci is not None
    # no wider than the textbook interval plus the little the rank rounding adds
    assert ci[0] >= ordered[max(0, ranks[0] - 12)] and ci[1] <= ordered[min(399, ranks[1] + 12)]
    assert ci[0] <= textbook[0] and ci[1] >= textbook[1]


def test_correlated_samples_widen_the_interval_and_keep_coverage() -> None:
    from dse.measure.stats import autocorrelation_time, quantile_ci

    rng = np.random.default_rng(5)
    hits = 0
    widths_iid, widths_ar = [], []
    for _ in range(300):
        # AR(1) noise around 1.0: runs of slow and fast calls, as on a busy machine
        noise = np.empty(300)
        noise[0] = rng.normal()
        for t in range(1, 300):
            noise[t] = 0.8 * noise[t - 1] + rng.normal() * 0.6
        data = 1.0 + 0.01 * noise
        ci = quantile_ci(data, 0.5)
        assert ci is not None
        hits += ci[0] <= 1.0 <= ci[1]
        widths_ar.append(ci[1] - ci[0])
        shuffled = rng.permutation(data)
        iid = quantile_ci(shuffled, 0.5)
        assert iid is not None
        widths_iid.append(iid[1] - iid[0])
    assert autocorrelation_time(data, float(np.median(data))) > 3
    assert np.mean(widths_ar) > 1.8 * np.mean(widths_iid)
    assert hits / 300 >= 0.90


def _ar1(seed: int, n: int, phi: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shocks = rng.normal(size=n)
    noise = np.empty(n)
    noise[0] = shocks[0]
    for t in range(1, n):
        noise[t] = phi * noise[t - 1] + shocks[t]
    return noise


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.95])
def test_fft_autocovariances_match_the_direct_means(phi: float) -> None:
    from dse.measure.stats import autocovariances

    x = _ar1(7, 3000, phi)
    x -= x.mean()
    direct = [float(np.mean(x * x))] + [float(np.mean(x[:-k] * x[k:])) for k in range(1, 200)]
    np.testing.assert_allclose(autocovariances(x, 199), direct, rtol=1e-9, atol=1e-12 * direct[0])
    with pytest.raises(ValueError, match="max_lag must lie in"):
        autocovariances(x, 3000)


def _direct_tau(samples: np.ndarray, threshold: float) -> tuple[float, int]:
    """The sum as first written, one pass per lag; and how many lags it summed."""
    indicator = (samples <= threshold).astype(np.float64)
    indicator -= indicator.mean()
    variance = float(np.mean(indicator * indicator))
    tau, summed = 1.0, 0
    for lag in range(1, min(200, len(indicator) // 4)):
        rho = float(np.mean(indicator[:-lag] * indicator[lag:])) / variance
        if rho <= 0.0:
            break
        tau += 2.0 * rho
        summed = lag
    return tau, summed


@pytest.mark.parametrize("phi", [0.0, 0.6, 0.97, 0.995])
def test_autocorrelation_time_matches_the_direct_sum(phi: float) -> None:
    from dse.measure.autocorrelation import _DIRECT_LAGS, autocorrelation_time

    data = 1.0 + 0.01 * _ar1(11, 4000, phi)
    threshold = float(np.median(data))
    expected, summed = _direct_tau(data, threshold)
    assert autocorrelation_time(data, threshold) == pytest.approx(expected, rel=1e-9)
    if phi == 0.995:  # this run is correlated past the direct lags: the FFT's figures were used
        assert summed > _DIRECT_LAGS


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_quantile_interval_selects_what_a_sort_would(q: float) -> None:
    from dse.measure.stats import autocorrelation_time, quantile_ci

    data = 1.0 + 0.01 * _ar1(3, 5000, 0.7)
    ordered = np.sort(data)
    tau = autocorrelation_time(data, float(np.quantile(ordered, q)))
    effective = max(1, int(len(data) / tau))
    ranks = quantile_ci_ranks(effective, q)
    assert ranks is not None
    scale = len(data) / effective
    low = max(1, int(np.floor(ranks[0] * scale - (scale - 1))))
    high = min(len(data), int(np.ceil(ranks[1] * scale)))
    assert quantile_ci(data, q) == (ordered[low - 1], ordered[high - 1])


def test_a_percentile_without_an_interval_is_missing_with_why() -> None:
    from dse.trial.timing import latency_metrics

    thirty = summarize([1.0 + 0.01 * (i % 7) for i in range(30)], seconds=0.1)
    missing: dict[str, str] = {}
    metrics = latency_metrics(thirty, 4, missing)
    # Thirty calls give the median an interval, never a p99 (that would be their maximum).
    assert metrics["latency_p50_ms"] == thirty.p50_ms
    assert metrics["throughput_sps"] == 4 * 1000.0 / thirty.p50_ms
    for name in ("latency_p90_ms", "latency_p95_ms", "latency_p99_ms", "latency_p999_ms",
                 "latency_p99_ci_low_ms", "latency_p99_ci_high_ms"):
        assert name not in metrics
    assert missing["latency_p99_ms"] == (
        "30 timed calls in 0.1 s are too few for a 95% confidence interval of p99 (it needs at least 368 "
        "independent ones; consecutive calls count for less when they are correlated)")
    assert "latency_p90_ms" in missing and "needs at least 36" in missing["latency_p90_ms"]

    five = summarize([1.0, 1.1, 1.2, 1.3, 1.4], seconds=0.01)
    missing = {}
    metrics = latency_metrics(five, 1, missing)
    assert "latency_p50_ms" not in metrics and "throughput_sps" not in metrics
    assert missing["throughput_sps"] == "comes from the median latency, which is missing"


def test_a_run_below_its_floor_is_underpowered() -> None:
    data = [1.0 + 0.01 * (i % 7) for i in range(100)]
    assert summarize(data, seconds=0.1, min_samples=100).underpowered is False
    assert summarize(data, seconds=0.1, min_samples=101).underpowered is True
    # A required percentile without an interval: 100 samples cannot give p99 one.
    assert summarize(data, seconds=0.1, required_quantiles=(0.99,)).underpowered is True


def test_samples_for_an_interval_grow_with_the_percentile() -> None:
    from dse.measure.stats import samples_for_ci

    needed = [samples_for_ci(q) for q in (0.5, 0.9, 0.95, 0.99, 0.999)]
    assert needed == [6, 36, 72, 368, 3688]
    for q, n in zip((0.5, 0.9, 0.95, 0.99, 0.999), needed, strict=True):
        assert quantile_ci_ranks(n, q) is not None and quantile_ci_ranks(n - 1, q) is None


@pytest.mark.parametrize("n", [1, 2, 5, 6, 36, 100, 368, 1000, 3688, 20000])
@pytest.mark.parametrize("p", [0.5, 0.9, 0.95, 0.99, 0.999])
def test_the_binomial_and_t_quantiles_are_scipy_stats_own(n: int, p: float) -> None:
    # dse computes them from scipy.special (scipy.stats costs a second to import in every
    # measuring process); they must be the very numbers scipy.stats gives.
    from scipy.stats import t

    from dse.util.order_statistics import binomial_quantile, student_t_quantile

    for level in (0.0001, 0.025, 0.5, 0.975, 0.9999):
        assert binomial_quantile(level, n, p) == int(binom.ppf(level, n, p)), (level, n, p)
    assert student_t_quantile(p, n) == pytest.approx(float(t.ppf(p, n)), rel=1e-9)


def test_measuring_imports_no_scipy_stats() -> None:
    import subprocess
    import sys

    code = ("import sys; from dse.measure import measure_latency; "
            "measure_latency(lambda: None, min_iters=20, min_seconds=0.0, max_seconds=0.1, "
            "blocks=3, block_gap_s=0.0, warmup_max_seconds=0.01, required_quantiles=(0.5, 0.99)); "
            "print('scipy.stats' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "False"
