"""A trial's telemetry traces as drawable series: the samples-file keys
``trace.<probe>.time_s`` and ``trace.<probe>.<channel> [<unit>]`` (``dse.farm.worker``) parsed,
each channel sorted into a kind by its unit (W is power, °C temperature, MHz or kHz a clock, MB
memory), RAPL's energy counters (``<zone>/energy_uj [uJ]``) turned into power by difference, and
the throttled intervals (:mod:`dse.report.throttling`) read from the same arrays.
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import NamedTuple

import numpy as np

from dse.report.distributions import FloatArray
from dse.report.throttling import ThrottledInterval, merge_intervals, throttled_intervals
from dse.util import counter_step

TRACE_PREFIX = "trace."
_KEY = re.compile(r"trace\.(?P<probe>[^.]+)\.(?P<channel>.+?)(?: \[(?P<unit>[^\]]*)\])?")
TIME_CHANNEL = "time_s"

#: Rows of the figure, in order, with their axis titles. Memory is drawn too: on a host without
#: power, thermal or clock sensors (a virtual machine) it is the only trace there is.
KIND_TITLES = {"power": "power [W]", "temperature": "temperature [°C]", "clock": "clock [MHz]",
               "memory": "memory [MB]"}
SENSOR_KINDS = ("power", "temperature", "clock")
KIND_UNITS = {"power": "W", "temperature": "°C", "clock": "MHz", "memory": "MB"}
#: A series whose readings stay within this much (or 1% of its level, whichever is more) is
#: steady: a line across an empty plot says less than its value in words.
STEADY_SPREAD = {"power": 0.5, "temperature": 1.0, "clock": 10.0, "memory": 1.0}
STEADY_FRACTION = 0.01
_BY_UNIT = {"W": "power", "°C": "temperature", "MHz": "clock", "kHz": "clock", "MB": "memory"}
_MAXIMA = ("max_mhz", "cpuinfo_max_freq")  # ceilings, not the clock the work got
_RAPL_ENERGY, _RAPL_WRAP = "/energy_uj", "/max_energy_range_uj"


class Series(NamedTuple):
    kind: str
    """A key of :data:`KIND_TITLES`."""
    name: str
    """``<probe> <channel>``, e.g. ``nvml power_w``."""
    time_s: list[float]
    """Seconds since the trial's first reading."""
    values: list[float]
    """In the kind's unit (clocks in MHz)."""


def parse_trace_key(key: str) -> tuple[str, str, str | None] | None:
    """``trace.nvml.power_w [W]`` -> (``nvml``, ``power_w``, ``W``); a time key has unit None;
    None for a key that is not a trace."""
    match = _KEY.fullmatch(key)
    if match is None:
        return None
    return match["probe"], match["channel"], match["unit"]


def channel_kind(channel: str, unit: str | None) -> str | None:
    """The row a channel is drawn in, or None when it is not drawn as a line (counters, flags,
    loads); RAPL energy counters are drawn as the power they imply."""
    if unit == "uJ" and channel.endswith(_RAPL_ENERGY):
        return "power"
    if unit is None or channel.endswith(_MAXIMA):
        return None
    return _BY_UNIT.get(unit)


def trial_series(arrays: dict[str, FloatArray]) -> tuple[list[Series], list[ThrottledInterval]]:
    """Every drawable channel of one trial's traces, and its throttled intervals."""
    channels: dict[str, dict[str, tuple[str | None, FloatArray]]] = {}
    times: dict[str, FloatArray] = {}
    for key, values in arrays.items():
        parsed = parse_trace_key(key)
        if parsed is None:
            continue
        probe, channel, unit = parsed
        if channel == TIME_CHANNEL and unit is None:
            times[probe] = values
        else:
            channels.setdefault(probe, {})[channel] = (unit, values)
    starts = [float(np.nanmin(t)) for t in times.values() if np.isfinite(t).any()]
    origin = min(starts, default=0.0)
    series: list[Series] = []
    intervals: list[ThrottledInterval] = []
    for probe in sorted(channels):
        if probe not in times:
            continue
        clock = times[probe] - origin
        for channel, (unit, values) in sorted(channels[probe].items()):
            if len(values) != len(clock):
                continue  # not aligned with its probe's readings: nothing to plot it against
            kind = channel_kind(channel, unit)
            if kind == "power" and unit == "uJ":
                wrap = channels[probe].get(channel.removesuffix(_RAPL_ENERGY) + _RAPL_WRAP)
                x, y = _counter_power(clock, values, None if wrap is None else wrap[1])
                name = f"{probe} {channel.removesuffix(_RAPL_ENERGY)} (from energy counter)"
                series.append(Series(kind, name, x.tolist(), y.tolist()))
            elif kind is not None:
                scale = 1e-3 if unit == "kHz" else 1.0
                series.append(Series(kind, f"{probe} {channel}", clock.tolist(),
                                     (values * scale).tolist()))
            intervals += throttled_intervals(channel, unit, clock, values)
    return series, merge_intervals(intervals)


def _counter_power(clock: FloatArray, energy_uj: FloatArray,
                   wrap_uj: FloatArray | None) -> tuple[FloatArray, FloatArray]:
    """Watts between consecutive valid readings of a cumulative µJ counter, at their midpoints;
    a counter that went down wrapped once (adds its range) or, with no range known or a drop
    beyond it, is a gap."""
    valid = np.isfinite(energy_uj) & np.isfinite(clock)
    t, e = clock[valid], energy_uj[valid]
    if len(t) < 2:
        return np.empty(0), np.empty(0)
    ranges = wrap_uj[np.isfinite(wrap_uj)] if wrap_uj is not None else np.empty(0)
    wrap = float(ranges[-1]) if len(ranges) else None
    # The measurement's rule (dse.util.counters): a step that cannot be known is a gap.
    steps = (counter_step(float(a), float(b), wrap) for a, b in pairwise(e))
    delta = np.array([np.nan if step is None else step for step in steps], dtype=np.float64)
    span = np.diff(t)
    watts = np.where(span > 0, delta / np.where(span > 0, span, 1.0) / 1e6, np.nan)
    keep = np.isfinite(watts)
    return ((t[:-1] + t[1:]) / 2)[keep], watts[keep]


def steady_level(series: Series) -> float | None:
    """The median reading of a series that barely moves (within :data:`STEADY_SPREAD` of its
    kind, or :data:`STEADY_FRACTION` of its level), None for one worth drawing."""
    values = np.asarray(series.values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return None
    level = float(np.median(values))
    spread = float(values.max() - values.min())
    allowed = max(STEADY_SPREAD.get(series.kind, 0.0), STEADY_FRACTION * abs(level))
    return level if spread <= allowed else None
