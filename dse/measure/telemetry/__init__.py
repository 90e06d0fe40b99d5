"""Telemetry probes sampled alongside latency."""

from dse.measure.telemetry import memory as _memory  # noqa: F401  (registers its probe)
from dse.measure.telemetry.base import (
    PROBES,
    Probe,
    ProbeResult,
    Trace,
    Window,
    register_probe,
)

__all__ = ["PROBES", "Probe", "ProbeResult", "Trace", "Window", "register_probe"]
