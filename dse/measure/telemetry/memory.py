"""Peak resident memory of the measuring process over the window."""

from __future__ import annotations

import os

from dse.measure.telemetry.base import Probe, Trace, register_probe


@register_probe("process_memory")
class ProcessMemoryProbe(Probe):
    """Samples this process's RSS (psutil). The peak over the window is ``memory_peak_mb``."""

    name = "process_memory"
    unit = "MB"
    provides = ("memory_peak_mb",)

    def __init__(self, interval_s: float = 0.005) -> None:
        super().__init__(interval_s)
        import psutil

        self._process = psutil.Process(os.getpid())

    def available(self) -> tuple[bool, str]:
        return True, ""

    def read(self) -> float:
        return float(self._process.memory_info().rss) / 1e6

    def metrics(self, trace: Trace) -> dict[str, float]:
        return {"memory_peak_mb": max(trace.values)} if trace.values else {}
