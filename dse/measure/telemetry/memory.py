"""Peak resident memory of the measuring process over the window."""

from __future__ import annotations

import os
from typing import ClassVar

from dse.measure.telemetry.base import (
    Probe,
    ProbeResult,
    ProbeSettings,
    Trace,
    Window,
    interval_setting,
    register_probe,
)


class ProcessMemorySettings(ProbeSettings):
    interval_s: float = interval_setting(0.005)


@register_probe
class ProcessMemoryProbe(Probe):
    """Samples this process's RSS (psutil). The peak over the window is ``process_rss_peak_mb``."""

    name = "process_memory"
    provides = ("process_rss_peak_mb",)
    units: ClassVar[dict[str, str]] = {"rss_mb": "MB"}
    settings_model = ProcessMemorySettings

    def __init__(self, interval_s: float = 0.005) -> None:
        super().__init__(interval_s)
        import psutil

        self._process = psutil.Process(os.getpid())

    def available(self) -> tuple[bool, str]:
        return True, ""

    def read(self) -> dict[str, float]:
        return {"rss_mb": float(self._process.memory_info().rss) / 1e6}

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        values = trace.channels.get("rss_mb", [])
        if not values:
            return ProbeResult(missing={"process_rss_peak_mb": "no memory reading in the window"})
        return ProbeResult(metrics={"process_rss_peak_mb": max(values)})
