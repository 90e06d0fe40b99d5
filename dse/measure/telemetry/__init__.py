"""Telemetry probes sampled alongside latency. Importing this package registers every probe;
none imports its sensor library (psutil aside) until it is asked whether it is available."""

from dse.measure.telemetry import cpu as _cpu  # noqa: F401
from dse.measure.telemetry import cpu_interference as _cpu_interference  # noqa: F401
from dse.measure.telemetry import cuda_memory as _cuda_memory  # noqa: F401
from dse.measure.telemetry import gpu_interference as _gpu_interference  # noqa: F401
from dse.measure.telemetry import jetson_clocks as _jetson_clocks  # noqa: F401
from dse.measure.telemetry import jetson_power as _jetson_power  # noqa: F401
from dse.measure.telemetry import memory as _memory  # noqa: F401
from dse.measure.telemetry import nvml as _nvml  # noqa: F401
from dse.measure.telemetry import speed_canary as _speed_canary  # noqa: F401
from dse.measure.telemetry import tegrastats as _tegrastats  # noqa: F401
from dse.measure.telemetry.base import (
    PROBES,
    Probe,
    ProbeResult,
    ProbeSettings,
    Trace,
    Window,
    register_probe,
)
from dse.measure.telemetry.entries import make_probe, make_probes
from dse.spec import entry_name, parse_entry

__all__ = [
    "PROBES",
    "Probe",
    "ProbeResult",
    "ProbeSettings",
    "Trace",
    "Window",
    "entry_name",
    "make_probe",
    "make_probes",
    "parse_entry",
    "register_probe",
]
