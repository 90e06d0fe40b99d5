"""Peak temperature from the Linux thermal zones.

Layout (Documentation/ABI/testing/sysfs-class-thermal): ``/sys/class/thermal/thermal_zoneN/``
holds ``type`` (what the zone measures: ``x86_pkg_temp``, ``acpitz``, ``cpu-thermal``...) and
``temp`` in millidegrees Celsius. Some zones answer a read with an error (EINVAL, ENODATA, EIO
from a sensor that is switched off): those are left out, the others still count.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pydantic import Field, field_validator

from dse.measure.telemetry.base import (
    ProbeResult,
    ProbeSettings,
    Trace,
    Window,
    interval_setting,
    register_probe,
)
from dse.measure.telemetry.cpu_sysfs import SysfsError, SysfsProbe, numbered, read_int, read_or_nan, read_text
from dse.measure.telemetry.derived import TelemetryGapError, bracketing_rows

THERMAL = "sys/class/thermal"


@dataclass(frozen=True)
class _Zone:
    channel: str  # ``thermal_zone0:x86_pkg_temp``: the zone and its type, so the trace says both
    temp: Path


def zone_pattern(zones: list[str] | None) -> re.Pattern[str] | None:
    """One pattern a zone type must match in whole to be read: any of ``zones``, each a regular
    expression (a plain type such as ``x86_pkg_temp`` matches itself); None reads every zone."""
    if zones is None:
        return None
    for index, zone in enumerate(zones):
        try:
            re.compile(zone)
        except re.error as exc:
            raise ValueError(f"zones[{index}] must be a zone type or a regular expression, got "
                             f"{zone!r}: {exc}") from None
    return re.compile("|".join(f"(?:{zone})" for zone in zones))


class ThermalZonesSettings(ProbeSettings):
    interval_s: float = interval_setting(0.5)
    zones: list[str] | None = Field(
        default=None, min_length=1,
        description="Zone types to read (as in /sys/class/thermal/thermal_zone*/type, e.g. "
                    "x86_pkg_temp, cpu-thermal), each a regular expression the whole type must "
                    "match; none: every zone.")

    @field_validator("zones")
    @classmethod
    def _patterns_compile(cls, zones: list[str] | None) -> list[str] | None:
        zone_pattern(zones)
        return zones


@register_probe
class ThermalZonesProbe(SysfsProbe[_Zone]):
    """Temperatures of the thermal zones; ``temperature_peak_c`` is the highest over zones and
    readings in the window.

    ``zones`` lists the zone types to read, each a regular expression the whole type must match
    (``["x86_pkg_temp", "acpi.*"]``); None takes every zone. Channels ``thermal_zoneN:<type>``,
    in °C.
    """

    name = "thermal_zones"
    provides = ("temperature_peak_c",)
    units: ClassVar[dict[str, str]] = {}
    settings_model = ThermalZonesSettings

    def __init__(self, root: Path = Path("/"), interval_s: float = 0.5,
                 zones: list[str] | None = None) -> None:
        # Temperatures move over seconds, and an ACPI zone's read can take milliseconds of
        # firmware time, so a slow interval loses nothing and disturbs the measurement less.
        super().__init__(root, interval_s)
        self.zones = zones
        self._type_pattern = zone_pattern(zones)

    def channel_units(self) -> dict[str, str]:
        return {zone.channel: "°C" for zone in self.sources()}

    def read(self) -> dict[str, float]:
        return {zone.channel: read_or_nan(zone.temp) / 1000.0 for zone in self.sources()}

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        columns = list(trace.channels.values())
        try:
            rows = bracketing_rows(trace, window)
        except TelemetryGapError as exc:
            return ProbeResult(missing={"temperature_peak_c": f"thermal zones: {exc}"})
        peak = max(column[i] for column in columns for i in rows if math.isfinite(column[i]))
        return ProbeResult(metrics={"temperature_peak_c": peak})

    def discover(self) -> list[_Zone]:
        base = self.root / THERMAL
        folders = numbered(base, r"thermal_zone(\d+)")
        if not folders:
            raise SysfsError(f"no thermal zone under {base}")
        zones, unreadable, other_types = [], [], []
        for folder in folders:
            try:
                kind = read_text(folder / "type")
                if self._type_pattern is not None and not self._type_pattern.fullmatch(kind):
                    other_types.append(kind)
                    continue
                read_int(folder / "temp")
            except SysfsError as exc:
                unreadable.append(str(exc))
                continue
            zones.append(_Zone(f"{folder.name}:{kind}", folder / "temp"))
        if zones:
            return zones
        if unreadable:
            raise SysfsError(f"no readable thermal zone under {base}: {'; '.join(unreadable)}")
        assert self.zones is not None  # every zone was readable, so all were filtered out
        raise SysfsError(f"no thermal zone under {base} has a type matching {self.zones} "
                         f"(types: {', '.join(other_types)})")
