"""Measurement: latency harness, statistics and telemetry probes."""

from dse.measure.harness import (
    OfflineStats,
    measure_latency,
    measure_offline,
    measure_sustained,
    timer_overhead_ns,
)
from dse.measure.stats import LatencyStats, drift_pct, quantile_ci, summarize

__all__ = [
    "LatencyStats",
    "OfflineStats",
    "drift_pct",
    "measure_latency",
    "measure_offline",
    "measure_sustained",
    "quantile_ci",
    "summarize",
    "timer_overhead_ns",
]
