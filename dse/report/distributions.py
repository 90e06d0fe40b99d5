"""The latency-distribution panel: the raw latency samples of the front trials, as ECDFs.

Each measured trial's raw samples sit in an ``.npz`` under ``<run_dir>/samples/`` (written by
``dse.search.loop``; the trial's ``samples_file`` user attribute holds its path relative to the run
folder). :func:`latency_distributions_info` reads those of each device's front (no plotly);
:func:`latency_distributions_figure` draws them. The helpers that find and read the files,
:func:`sample_files` and :func:`load_samples`, serve the telemetry-trace panel too.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import optuna
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dse.core import TrialAttr
from dse.report.render import _PALETTE
from dse.report.values import label
from dse.results import front_frame, is_missing, metric_column

FloatArray = npt.NDArray[np.float64]
TrialKey = tuple[str, int]
"""A trial of a campaign: (device, trial number); each device's study numbers from 0."""

LATENCY_KEY = "latency_ms"
# The quantiles marked on each curve, with the trials-table metrics that hold them and their CI.
_MARKED = (("p50", 0.5, "latency_p50_ms", "latency_p50_ci_low_ms", "latency_p50_ci_high_ms"),
           ("p99", 0.99, "latency_p99_ms", "latency_p99_ci_low_ms", "latency_p99_ci_high_ms"))


class SamplesUnreadable(Exception):
    """A samples file is missing or not a readable ``.npz``; the message says which and why."""


class QuantileMark(NamedTuple):
    name: str
    """``p50`` or ``p99``."""
    level: float
    value_ms: float
    ci_low_ms: float | None
    ci_high_ms: float | None
    """The 95% confidence interval, when the trials table has it."""
    source: str
    """``trials table`` (the measured metric), or ``samples`` when the table lacks it."""


class LatencyCurve(NamedTuple):
    """The ECDF of one trial: ``ecdf[i]`` of its samples are at most ``latency_ms[i]``."""

    device: str
    trial: int
    name: str
    latency_ms: list[float]
    ecdf: list[float]
    samples: int
    """How many samples the trial has (the curve may be drawn through fewer)."""
    quantiles: list[QuantileMark]


class DeviceLatencies(NamedTuple):
    device: str
    curves: list[LatencyCurve]
    """In front order (ascending in the first objective, as ``front_frame`` sorts)."""
    log_x: bool


class LatencyDistributionsInfo(NamedTuple):
    devices: list[DeviceLatencies]
    """Devices with at least one curve, sorted by name."""
    note: str
    """Trials left out (over the cap, without samples) and how long samples were thinned."""
    empty_reason: str | None


def sample_files(studies: Sequence[optuna.Study]) -> dict[TrialKey, str]:
    """Each measured trial's samples file, relative to the run folder, by (device, trial)."""
    files: dict[TrialKey, str] = {}
    for study in studies:
        for trial in study.get_trials(deepcopy=False):
            relative = trial.user_attrs.get(TrialAttr.SAMPLES_FILE)
            if not relative:
                continue
            device = (trial.user_attrs.get(TrialAttr.CANDIDATE) or {}).get("device_profile")
            files[("" if device is None else str(device), trial.number)] = str(relative)
    return files


def load_samples(path: Path, wanted: Callable[[str], bool]) -> dict[str, FloatArray]:
    """The arrays of the ``.npz`` at ``path`` whose key ``wanted`` accepts (only those are
    decompressed), as flat float arrays. Raises :class:`SamplesUnreadable`."""
    with _unreadable_as_error(path), np.load(path, allow_pickle=False) as archive:
        return {key: np.asarray(archive[key], dtype=np.float64).ravel()
                for key in archive.files if wanted(key)}


def sample_keys(path: Path) -> list[str]:
    """The keys of the ``.npz`` at ``path``, read from its directory without decompressing any
    array. Raises :class:`SamplesUnreadable`."""
    with _unreadable_as_error(path), np.load(path, allow_pickle=False) as archive:
        return list(archive.files)


@contextmanager
def _unreadable_as_error(path: Path) -> Iterator[None]:
    """Check that ``path`` is a zip archive (np.load would take anything else for a pickle or
    an ``.npy``), then turn what reading it raises into :class:`SamplesUnreadable`."""
    if not path.is_file():
        raise SamplesUnreadable(f"{path} does not exist")
    if not zipfile.is_zipfile(path):
        raise SamplesUnreadable(f"{path} is not a readable .npz (not a zip archive)")
    try:
        yield
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise SamplesUnreadable(f"{path} is not a readable .npz: {exc}") from None


def latency_distributions_info(trials: pd.DataFrame, objectives: Sequence[str],
                               studies: Sequence[optuna.Study], run_dir: Path | None, *,
                               max_per_device: int = 12, max_points: int = 500,
                               front: pd.DataFrame | None = None) -> LatencyDistributionsInfo:
    """ECDFs of the raw latency samples of each device's front (:func:`dse.results.front_frame`).

    At most ``max_per_device`` front trials per device, spread evenly along the front (in the
    order of the first objective); the rest are named in the note. A curve with more than
    ``max_points`` samples is drawn through ``max_points`` of its sorted samples (each at its
    exact ECDF height); the p50 and p99 marks are the trials table's exact values with their 95%
    confidence intervals (computed from the samples, without an interval, where the table lacks
    them). Trials without a samples file, or with an unreadable one, are named in the note.
    ``front``: ``dse.results.front_frame(trials, objectives)`` when the caller has it already
    (it costs O(n²) in the trials; a dashboard computes it once for all its panels).
    """
    if max_per_device < 1 or max_points < 2:
        raise ValueError(f"max_per_device must be >= 1 and max_points >= 2, but got "
                         f"{max_per_device=}, {max_points=}")
    if run_dir is None:
        return LatencyDistributionsInfo([], "", "the run folder is not known, so the raw latency "
                                                "samples cannot be read")
    front = front_frame(trials, objectives) if front is None else front
    if front.empty:
        return LatencyDistributionsInfo([], "", "no feasible trial has been measured yet, so "
                                                "there is no front")
    files = sample_files(studies)
    devices: list[DeviceLatencies] = []
    notes: list[str] = []
    thinned = 0
    problems: list[str] = []
    for device, rows in front.groupby(front["device"].astype("string").fillna(""), sort=True):
        kept, dropped = _spread(rows, max_per_device)
        if len(dropped):
            notes.append(f"{device}: {len(dropped)} of {len(rows)} front trials not drawn (at "
                         f"most {max_per_device}, spread along the front): "
                         + ", ".join(f"#{int(n)}" for n in dropped["trial"]))
        curves = []
        for _, row in kept.iterrows():
            key = (str(device), int(row["trial"]))
            try:
                samples = _latencies(run_dir, files.get(key))
            except SamplesUnreadable as exc:
                problems.append(f"{device} #{key[1]}: {exc}")
                continue
            thinned += len(samples) > max_points
            curves.append(_curve(row, str(device), samples, max_points))
        if curves:
            lowest = min(min(c.latency_ms) for c in curves)
            highest = max(max(c.latency_ms) for c in curves)
            devices.append(DeviceLatencies(str(device), curves,
                                           bool(lowest > 0 and highest >= 10 * lowest)))
    if problems:
        notes.append("Not drawn, no samples: " + "; ".join(problems))
    if thinned:
        notes.append(f"{thinned} curve(s) with more than {max_points} samples are drawn through "
                     f"{max_points} of their sorted samples; the p50/p99 marks and their 95% "
                     f"confidence intervals are the exact values of the full sample")
    note = ". ".join(notes) + ("." if notes else "")
    if not devices:
        return LatencyDistributionsInfo([], note, f"none of the {len(front)} front trial(s) has "
                                                  f"readable latency samples")
    return LatencyDistributionsInfo(devices, note, None)


def latency_distributions_figure(info: LatencyDistributionsInfo) -> go.Figure:
    """One row per device: each front trial's ECDF as a step line, its p50 and p99 as markers
    with the confidence interval as a horizontal error bar."""
    rows = max(len(info.devices), 1)
    figure = make_subplots(rows=rows, cols=1, subplot_titles=[d.device for d in info.devices],
                           vertical_spacing=0.25 / rows)
    for row, device in enumerate(info.devices, start=1):
        for index, curve in enumerate(device.curves):
            color = _PALETTE[index % len(_PALETTE)]
            group = f"{device.device}#{curve.trial}"
            # With several devices' rows in one legend, each entry says whose trial it is.
            name = curve.name if len(info.devices) == 1 else f"{device.device} {curve.name}"
            figure.add_trace(go.Scatter(
                x=curve.latency_ms, y=curve.ecdf, name=name, legendgroup=group,
                mode="lines", line={"shape": "hv", "color": color, "width": 1.5},
                hovertemplate=(f"{name} ({curve.samples} samples)<br>"
                               "%{x:.4g} ms: %{y:.3f}<extra></extra>")),
                row=row, col=1)
            figure.add_trace(go.Scatter(
                x=[q.value_ms for q in curve.quantiles], y=[q.level for q in curve.quantiles],
                name=f"{name} p50/p99", legendgroup=group, showlegend=False,
                mode="markers", marker={"color": color, "size": 9, "symbol": "diamond"},
                error_x={"type": "data", "symmetric": False, "color": color, "thickness": 1.5,
                         "array": [_above(q) for q in curve.quantiles],
                         "arrayminus": [_below(q) for q in curve.quantiles]},
                text=[_mark_text(q) for q in curve.quantiles],
                hovertemplate=f"{name}<br>%{{text}}<extra></extra>"),
                row=row, col=1)
        figure.update_xaxes(title_text="latency per call [ms]", row=row, col=1,
                            type="log" if device.log_x else "linear")
        figure.update_yaxes(title_text="share of calls ≤ x", range=[0, 1.02], row=row, col=1)
    figure.update_layout(template="plotly_white", height=120 + 380 * rows,
                         margin={"l": 70, "r": 20, "t": 40, "b": 60},
                         legend={"title": {"text": "front trial"}})
    return figure


def _latencies(run_dir: Path, relative: str | None) -> FloatArray:
    """A trial's finite latency samples; :class:`SamplesUnreadable` says why there are none."""
    if relative is None:
        raise SamplesUnreadable("no samples file")
    samples = load_samples(run_dir / relative, lambda k: k == LATENCY_KEY).get(LATENCY_KEY)
    samples = np.empty(0) if samples is None else samples[np.isfinite(samples)]
    if len(samples) == 0:
        raise SamplesUnreadable(f"no latency samples in {relative}")
    return samples


def _spread(rows: pd.DataFrame, cap: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``cap`` rows spread evenly from the first to the last, and the others."""
    if len(rows) <= cap:
        return rows, rows.iloc[0:0]
    positions = set(np.round(np.linspace(0, len(rows) - 1, cap)).astype(int).tolist())
    mask = np.array([i in positions for i in range(len(rows))])
    return rows[mask], rows[~mask]


def _curve(row: pd.Series, device: str, samples: FloatArray, max_points: int) -> LatencyCurve:
    ordered = np.sort(samples)
    count = len(ordered)
    marks = [_mark(row, ordered, *spec) for spec in _MARKED]
    if count <= max_points:
        ranks = np.arange(count)
    else:
        # Real samples at evenly spaced ranks, both ends, and those at the marked quantiles.
        at_marks = [int(np.clip(np.ceil(q.level * count) - 1, 0, count - 1)) for q in marks]
        ranks = np.unique(np.concatenate([
            np.round(np.linspace(0, count - 1, max_points - len(at_marks))).astype(int),
            at_marks]))
    return LatencyCurve(device, int(row["trial"]), _name(row),
                        ordered[ranks].tolist(), ((ranks + 1) / count).tolist(), count, marks)


def _mark(row: pd.Series, ordered: FloatArray, name: str, level: float, metric: str,
          low: str, high: str) -> QuantileMark:
    value = _cell(row, metric)
    if value is None:
        # np.quantile's default (linear) is the harness's own rule (dse.measure.stats).
        return QuantileMark(name, level, float(np.quantile(ordered, level)), None, None,
                            "samples")
    return QuantileMark(name, level, value, _cell(row, low), _cell(row, high), "trials table")


def _cell(row: pd.Series, metric: str) -> float | None:
    column = metric_column(metric)
    if column not in row.index or is_missing(row[column]):
        return None
    return float(row[column])


def _name(row: pd.Series) -> str:
    """``#3 onnxruntime/int8 b1``: the trial and how it was deployed."""
    parts = [label(row[c]) for c in ("param.backend", "param.precision") if c in row.index]
    batch = label(row["param.batch_size"]) if "param.batch_size" in row.index else ""
    stack = "/".join(p for p in parts if p)
    return " ".join(p for p in (f"#{int(row['trial'])}", stack, f"b{batch}" if batch else "") if p)


def _above(mark: QuantileMark) -> float:
    return 0.0 if mark.ci_high_ms is None else max(mark.ci_high_ms - mark.value_ms, 0.0)


def _below(mark: QuantileMark) -> float:
    return 0.0 if mark.ci_low_ms is None else max(mark.value_ms - mark.ci_low_ms, 0.0)


def _mark_text(mark: QuantileMark) -> str:
    ci = ("no confidence interval" if mark.ci_low_ms is None or mark.ci_high_ms is None
          else f"95% CI {mark.ci_low_ms:.4g} – {mark.ci_high_ms:.4g} ms")
    return f"{mark.name} {mark.value_ms:.4g} ms ({ci}; from the {mark.source})"
