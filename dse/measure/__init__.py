"""Measurement: latency harness, statistics and telemetry probes."""

from dse.measure.harness import measure_latency
from dse.measure.scenarios import OfflineStats, measure_offline, measure_sustained
from dse.measure.stats import LatencyStats, drift_pct, quantile_ci, summarize
from dse.measure.timers import timer_overhead_ns

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
