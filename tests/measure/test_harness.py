"""The latency harness: stopping rules, statistics, and the first call kept apart."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dse.exceptions import MeasurementError
from dse.measure import measure_latency, summarize


def test_percentiles_match_numpy() -> None:
    samples = [float(v) for v in np.random.default_rng(0).exponential(2.0, 500)]
    stats = summarize(samples, seconds=1.0, warmup_iters=0, first_call_ms=0.0)
    assert stats.n == 500
    assert stats.p50_ms == pytest.approx(np.percentile(samples, 50))
    assert stats.p99_ms == pytest.approx(np.percentile(samples, 99))
    assert stats.min_ms <= stats.p50_ms <= stats.p90_ms <= stats.p99_ms <= stats.max_ms


def test_no_samples_is_an_error() -> None:
    with pytest.raises(MeasurementError):
        summarize([], seconds=0.0, warmup_iters=0, first_call_ms=0.0)


def test_sleep_is_timed_and_first_call_is_separate() -> None:
    calls = []

    def work() -> None:
        # The first call is slow (like a lazy initialisation); it must not pollute the samples.
        time.sleep(0.05 if not calls else 0.002)
        calls.append(1)

    stats = measure_latency(work, warmup_iters=2, min_iters=10, min_seconds=0.0, max_seconds=5.0)
    assert stats.first_call_ms >= 45
    assert stats.n == 10
    assert len(calls) == 1 + 2 + 10
    assert 1.8 <= stats.p50_ms < 20
    assert stats.max_ms < 45


def test_max_seconds_caps_slow_functions() -> None:
    stats = measure_latency(lambda: time.sleep(0.02), warmup_iters=0, min_iters=1000,
                            min_seconds=0.0, max_seconds=0.1)
    assert 1 <= stats.n < 10
    assert stats.seconds < 0.5
