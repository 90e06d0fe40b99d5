"""Measurement: latency harness, statistics and telemetry probes.

The harness and statistics load on first use of one of their names: importing a subpackage —
``dse.measure.telemetry``, which the probe registry reads when a profile is validated — must not
bring scipy and the harness with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_API = {
    "measure_latency": "dse.measure.harness",
    "OfflineStats": "dse.measure.scenarios",
    "measure_offline": "dse.measure.scenarios",
    "measure_sustained": "dse.measure.scenarios",
    "LatencyStats": "dse.measure.stats",
    "drift_pct": "dse.measure.stats",
    "quantile_ci": "dse.measure.stats",
    "summarize": "dse.measure.stats",
    "timer_overhead_ns": "dse.measure.timers",
}

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

if TYPE_CHECKING:
    from dse.measure.harness import measure_latency
    from dse.measure.scenarios import OfflineStats, measure_offline, measure_sustained
    from dse.measure.stats import LatencyStats, drift_pct, quantile_ci, summarize
    from dse.measure.timers import timer_overhead_ns


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'dse.measure' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
