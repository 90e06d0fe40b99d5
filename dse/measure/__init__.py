"""Measurement: latency harness and telemetry probes."""

from dse.measure.harness import LatencyStats, measure_latency, summarize

__all__ = ["LatencyStats", "measure_latency", "summarize"]
