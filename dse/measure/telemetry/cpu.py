"""CPU telemetry probes on Linux sysfs: RAPL energy, thermal zones, cpufreq clocks, throttling.

Importing this module registers ``rapl``, ``thermal_zones``, ``cpufreq`` and ``cpu_throttle``.
Each reads files under a ``root`` (``/`` on a host) so tests can point it at a fixture tree in the
kernel's layout, and each reports, when its source is absent or unreadable, why.
"""

from __future__ import annotations

from dse.measure.telemetry.cpu_freq import CpufreqProbe
from dse.measure.telemetry.cpu_rapl import RaplProbe
from dse.measure.telemetry.cpu_thermal import ThermalZonesProbe
from dse.measure.telemetry.cpu_throttle import CpuThrottleProbe

__all__ = ["CpuThrottleProbe", "CpufreqProbe", "RaplProbe", "ThermalZonesProbe"]
