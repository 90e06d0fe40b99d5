"""Board power of a Jetson from its INA3221 monitors, and over-current events for provenance.

Two sysfs layouts exist (paths relative to ``root``):

* hwmon, the upstream ``ina3221`` driver — L4T r35/r36 (JetPack 5/6) on Orin and on Xavier:
  ``sys/bus/i2c/drivers/ina3221/<bus-addr>/hwmon/hwmonN/`` with, per channel N in 1..3,
  ``inN_label`` (rail name), ``inN_input`` (bus voltage, mV) and ``currN_input`` (current, mA);
  power is their product. Channels labelled ``NC`` (not connected) or with ``inN_enable`` 0 are
  skipped. ``currN_crit_alarm`` / ``currN_max_alarm`` are the chip's over-current flags.
* iio, NVIDIA's ``ina3221x`` driver — L4T r32 (JetPack 4) on Nano, TX2, Xavier:
  ``sys/bus/i2c/drivers/ina3221x/<bus-addr>/iio:deviceN/`` with, per channel N in 0..2,
  ``rail_name_N``, ``in_powerN_input`` (mW), ``in_voltageN_input`` (mV), ``in_currentN_input`` (mA).

The board power is chosen by :func:`~dse.measure.telemetry.jetson.board_rails`: the module-input
rail (VDD_IN on Orin Nano/NX and Xavier NX, POM_5V_IN on Nano) when there is one, else the sum of all
connected rails (AGX Xavier, AGX Orin); a profile may name the rails to sum instead (setting
``rails``). :attr:`JetsonPowerProbe.total_source` says which.

Over-current counters: on Orin (L4T r35/r36) the SoC's over-current throttling counts its events in
``sys/class/hwmon/hwmon*/oc<N>_event_cnt`` (the hwmon named ``soctherm_oc``). They are not metrics;
:func:`overcurrent_events` extracts them from a trace for the probe's ``provenance``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from dse.measure.telemetry.base import (
    Probe,
    ProbeResult,
    ProbeSettings,
    Trace,
    Window,
    interval_setting,
    register_probe,
)
from dse.measure.telemetry.jetson import NOT_CONNECTED, board_rails, power_result, read_number, read_text

TOTAL = "power.total"
_HWMON_GLOB = "sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*"
_IIO_GLOB = "sys/bus/i2c/drivers/ina3221x/*/iio:device*"
_OC_COUNT_GLOB = "sys/class/hwmon/hwmon*/oc*_event_cnt"


@dataclass(frozen=True)
class Rail:
    """One INA3221 channel: its name and the files to read (None where the driver has none)."""

    name: str
    power_mw: Path | None = None
    voltage_mv: Path | None = None
    current_ma: Path | None = None

    @property
    def problem(self) -> str | None:
        """Why this rail's power cannot be read, or None."""
        if self.power_mw is not None or (self.voltage_mv is not None and self.current_ma is not None):
            return None
        lacking = "current" if self.current_ma is None else "voltage"
        return f"rail {self.name} has no {lacking} file"

    def watts(self) -> float:
        if self.power_mw is not None:
            return read_number(self.power_mw) / 1e3
        if self.voltage_mv is None or self.current_ma is None:
            return math.nan
        return read_number(self.voltage_mv) * read_number(self.current_ma) / 1e6


def _existing(path: Path) -> Path | None:
    return path if path.exists() else None


def _hwmon_rails(hwmon: Path) -> list[Rail]:
    rails = []
    for n in (1, 2, 3):
        if not (hwmon / f"in{n}_input").exists() and not (hwmon / f"in{n}_label").exists():
            continue
        label = read_text(hwmon / f"in{n}_label") or f"{hwmon.parents[1].name}/in{n}"
        if label == NOT_CONNECTED or read_text(hwmon / f"in{n}_enable") == "0":
            continue
        rails.append(Rail(label, voltage_mv=_existing(hwmon / f"in{n}_input"),
                          current_ma=_existing(hwmon / f"curr{n}_input")))
    return rails


def _iio_rails(device: Path) -> list[Rail]:
    rails = []
    for n in (0, 1, 2):
        label = read_text(device / f"rail_name_{n}")
        if label is None or label == NOT_CONNECTED:
            continue
        rails.append(Rail(label, power_mw=_existing(device / f"in_power{n}_input"),
                          voltage_mv=_existing(device / f"in_voltage{n}_input"),
                          current_ma=_existing(device / f"in_current{n}_input")))
    return rails


def find_rails(root: Path = Path("/")) -> list[Rail]:
    """Every INA3221 rail under ``root``, both layouts, in a stable (sorted path) order."""
    rails = [r for hwmon in sorted(root.glob(_HWMON_GLOB)) for r in _hwmon_rails(hwmon)]
    rails += [r for device in sorted(root.glob(_IIO_GLOB)) for r in _iio_rails(device)]
    return rails


def _overcurrent_files(root: Path) -> dict[str, Path]:
    files = {f"oc_count.{p.name}": p for p in sorted(root.glob(_OC_COUNT_GLOB))}
    for hwmon in sorted(root.glob(_HWMON_GLOB)):
        for n in (1, 2, 3):
            label = read_text(hwmon / f"in{n}_label") or f"in{n}"
            for level in ("crit", "max"):
                alarm = hwmon / f"curr{n}_{level}_alarm"
                if alarm.exists() and label != NOT_CONNECTED:
                    files[f"oc_alarm.{label}.{level}"] = alarm
    return files


def overcurrent_events(trace: Trace) -> dict[str, int]:
    """Over-current activity in a ``jetson_power`` trace, for provenance (not a metric).

    ``oc<N>_event_cnt`` counters (Orin soctherm) give the number of events in the window (last
    reading minus first); an INA3221 alarm flag gives 1 if it was raised at any reading, else 0.
    Channels without two valid readings are left out.
    """
    events: dict[str, int] = {}
    for name, values in trace.channels.items():
        valid = [v for v in values if math.isfinite(v)]
        if name.startswith("oc_count.") and len(valid) >= 2:
            events[name.removeprefix("oc_count.")] = int(valid[-1] - valid[0])
        elif name.startswith("oc_alarm.") and valid:
            events[name.removeprefix("oc_alarm.")] = int(max(valid) > 0)
    return events


class JetsonPowerSettings(ProbeSettings):
    interval_s: float = interval_setting(0.05)
    rails: list[str] | None = Field(
        default=None, min_length=1,
        description="INA3221 rails whose sum is the power figure (e.g. [VDD_GPU_SOC] for the GPU "
                    "and SoC alone); none: the module-input rail (VDD_IN, POM_5V_IN) where the "
                    "board has one, else every connected rail.")


def _chosen_rails(found: list[str], chosen: list[str] | None) -> tuple[list[str], str, str | None]:
    """The rails summed into the board power, a sentence saying which (for provenance), and why
    the sum cannot be made (a named rail this board lacks), or None."""
    if chosen is None:
        return (*board_rails(found), None)
    source = f"{'rail' if len(chosen) == 1 else 'sum of rails'} {', '.join(chosen)} (set in the profile)"
    unknown = [name for name in chosen if name not in found]
    if unknown:
        return [], source, (f"rail(s) {', '.join(unknown)} named in the profile not found; this "
                            f"board has: {', '.join(found) or 'none'}")
    return list(chosen), source, None


@register_probe
class JetsonPowerProbe(Probe):
    """Per-rail power (``power.<rail>``, W) and board power (``power.total``, W) of a Jetson.

    Summarizes to ``energy_per_inference_mj`` (the board power integrated over the readings that
    bracket the window, per inference) and ``power_mean_w`` (that energy over those readings' span).
    ``rails`` names the rails to sum instead of the board's own choice (see the module docstring).
    """

    name = "jetson_power"
    provides = ("power_mean_w", "energy_per_inference_mj")
    units: ClassVar[dict[str, str]] = {TOTAL: "W"}
    settings_model = JetsonPowerSettings

    def __init__(self, root: Path = Path("/"), interval_s: float = 0.05,
                 rails: list[str] | None = None) -> None:
        super().__init__(interval_s)
        self.root = root
        self.rails = find_rails(root)
        self._readable = [r for r in self.rails if r.problem is None]
        total_names, self.total_source, unknown = _chosen_rails([r.name for r in self.rails], rails)
        self._total = [r for r in self.rails if r.name in total_names]
        problems = [r.problem for r in self._total if r.problem is not None]
        self._total_problem = (f"{problems[0]}; board power ({self.total_source}) unknown"
                               if problems else None)
        if not self.rails:
            self._total_problem = "no INA3221 rail found (not a Jetson?)"
        elif unknown is not None:
            self._total_problem = unknown
        self._overcurrent = _overcurrent_files(root)

    def available(self) -> tuple[bool, str]:
        if not self.rails:
            return False, (f"no INA3221 power monitor under {self.root / 'sys/bus/i2c/drivers'} "
                           "(ina3221 or ina3221x; not a Jetson?)")
        if not self._readable:
            return False, "; ".join(r.problem for r in self.rails if r.problem is not None)
        if all(math.isnan(r.watts()) for r in self._readable):
            return False, (f"cannot read any INA3221 rail ({', '.join(r.name for r in self._readable)}): "
                           "files absent or permission denied")
        return True, ""

    def channel_units(self) -> dict[str, str]:
        units = {TOTAL: "W", **{f"power.{r.name}": "W" for r in self._readable}}
        units.update({name: "count" if name.startswith("oc_count.") else "flag"
                      for name in self._overcurrent})
        return units

    def read(self) -> dict[str, float]:
        reading = {f"power.{r.name}": r.watts() for r in self._readable}
        if self._total_problem is None:
            reading[TOTAL] = sum(reading[f"power.{r.name}"] for r in self._total)
        reading.update({name: read_number(path) for name, path in self._overcurrent.items()})
        return reading

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        return power_result(trace, window, TOTAL, self._total_problem)

    def provenance(self, trace: Trace) -> dict[str, str]:
        """``total_source`` (which rails make the board power) and ``overcurrent.<name>``, the
        count of each over-current event or alarm seen in the trace, where it is not zero."""
        facts = {"total_source": self.total_source}
        facts.update({f"overcurrent.{name}": str(count)
                      for name, count in overcurrent_events(trace).items() if count})
        return facts
