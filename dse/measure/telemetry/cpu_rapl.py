"""CPU package energy from RAPL counters, through the Linux powercap class.

Layout (Documentation/ABI/testing/sysfs-class-powercap): ``/sys/class/powercap`` lists control
types and their zones flat. RAPL's MSR interface is the control type ``intel-rapl``; its top-level
zones ``intel-rapl:N`` hold ``name`` (``package-N`` or ``psys``), ``energy_uj`` (a cumulative
counter in microjoules) and ``max_energy_range_uj`` (where it wraps to zero); subzones
``intel-rapl:N:M`` are parts of a package (``core``, ``uncore``) or DRAM (``dram``).

Which zones are summed, and why only the packages:
- ``core`` and ``uncore`` are inside their package: adding them would count that energy twice.
- ``psys`` (Intel client platforms) is the whole SoC and platform, packages included: twice again.
- ``intel-rapl-mmio:N`` is the same package counter read through MMIO: twice again.
- ``dram`` is memory, outside the package, but only some servers expose it; leaving it out keeps
  ``energy_per_inference_mj`` the same quantity (CPU package energy) on every host.

AMD Zen CPUs (Linux 5.8+) are served by the same ``intel_rapl_msr`` driver and appear under the
same ``intel-rapl:N`` names (a ``package-N`` zone with a ``core`` subzone), so they need nothing
else here. Since Linux 5.10 ``energy_uj`` is readable by root only (CVE-2020-8694, PLATYPUS).
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
from dse.measure.telemetry.cpu_sysfs import SysfsError, SysfsProbe, numbered, read_int, read_or_nan, read_text
from dse.measure.telemetry.derived import TelemetryGapError, counter_delta, energy_metrics, window_indices

POWERCAP = "sys/class/powercap"
ROOT_ONLY = ("RAPL energy is root-only since Linux 5.10 for security, CVE-2020-8694; run as root or "
             "grant read access to energy_uj, e.g. with a udev rule")
ENERGY = "/energy_uj"
WRAP = "/max_energy_range_uj"


@dataclass(frozen=True)
class _Package:
    zone: str  # the powercap zone, e.g. ``intel-rapl:0``; channels are named after it
    energy: Path
    wrap_uj: float


class RaplSettings(ProbeSettings):
    interval_s: float = interval_setting(1.0)


@register_probe
class RaplProbe(SysfsProbe[_Package]):
    """Energy of every CPU package over the window, from RAPL's cumulative counters.

    Channels, per package zone: ``<zone>/energy_uj`` (the counter) and
    ``<zone>/max_energy_range_uj`` (its wrap range, read once). The window's energy is the sum
    over packages of each counter's advance, a wrap adding the range; ``power_mean_w`` is that
    energy over the time between the first and last reading used. Because only wraps between
    readings are seen, the interval must be far below the wrap time (minutes at full load).
    """

    name = "rapl"
    provides = ("energy_per_inference_mj", "power_mean_w")
    units: ClassVar[dict[str, str]] = {}
    settings_model = RaplSettings

    def __init__(self, root: Path = Path("/"), interval_s: float = 1.0) -> None:
        # One reading a second is plenty to see every wrap, and keeps the sampler thread (which
        # shares the GIL with the model being measured) out of the way.
        super().__init__(root, interval_s)

    def channel_units(self) -> dict[str, str]:
        return {f"{p.zone}{suffix}": "uJ" for p in self.sources() for suffix in (ENERGY, WRAP)}

    def read(self) -> dict[str, float]:
        reading: dict[str, float] = {}
        for package in self.sources():
            reading[package.zone + ENERGY] = read_or_nan(package.energy)
            reading[package.zone + WRAP] = package.wrap_uj
        return reading

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        counters = sorted(name for name in trace.channels if name.endswith(ENERGY))
        if not counters:
            return self._all_missing("no RAPL energy channel in the trace")
        columns = [trace.channels[name] for name in counters]
        # Only readings where every package was read, so all packages cover the same span.
        complete = [all(math.isfinite(column[i]) for column in columns)
                    for i in range(len(trace.timestamps))]
        try:
            rows = window_indices(trace.timestamps, window, complete)
            microjoules = sum(
                counter_delta([trace.channels[name][i] for i in rows], _wrap(trace, name))
                for name in counters)
        except TelemetryGapError as exc:
            return self._all_missing(f"RAPL: {exc}")
        seconds = trace.timestamps[rows[-1]] - trace.timestamps[rows[0]]
        return energy_metrics(microjoules / 1e6, window, seconds=seconds)

    def _all_missing(self, reason: str) -> ProbeResult:
        return ProbeResult(missing=dict.fromkeys(self.provides, reason))

    def discover(self) -> list[_Package]:
        base = self.root / POWERCAP
        if not base.is_dir():
            raise SysfsError(f"no RAPL powercap domain under {base}: the directory does not exist "
                             f"(no powercap driver loaded, or a VM that does not expose RAPL)")
        packages, others = [], []
        for zone in numbered(base, r"intel-rapl:(\d+)"):
            kind = read_text(zone / "name")
            if not kind.startswith("package-"):
                others.append(f"{zone.name} ({kind})")
                continue
            try:
                read_int(zone / "energy_uj")
            except SysfsError as exc:
                # One unreadable package fails them all: a partial sum would be too low.
                raise SysfsError(f"{exc} ({ROOT_ONLY})" if exc.denied else str(exc),
                                 denied=exc.denied) from exc
            wrap = float(read_int(zone / "max_energy_range_uj"))
            packages.append(_Package(zone.name, zone / "energy_uj", wrap))
        if not packages:
            found = f" (found only {', '.join(others)}, not package domains)" if others else ""
            raise SysfsError(f"no RAPL package domain under {base}{found}")
        return packages


def _wrap(trace: Trace, counter: str) -> float | None:
    """The wrap range recorded beside ``counter``, or None when the trace lacks it."""
    values = trace.channels.get(counter.removesuffix(ENERGY) + WRAP, [])
    return next((value for value in values if math.isfinite(value) and value > 0), None)
