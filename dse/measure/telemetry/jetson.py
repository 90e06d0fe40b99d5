"""Pieces shared by the Jetson probes, and the board's provenance (L4T release, nvpmodel power mode).

The probes themselves live in :mod:`~dse.measure.telemetry.jetson_power` (INA3221 rails),
:mod:`~dse.measure.telemetry.jetson_clocks` (cpufreq, devfreq, EMC, thermal zones) and
:mod:`~dse.measure.telemetry.tegrastats` (the ``tegrastats`` fallback).

Every path is read relative to a ``root`` so tests can point the code at fixture trees in the real
layouts. Nothing here invents a value: an unreadable file is ``None``/NaN, and callers turn that
into a missing metric with its reason. The maths (energy, clock drop) is
:mod:`~dse.measure.telemetry.derived`'s, under the project rules stated there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from dse.measure.telemetry.base import ProbeResult, Trace, Window
from dse.measure.telemetry.derived import TelemetryGapError, power_energy
from dse.util import l4t_release as l4t_release
from dse.util import read_text as read_text

#: Rails that measure the whole module's input. Where one exists it *is* the board power; the other
#: rails are downstream of it and adding them would count their power twice.
#: VDD_IN: Orin Nano/NX (L4T r35/r36), Xavier NX and TX2 (r32). POM_5V_IN: Nano (r32).
INPUT_RAILS = ("VDD_IN", "POM_5V_IN")

#: Channel label that board designers give an unconnected INA3221 input (AGX Orin 1-0041).
NOT_CONNECTED = "NC"

#: tegrastats and the Orin thermal driver report -256 °C for a zone of a power-gated block (CV0..2,
#: GPU when off); it is a "no reading" mark, not a temperature.
_NO_SENSOR_C = -200.0

#: Zones whose value is not a measured temperature: ``PMIC-Die`` (Nano, Xavier, r32) reports a fixed
#: 100 °C threshold, ``thermal-fan-est`` (Xavier) is a weighted estimate computed from other zones.
_NOT_A_SENSOR = ("pmic", "fan-est")


def read_number(path: Path) -> float:
    """A sysfs integer (or decimal) as float; NaN when the file cannot be read or parsed, so a
    sensor that fails mid-window leaves a gap rather than stopping the sampler."""
    text = read_text(path)
    if text is None:
        return math.nan
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return math.nan


def board_rails(rails: Sequence[str]) -> tuple[list[str], str]:
    """Which rails make up the board power, and a sentence saying so (for provenance).

    A module-input rail (:data:`INPUT_RAILS`) is used alone. Without one (AGX Xavier: GPU, CPU, SOC,
    CV, VDDRQ, SYS5V; AGX Orin: VDD_GPU_SOC, VDD_CPU_CV, VIN_SYS_5V0, VDDQ_VDD2_1V8AO) the total is
    the sum of all connected rails: those are separate branches of the module's power tree, so
    their sum approximates the module's draw, without regulator losses and the carrier board.
    """
    for name in INPUT_RAILS:
        if name in rails:
            return [name], f"rail {name} (module input)"
    connected = [r for r in rails if r != NOT_CONNECTED]
    return connected, f"sum of rails {', '.join(connected)} (no module-input rail on this board)"


def is_real_temperature(zone: str, celsius: float) -> bool:
    """Whether a zone's reading is a measured temperature (see :data:`_NOT_A_SENSOR`)."""
    if not math.isfinite(celsius) or celsius <= _NO_SENSOR_C:
        return False
    return not any(mark in zone.lower() for mark in _NOT_A_SENSOR)


def power_result(trace: Trace, window: Window, channel: str, why_absent: str | None) -> ProbeResult:
    """``power_mean_w`` and ``energy_per_inference_mj`` from the board-power channel of a trace.

    There is no energy counter on a Jetson: the energy is the integral of the board power over the
    readings that bracket the window (:func:`~dse.measure.telemetry.derived.power_energy`).
    ``why_absent`` is the reason the probe could not build the channel at all (None when it could);
    a window the readings do not bracket is missing with that gap as the reason.
    """
    names = ("power_mean_w", "energy_per_inference_mj")
    if why_absent is not None:
        return ProbeResult(missing=dict.fromkeys(names, why_absent))
    values = trace.channels.get(channel, [math.nan] * len(trace.timestamps))
    try:
        return power_energy(trace.timestamps, values, window)
    except TelemetryGapError as gap:
        return ProbeResult(missing=dict.fromkeys(names, f"{channel}: {gap}"))


def peak_temperature(trace: Trace, channels: Iterable[str]) -> float | None:
    """Highest real reading over the given temperature channels (``temp.<zone>``), or None."""
    peaks = [
        value
        for name in channels
        for value in trace.channels.get(name, [])
        if is_real_temperature(name.removeprefix("temp."), value)
    ]
    return max(peaks) if peaks else None


_PMODE = re.compile(r"pmode:\s*(\d+)")
_MODEL = re.compile(r"<\s*POWER_MODEL\s+ID=(\d+)\s+NAME=(\S+?)\s*>")


def power_mode(root: Path = Path("/")) -> str | None:
    """The nvpmodel power mode in force, by name (``"MAXN"``, ``"15W"``) where the configuration
    names it, else its number as text; None when unknown.

    ``nvpmodel`` records the mode it applied in ``/var/lib/nvpmodel/status`` (``pmode:0002``, on
    L4T r32 to r36) and names modes in ``/etc/nvpmodel.conf`` (``< POWER_MODEL ID=2 NAME=15W >``).
    Without the status file the mode is unknown: the configuration's default is not assumed,
    because a user may have changed it since boot.
    """
    match = _PMODE.search(read_text(root / "var/lib/nvpmodel/status") or "")
    if match is None:
        return None
    mode_id = int(match[1])
    conf = read_text(root / "etc/nvpmodel.conf") or ""
    names = {int(m[1]): str(m[2]) for m in _MODEL.finditer(conf)}
    return names.get(mode_id, str(mode_id))


def parse_nvpmodel_query(text: str) -> str | None:
    """The mode name from the output of ``nvpmodel -q`` (``"NV Power Mode: MAXN\\n0"``), for a
    worker that captured it; None when the text has no such line."""
    match = re.search(r"NV Power Mode:\s*(\S+)", text)
    return str(match[1]) if match else None
