"""Latency sampling: warm-up, then timed iterations until enough samples and time have passed.

The same code times a candidate on every device; the worker calls it inside its measurement window.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dse.exceptions import MeasurementError


@dataclass(frozen=True)
class LatencyStats:
    """Summary of one single-stream latency run. Times are per call (one batch), in milliseconds."""

    n: int
    seconds: float
    warmup_iters: int
    first_call_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    samples_ms: list[float] = field(repr=False)


def summarize(samples_ms: list[float], *, seconds: float, warmup_iters: int,
              first_call_ms: float) -> LatencyStats:
    if not samples_ms:
        raise MeasurementError("no latency samples were taken")
    data = np.asarray(samples_ms, dtype=np.float64)
    p50, p90, p99 = np.percentile(data, [50, 90, 99])
    return LatencyStats(
        n=len(data), seconds=seconds, warmup_iters=warmup_iters, first_call_ms=first_call_ms,
        p50_ms=float(p50), p90_ms=float(p90), p99_ms=float(p99), mean_ms=float(data.mean()),
        std_ms=float(data.std(ddof=1)) if len(data) > 1 else 0.0,
        min_ms=float(data.min()), max_ms=float(data.max()), samples_ms=[float(v) for v in data],
    )


def measure_latency(
    fn: Callable[[], object],
    *,
    warmup_iters: int = 10,
    min_iters: int = 30,
    max_iters: int = 2000,
    min_seconds: float = 0.2,
    max_seconds: float = 2.0,
) -> LatencyStats:
    """Time ``fn`` (which must return only when its work is done) and summarise the latencies.

    Timing stops once both ``min_iters`` samples and ``min_seconds`` are reached, or at
    ``max_iters`` / ``max_seconds``, whichever comes first. The first call is timed on its own
    (it pays one-off costs such as allocations) and is never part of the samples.
    """
    start = time.perf_counter_ns()
    fn()
    first_call_ms = (time.perf_counter_ns() - start) / 1e6
    for _ in range(warmup_iters):
        fn()
    samples: list[float] = []
    window_start = time.perf_counter()
    deadline = window_start + max_seconds
    while True:
        begin = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - begin) / 1e6)
        now = time.perf_counter()
        enough = len(samples) >= min_iters and now - window_start >= min_seconds
        if enough or len(samples) >= max_iters or now >= deadline:
            break
    return summarize(samples, seconds=time.perf_counter() - window_start,
                     warmup_iters=warmup_iters, first_call_ms=first_call_ms)
