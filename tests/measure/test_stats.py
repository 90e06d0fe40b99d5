"""Percentile confidence intervals from binomial order statistics."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from dse.exceptions import MeasurementError
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
    stats = summarize(list(np.linspace(1, 2, 100)), seconds=1.0)
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
