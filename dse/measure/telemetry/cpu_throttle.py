"""Thermal throttling of Intel CPUs, from the kernel's thermal-interrupt counters.

Layout (Documentation/ABI/testing/sysfs-devices-system-cpu, x86 ``therm_throt``):
``/sys/devices/system/cpu/cpuN/thermal_throttle/`` holds ``core_throttle_count`` and
``package_throttle_count`` (events, counted when throttling begins) and, on newer kernels,
``core_throttle_total_time_ms`` and ``package_throttle_total_time_ms`` (throttled time, credited
when an event ends). The package files repeat the package's counters under each of its CPUs.
AMD, ARM and most virtual machines have no such folder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from dse.measure.telemetry.base import (
    ProbeResult,
    ProbeSettings,
    Trace,
    Window,
    interval_setting,
    register_probe,
)
from dse.measure.telemetry.cpu_sysfs import SysfsError, SysfsProbe, numbered, read_int, read_or_nan
from dse.measure.telemetry.derived import TelemetryGapError, counter_delta, window_indices

CPUS = "sys/devices/system/cpu"
COUNTS = ("core_throttle_count", "package_throttle_count")
TIMES = ("core_throttle_total_time_ms", "package_throttle_total_time_ms")
COUNTS_ONLY = "kernel reports throttle event counts but not time"


@dataclass(frozen=True)
class _Counter:
    channel: str  # ``cpu0/core_throttle_count``
    path: Path


class CpuThrottleSettings(ProbeSettings):
    interval_s: float = interval_setting(1.0)


@register_probe
class CpuThrottleProbe(SysfsProbe[_Counter]):
    """Throttle counters of every CPU; ``throttled_fraction`` is the largest share of the window
    any one CPU or package spent throttled: ``max(delta total_time_ms) / span``, clipped to [0, 1].

    Limits of the source, which the figure inherits: time is credited when an event ends, so an
    event still running at the window's end is not in it, and one that began before the window
    can push the share above 1 (hence the clip). The largest single share is a lower bound of the
    time any CPU throttled. Kernels without the time files report only event counts; a fraction is
    then not derivable (events say nothing of how long they lasted) and the metric is missing,
    with the number of events in its reason. Channels ``cpuN/<file>``, in events or ms.
    """

    name = "cpu_throttle"
    provides = ("throttled_fraction",)
    units: ClassVar[dict[str, str]] = {}
    settings_model = CpuThrottleSettings

    def __init__(self, root: Path = Path("/"), interval_s: float = 1.0) -> None:
        # Cumulative counters: only the readings bracketing the window matter.
        super().__init__(root, interval_s)

    def channel_units(self) -> dict[str, str]:
        return {c.channel: "ms" if c.channel.endswith("_ms") else "events" for c in self.sources()}

    def read(self) -> dict[str, float]:
        return {counter.channel: read_or_nan(counter.path) for counter in self.sources()}

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        times = sorted(name for name in trace.channels if name.endswith(TIMES))
        try:
            if times:
                return ProbeResult(metrics={"throttled_fraction": max(
                    _share(trace, window, name) for name in times)})
            core, package = (_most_events(trace, window, suffix) for suffix in COUNTS)
        except TelemetryGapError as exc:
            return ProbeResult(missing={"throttled_fraction": f"thermal_throttle: {exc}"})
        return ProbeResult(missing={"throttled_fraction": (
            f"{COUNTS_ONLY}; {core + package:g} events in window ({core:g} core and {package:g} "
            f"package events, the most seen by one CPU)")})

    def discover(self) -> list[_Counter]:
        base = self.root / CPUS
        folders = [cpu / "thermal_throttle" for cpu in numbered(base, r"cpu(\d+)")]
        folders = [folder for folder in folders if folder.is_dir()]
        if not folders:
            raise SysfsError(f"no thermal_throttle folder under {base}/cpu*/ (Intel thermal "
                             f"interrupt reporting; absent on AMD, ARM and most virtual machines)")
        counters = []
        for folder in folders:
            for file in COUNTS + TIMES:
                if (folder / file).exists():
                    read_int(folder / file)  # an unreadable counter would void the max
                    counters.append(_Counter(f"{folder.parent.name}/{file}", folder / file))
        if not counters:
            raise SysfsError(f"no throttle counter in {folders[0]} and the like "
                             f"(expected {', '.join(COUNTS)})")
        return counters


def _delta(trace: Trace, window: Window, channel: str) -> tuple[float, float]:
    """How far one counter advanced over the window, and the seconds that advance covers."""
    values = trace.channels[channel]
    rows = window_indices(trace.timestamps, window, [math.isfinite(v) for v in values])
    delta = counter_delta([values[i] for i in rows], wrap=None)
    return delta, trace.timestamps[rows[-1]] - trace.timestamps[rows[0]]


def _share(trace: Trace, window: Window, channel: str) -> float:
    delta_ms, seconds = _delta(trace, window, channel)
    if not seconds > 0:
        raise TelemetryGapError(f"the readings of {channel} cover no time")
    return min(1.0, max(0.0, delta_ms / (seconds * 1000.0)))


def _most_events(trace: Trace, window: Window, suffix: str) -> float:
    """The most events of one kind seen by one CPU; not summed, since a package's events repeat
    under each of its CPUs and a core's under each of its hyperthreads."""
    names = [name for name in trace.channels if name.endswith(suffix)]
    return max((_delta(trace, window, name)[0] for name in names), default=0.0)
