"""The telemetry-trace panel: power, temperature and clocks over a front trial's measurement, with
the intervals where the device throttled shaded.

A measured trial's samples file (see :mod:`dse.report.distributions`) holds every probe's readings
as ``trace.<probe>.time_s`` (``time.time()`` seconds) and ``trace.<probe>.<channel> [<unit>]``
(``dse.farm.worker``). Channels are sorted into kinds by their unit: W is power, °C temperature,
MHz or kHz a clock, MB memory; RAPL's energy counters (``<zone>/energy_uj [uJ]``) give power by
difference. Throttling comes from NVML's clocks-event reasons, the CPU thermal-throttle time
counters and a Jetson's over-current alarms and counters.

:func:`traces_info` is the data (no plotly); :func:`traces_figure` draws it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

import numpy as np
import optuna
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dse.report.distributions import (
    FloatArray,
    SamplesUnreadable,
    TrialKey,
    load_samples,
    sample_files,
    sample_keys,
)
from dse.report.render import _PALETTE
from dse.results import front_frame

TRACE_PREFIX = "trace."
_KEY = re.compile(r"trace\.(?P<probe>[^.]+)\.(?P<channel>.+?)(?: \[(?P<unit>[^\]]*)\])?")
_TIME = "time_s"

#: Rows of the figure, in order, with their axis titles. Memory is drawn too: on a host without
#: power, thermal or clock sensors (a virtual machine) it is the only trace there is.
KIND_TITLES = {"power": "power [W]", "temperature": "temperature [°C]", "clock": "clock [MHz]",
               "memory": "memory [MB]"}
SENSOR_KINDS = ("power", "temperature", "clock")
_BY_UNIT = {"W": "power", "°C": "temperature", "MHz": "clock", "kHz": "clock", "MB": "memory"}
_MAXIMA = ("max_mhz", "cpuinfo_max_freq")  # ceilings, not the clock the work got
_RAPL_ENERGY, _RAPL_WRAP = "/energy_uj", "/max_energy_range_uj"
_CPU_THROTTLE_TIME = "_throttle_total_time_ms"


class Series(NamedTuple):
    kind: str
    """A key of :data:`KIND_TITLES`."""
    name: str
    """``<probe> <channel>``, e.g. ``nvml power_w``."""
    time_s: list[float]
    """Seconds since the trial's first reading."""
    values: list[float]
    """In the kind's unit (clocks in MHz)."""


class ThrottledInterval(NamedTuple):
    start_s: float
    end_s: float
    reason: str


class TrialTraces(NamedTuple):
    device: str
    trial: int
    duration_s: float
    series: list[Series]
    throttled: list[ThrottledInterval]
    """Intervals where a throttle reason was active, by start; same-reason overlaps merged."""


class TracesInfo(NamedTuple):
    kinds: list[str]
    """The figure's rows: the kinds any shown trial has, in :data:`KIND_TITLES` order."""
    row_titles: list[str]
    trials: list[TrialTraces]
    """The figure's columns."""
    note: str
    empty_reason: str | None


class _Candidate(NamedTuple):
    key: TrialKey
    path: Path
    keys: list[str]
    has_sensors: bool
    duration_s: float


def traces_info(trials: pd.DataFrame, objectives: Sequence[str], studies: Sequence[optuna.Study],
                run_dir: Path | None, *, max_trials: int = 3, max_series_per_kind: int = 8,
                max_points: int = 2000, max_intervals: int = 100,
                front: pd.DataFrame | None = None) -> TracesInfo:
    """The telemetry traces of up to ``max_trials`` front trials (:func:`dse.results.front_frame`,
    every device): those with power, temperature or clock readings first, then the longest
    traces (sustained runs). At most ``max_series_per_kind`` channels of a kind per trial (many
    CPUs: the first by name); a series longer than ``max_points`` keeps each bucket's lowest and
    highest reading, so peaks survive the thinning. Throttled intervals come from the full traces.
    ``front``: ``dse.results.front_frame(trials, objectives)`` when the caller has it already
    (it costs O(n²) in the trials; a dashboard computes it once for all its panels).
    """
    if min(max_trials, max_series_per_kind, max_intervals) < 1 or max_points < 4:
        raise ValueError(f"max_trials, max_series_per_kind and max_intervals must be >= 1 and "
                         f"max_points >= 4, but got {max_trials=}, {max_series_per_kind=}, "
                         f"{max_intervals=}, {max_points=}")
    if run_dir is None:
        return _empty("the run folder is not known, so the telemetry traces cannot be read")
    front = front_frame(trials, objectives) if front is None else front
    if front.empty:
        return _empty("no feasible trial has been measured yet, so there is no front")
    files = sample_files(studies)
    keys = [(str(d), int(n)) for d, n in zip(front["device"].astype("string").fillna(""),
                                             front["trial"], strict=True)]
    candidates, unreadable = [], []
    for key in keys:
        if key in files:
            try:
                candidate = _candidate(key, run_dir / files[key])
            except SamplesUnreadable as exc:
                unreadable.append(f"{key[0]} #{key[1]}: {exc}")
                continue
            if candidate is not None:
                candidates.append(candidate)
    notes = [f"Unreadable samples: {'; '.join(unreadable)}"] if unreadable else []
    if not candidates:
        return _empty(f"none of the {len(front)} front trial(s) recorded telemetry traces",
                      notes)
    candidates.sort(key=lambda c: (not c.has_sensors, -c.duration_s, c.key))
    chosen = candidates[:max_trials]
    shown: list[TrialTraces] = []
    thinned = capped = hidden = 0
    for candidate in chosen:
        try:
            arrays = load_samples(candidate.path, lambda k: k.startswith(TRACE_PREFIX))
        except SamplesUnreadable as exc:
            notes.append(f"{candidate.key[0]} #{candidate.key[1]}: {exc}")
            continue
        series, intervals = _trial_series(arrays)
        series, dropped = _cap_per_kind(series, max_series_per_kind)
        capped += dropped
        thinned += sum(len(s.time_s) > max_points for s in series)
        series = [_thin(s, max_points) for s in series]
        hidden += max(0, len(intervals) - max_intervals)
        shown.append(TrialTraces(candidate.key[0], candidate.key[1], candidate.duration_s,
                                 series, intervals[:max_intervals]))
    kinds = [k for k in KIND_TITLES if any(s.kind == k for t in shown for s in t.series)]
    if not kinds:
        return _empty("the front trials' traces hold no power, temperature, clock or memory "
                      "channel", notes)
    notes.insert(0, f"{len(shown)} of the {len(candidates)} front trial(s) with telemetry shown "
                    f"(those with power, temperature or clock readings first, then the longest)")
    if not any(s.kind in SENSOR_KINDS for t in shown for s in t.series):
        probes = sorted({k.split(".")[1] for c in chosen for k in c.keys})
        notes.append(f"No power, temperature or clock sensor was read on these trials (probes: "
                     f"{', '.join(probes)}); only memory is shown")
    if any(t.throttled for t in shown):
        notes.append("Shaded: intervals where a throttle reason was active (NVML clocks-event "
                     "reasons that mean throttling, CPU thermal-throttle time, Jetson "
                     "over-current)")
    if hidden:
        notes.append(f"{hidden} more throttled interval(s) not shaded (at most {max_intervals} "
                     f"per trial)")
    if capped:
        notes.append(f"{capped} channel(s) not drawn (at most {max_series_per_kind} of a kind "
                     f"per trial, the first by name)")
    if thinned:
        notes.append(f"{thinned} series longer than {max_points} readings thinned to each "
                     f"bucket's lowest and highest reading")
    return TracesInfo(kinds, [KIND_TITLES[k] for k in kinds], shown, ". ".join(notes) + ".", None)


def traces_figure(info: TracesInfo) -> go.Figure:
    """A grid: one column per trial, one row per kind, axes shared down a column; each channel a
    line (same channel, same colour in every column), throttled intervals shaded."""
    rows, cols = max(len(info.kinds), 1), max(len(info.trials), 1)
    figure = make_subplots(
        rows=rows, cols=cols, shared_xaxes=True, vertical_spacing=0.06,
        horizontal_spacing=0.08 / cols,
        column_titles=[f"{t.device} #{t.trial} ({t.duration_s:.3g} s)" for t in info.trials])
    colors: dict[str, str] = {}
    for col, trial in enumerate(info.trials, start=1):
        for series in trial.series:
            first = series.name not in colors
            color = colors.setdefault(series.name, _PALETTE[len(colors) % len(_PALETTE)])
            figure.add_trace(go.Scatter(
                x=series.time_s, y=series.values, name=series.name, legendgroup=series.name,
                showlegend=first, mode="lines", line={"color": color, "width": 1.2},
                hovertemplate="%{x:.3f} s: %{y:.4g}<extra>%{fullData.name}</extra>"),
                row=info.kinds.index(series.kind) + 1, col=col)
        labelled: set[str] = set()
        for interval in trial.throttled:
            # Shaded in every row; each reason named once per column, in the top row.
            for row in range(1, rows + 1):
                named = row == 1 and interval.reason not in labelled
                annotation = ({"annotation_text": interval.reason, "annotation_font_size": 10,
                               "annotation_position": "top left"} if named else {})
                figure.add_vrect(x0=interval.start_s, x1=interval.end_s, row=row, col=col,
                                 fillcolor="#d62728", opacity=0.15, line_width=0, layer="below",
                                 **annotation)
            labelled.add(interval.reason)
    for row, title in enumerate(info.row_titles, start=1):
        figure.update_yaxes(title_text=title, row=row, col=1)
    for col in range(1, cols + 1):
        figure.update_xaxes(title_text="time since first reading [s]", row=rows, col=col)
    figure.update_layout(template="plotly_white", height=80 + 220 * rows,
                         margin={"l": 70, "r": 20, "t": 50, "b": 60},
                         legend={"title": {"text": "probe channel"}})
    return figure


def _empty(reason: str, notes: Sequence[str] = ()) -> TracesInfo:
    return TracesInfo([], [], [], ". ".join(notes) + ("." if notes else ""), reason)


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


def _candidate(key: TrialKey, path: Path) -> _Candidate | None:
    """What a front trial's samples file offers, reading only its time arrays; None without
    traces."""
    times = load_samples(path, lambda k: k.startswith(TRACE_PREFIX) and k.endswith("." + _TIME))
    if not times:
        return None
    names = sample_keys(path)
    parsed = [p for p in map(parse_trace_key, names) if p is not None]
    has_sensors = any(channel_kind(channel, unit) in SENSOR_KINDS
                      for _, channel, unit in parsed)
    spans = [float(np.nanmax(t) - np.nanmin(t)) for t in times.values()
             if np.isfinite(t).any()]
    return _Candidate(key, path, [n for n in names if n.startswith(TRACE_PREFIX)], has_sensors,
                      max(spans, default=0.0))


def _trial_series(arrays: dict[str, FloatArray]) -> tuple[list[Series], list[ThrottledInterval]]:
    """Every drawable channel of one trial's traces, and its throttled intervals."""
    channels: dict[str, dict[str, tuple[str | None, FloatArray]]] = {}
    times: dict[str, FloatArray] = {}
    for key, values in arrays.items():
        parsed = parse_trace_key(key)
        if parsed is None:
            continue
        probe, channel, unit = parsed
        if channel == _TIME and unit is None:
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
            intervals += _throttled(channel, unit, clock, values)
    return series, _merge(intervals)


def _counter_power(clock: FloatArray, energy_uj: FloatArray,
                   wrap_uj: FloatArray | None) -> tuple[FloatArray, FloatArray]:
    """Watts between consecutive valid readings of a cumulative µJ counter, at their midpoints;
    a counter that went down wrapped once (adds its range) or, with no range known, is a gap."""
    valid = np.isfinite(energy_uj) & np.isfinite(clock)
    t, e = clock[valid], energy_uj[valid]
    if len(t) < 2:
        return np.empty(0), np.empty(0)
    ranges = wrap_uj[np.isfinite(wrap_uj)] if wrap_uj is not None else np.empty(0)
    delta = np.diff(e)
    delta = np.where(delta < 0, delta + (ranges[-1] if len(ranges) else np.nan), delta)
    span = np.diff(t)
    watts = np.where(span > 0, delta / np.where(span > 0, span, 1.0) / 1e6, np.nan)
    keep = np.isfinite(watts)
    return ((t[:-1] + t[1:]) / 2)[keep], watts[keep]


def _throttled(channel: str, unit: str | None, clock: FloatArray,
               values: FloatArray) -> list[ThrottledInterval]:
    """The intervals a throttle-bearing channel says the device was throttled; [] for others."""
    if channel == "clock_event_reasons" and unit == "bitmask":
        return _nvml_throttled(clock, values)
    if channel.endswith(_CPU_THROTTLE_TIME):
        scope = "package" if "package_" in channel else "core"
        return _rising(clock, values, f"cpu thermal throttle ({scope})")
    if channel.startswith("oc_count."):
        return _rising(clock, values, "over-current event")
    if channel.startswith("oc_alarm.") and unit == "flag":
        return _held(clock, [f"over-current alarm ({channel.removeprefix('oc_alarm.')})"
                             if math.isfinite(v) and v > 0 else "" for v in values])
    return []


def _nvml_throttled(clock: FloatArray, masks: FloatArray) -> list[ThrottledInterval]:
    """NVML reports the *current* reasons, so each reading holds until the next; only the
    reasons that mean throttling (``THROTTLING_REASONS``) count."""
    # The one table of which NVML bits mean throttling; pure Python, imports no GPU library.
    from dse.measure.telemetry.nvml_throttle import THROTTLING_REASONS, reason_bits

    bits = reason_bits()
    reasons = [(name, bits[name]) for name in THROTTLING_REASONS]
    labels = []
    for mask in masks:
        active = [] if not math.isfinite(mask) else [n for n, b in reasons if int(mask) & b]
        labels.append(", ".join(active))
    return _held(clock, labels)


def _held(clock: FloatArray, labels: Sequence[str]) -> list[ThrottledInterval]:
    """Runs of equal, non-empty labels, each from its first reading to the next run's first."""
    out = []
    start = 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            if labels[start]:
                end = clock[i] if i < len(labels) else clock[i - 1]
                out.append(ThrottledInterval(float(clock[start]), float(end), labels[start]))
            start = i
    return out


def _rising(clock: FloatArray, counter: FloatArray, reason: str) -> list[ThrottledInterval]:
    """Between two valid readings of a cumulative counter that rose, something was counted."""
    valid = np.flatnonzero(np.isfinite(counter))
    return [ThrottledInterval(float(clock[a]), float(clock[b]), reason)
            for a, b in pairwise(valid) if counter[b] > counter[a]]


def _merge(intervals: list[ThrottledInterval]) -> list[ThrottledInterval]:
    """Same-reason intervals that overlap or touch as one, all sorted by start."""
    merged: list[ThrottledInterval] = []
    last: dict[str, int] = {}
    for interval in sorted(intervals, key=lambda i: (i.start_s, i.end_s, i.reason)):
        index = last.get(interval.reason)
        if index is not None and interval.start_s <= merged[index].end_s:
            previous = merged[index]
            merged[index] = previous._replace(end_s=max(previous.end_s, interval.end_s))
        else:
            last[interval.reason] = len(merged)
            merged.append(interval)
    return merged


def _cap_per_kind(series: Sequence[Series], cap: int) -> tuple[list[Series], int]:
    """The first ``cap`` series of each kind, and how many were dropped."""
    kept: list[Series] = []
    seen: dict[str, int] = {}
    for s in series:
        seen[s.kind] = seen.get(s.kind, 0) + 1
        if seen[s.kind] <= cap:
            kept.append(s)
    return kept, len(series) - len(kept)


def _thin(series: Series, max_points: int) -> Series:
    """At most ``max_points`` readings: each of ``max_points // 2`` equal runs keeps its lowest
    and highest valid reading, in time order (a short spike stays visible)."""
    values = np.asarray(series.values)
    if len(values) <= max_points:
        return series
    kept: list[int] = []
    for bucket in np.array_split(np.arange(len(values)), max_points // 2):
        finite = bucket[np.isfinite(values[bucket])]
        if len(finite):
            ends = {int(finite[np.argmin(values[finite])]), int(finite[np.argmax(values[finite])])}
            kept.extend(sorted(ends))
    time = np.asarray(series.time_s)
    return series._replace(time_s=time[kept].tolist(), values=values[kept].tolist())
