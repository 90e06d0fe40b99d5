"""The telemetry-trace panel: power, temperature and clocks over a front trial's measurement, with
the intervals where the device throttled shaded.

A measured trial's samples file (see :mod:`dse.report.distributions`) holds every probe's readings
as ``trace.<probe>.time_s`` (``time.time()`` seconds) and ``trace.<probe>.<channel> [<unit>]``
(``dse.trial.telemetry_window``). This module chooses the front trials to show and draws them; the
readings become series in :mod:`dse.report.trace_series` and throttled intervals in
:mod:`dse.report.throttling`.

:func:`traces_info` is the data (no plotly); :func:`traces_figure` draws it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import optuna
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dse.report.axis_text import format_number
from dse.report.distributions import SamplesUnreadable, TrialKey, load_samples, sample_files, sample_keys
from dse.report.render import _PALETTE
from dse.report.throttling import ThrottledInterval
from dse.report.trace_series import (
    KIND_TITLES,
    KIND_UNITS,
    SENSOR_KINDS,
    STEADY_FRACTION,
    TIME_CHANNEL,
    TRACE_PREFIX,
    Series,
    channel_kind,
    parse_trace_key,
    steady_level,
    trial_series,
)
from dse.results import front_frame

# How many front trials' files are read, per trial shown, looking for traces that move.
_LOOK_FURTHER = 4


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
    # A trial whose every trace is steady is a line of text, not a column of flat plots: more
    # files are read, up to a bound, to find trials with something to draw.
    chosen = candidates[:max_trials * _LOOK_FURTHER]
    shown: list[TrialTraces] = []
    steady: dict[str, list[tuple[TrialKey, float, str]]] = {}
    read: list[_Candidate] = []
    thinned = capped = hidden = 0
    for candidate in chosen:
        if len(shown) == max_trials:
            break
        try:
            arrays = load_samples(candidate.path, lambda k: k.startswith(TRACE_PREFIX))
        except SamplesUnreadable as exc:
            notes.append(f"{candidate.key[0]} #{candidate.key[1]}: {exc}")
            continue
        read.append(candidate)
        series, intervals = trial_series(arrays)
        moving = []
        for one in series:
            level = steady_level(one)
            if level is None:
                moving.append(one)
            else:
                steady.setdefault(one.name, []).append((candidate.key, level,
                                                        KIND_UNITS[one.kind]))
        if not moving and not intervals:
            continue
        series, dropped = _cap_per_kind(moving, max_series_per_kind)
        capped += dropped
        thinned += sum(len(s.time_s) > max_points for s in series)
        series = [_thin(s, max_points) for s in series]
        hidden += max(0, len(intervals) - max_intervals)
        shown.append(TrialTraces(candidate.key[0], candidate.key[1], candidate.duration_s,
                                 series, intervals[:max_intervals]))
    kinds = [k for k in KIND_TITLES if any(s.kind == k for t in shown for s in t.series)]
    steady_lines = [_steady_line(name, found) for name, found in sorted(steady.items())]
    probes = sorted({k.split(".")[1] for c in read for k in c.keys})
    sensors = any(s.kind in SENSOR_KINDS for t in shown for s in t.series) or any(
        KIND_UNITS[kind] in line for kind in SENSOR_KINDS for line in steady_lines)
    no_sensor = (f"No power, temperature or clock sensor was read on these trials (probes: "
                 f"{', '.join(probes)})")
    if not kinds and steady_lines:
        return _empty("no telemetry trace moved during the measurement: "
                      + "; ".join(steady_lines), notes if sensors else [*notes, no_sensor])
    if not kinds:
        return _empty("the front trials' traces hold no power, temperature, clock or memory "
                      "channel", notes)
    notes.insert(0, f"{len(shown)} of the {len(candidates)} front trial(s) with telemetry shown "
                    f"(those with power, temperature or clock readings first, then the longest); "
                    f"a trace that moves less than {STEADY_FRACTION:.0%} of its level is said "
                    f"in words, not drawn")
    notes[1:1] = steady_lines
    if not sensors:
        notes.append(no_sensor + "; only memory is shown")
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


def _steady_line(name: str, found: Sequence[tuple[TrialKey, float, str]]) -> str:
    """``process_memory rss_mb steady at 1,184 MB on #25, 1,139 MB on #10``."""
    readings = ", ".join(f"{format_number(level, _decimals(level))} {unit} on "
                         f"{_trial_name(key, found)}" for key, level, unit in found)
    return f"{name} steady at {readings}"


def _decimals(level: float) -> int:
    """Three significant digits at least, no decimals for values of a thousand or more."""
    return max(0, 2 - int(np.floor(np.log10(abs(level))))) if level else 0


def _trial_name(key: TrialKey, found: Sequence[tuple[TrialKey, float, str]]) -> str:
    """``#25``, or ``local-cpu #25`` when the readings span devices."""
    several = len({device for (device, _), _, _ in found}) > 1
    return f"{key[0]} #{key[1]}" if several else f"#{key[1]}"


def _empty(reason: str, notes: Sequence[str] = ()) -> TracesInfo:
    return TracesInfo([], [], [], ". ".join(notes) + ("." if notes else ""), reason)


def _candidate(key: TrialKey, path: Path) -> _Candidate | None:
    """What a front trial's samples file offers, reading only its time arrays; None without
    traces."""
    times = load_samples(path, lambda k: k.startswith(TRACE_PREFIX) and k.endswith("." + TIME_CHANNEL))
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
