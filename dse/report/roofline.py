"""The roofline panel: per device, the rate each trial attained against its arithmetic intensity,
under the device's peak compute and memory-bandwidth ceilings.

The trials table has both coordinates (``arithmetic_intensity [FLOP/B]``, ``achieved_gflops
[GFLOP/s]``, see :mod:`dse.core.metrics`); the ceilings come from the peak figures of the device
profile, which ``dse.search.study`` stores on each device's study (user attribute
``device_peaks``). A figure the profile does not give is never guessed: the ceiling is left out
and the panel says so. :func:`roofline_info` is the data (no plotly); :func:`roofline_figure`
draws it.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import optuna
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dse.core import StudyAttr, TrialAttr
from dse.report.render import _PALETTE
from dse.report.values import label
from dse.results import front_frame, metric_column

INTENSITY = "arithmetic_intensity"
ATTAINED = "achieved_gflops"
# How far the ceilings reach beyond the points (and the ridge points), as a factor on log axes.
_MARGIN = 2.0


class Ceiling(NamedTuple):
    """One roof as a polyline in (FLOP/B, GFLOP/s): the bandwidth slope up to the ridge, then
    the flat compute peak; either part alone when the profile gives only one figure."""

    name: str
    precision: str | None
    """The precision of the compute peak; None for a bandwidth-only line."""
    x: list[float]
    y: list[float]


class RooflinePoints(NamedTuple):
    """Trials drawn alike: one precision's, or the front's."""

    name: str
    trials: list[int]
    x: list[float]
    """Arithmetic intensity, FLOP/B."""
    y: list[float]
    """Attained rate, GFLOP/s."""
    on_front: list[bool]
    hover: list[str]


class DeviceRoofline(NamedTuple):
    device: str
    groups: list[RooflinePoints]
    """Measured trials, one group per precision, sorted by name."""
    front: RooflinePoints
    """Those of the trials on the device's Pareto front (over the campaign's objectives)."""
    ceilings: list[Ceiling]
    note: str
    """What is unknown (a missing peak) and where the peaks come from; also in the info's note."""


class RooflineInfo(NamedTuple):
    devices: list[DeviceRoofline]
    """Devices with at least one point, sorted by name."""
    x_title: str
    y_title: str
    note: str
    """Trials not drawn, then each device's note (``<device>: ...``)."""
    empty_reason: str | None


def device_peaks_by_profile(studies: Sequence[optuna.Study]) -> dict[str, Mapping[str, Any]]:
    """The peak figures each study stored, by device profile name."""
    peaks: dict[str, Mapping[str, Any]] = {}
    for study in studies:
        stored = study.user_attrs.get(StudyAttr.DEVICE_PEAKS)
        name = (stored or {}).get("profile") or study.user_attrs.get(StudyAttr.DEVICE_PROFILE)
        if isinstance(stored, Mapping) and name:
            peaks[str(name)] = stored
    return peaks


def roofline_info(trials: pd.DataFrame, objectives: Sequence[str],
                  studies: Sequence[optuna.Study], *,
                  front: pd.DataFrame | None = None) -> RooflineInfo:
    """One roofline per device: its measured trials (state COMPLETE, status ok, not a reuse)
    with a positive intensity and rate, coloured by precision, front members marked, under the
    compute ceiling of each precision the profile gives a peak for (``peak_gflops`` is fp32,
    ``peak_gflops_by_precision`` the others) and its ``peak_bandwidth_gbs`` slope.

    ``front``: ``dse.results.front_frame(trials, objectives)`` when the caller has it already
    (it costs O(n²) in the trials; a dashboard computes it once for all its panels).
    """
    x_col, y_col = metric_column(INTENSITY), metric_column(ATTAINED)
    if x_col not in trials.columns or y_col not in trials.columns:
        return RooflineInfo([], x_col, y_col, "",
                            f"no trial has measured both {INTENSITY} and {ATTAINED} (they need the "
                            f"graph's FLOPs and bytes, from an ONNX export)")
    measured = trials[(trials["state"] == "COMPLETE") & (trials[TrialAttr.STATUS] == "ok")
                      & trials[TrialAttr.REUSED_FROM].isna()]
    x, y = measured[x_col].astype("float64"), measured[y_col].astype("float64")
    plotted = measured[(x > 0) & (y > 0)]
    lacking = len(measured) - len(plotted)
    note = (f"{lacking} measured trial(s) lack a positive {INTENSITY} or {ATTAINED} and are not "
            f"shown." if lacking else "")
    if plotted.empty:
        return RooflineInfo([], x_col, y_col, note,
                            f"no measured trial has a positive {INTENSITY} and {ATTAINED} yet")
    front = front_frame(trials, objectives) if front is None else front
    on_front = set(zip(front["device"].astype("string").fillna(""),
                       (int(n) for n in front["trial"]), strict=True))
    peaks = device_peaks_by_profile(studies)
    devices = []
    for device, rows in plotted.groupby(plotted["device"].astype("string").fillna(""), sort=True):
        devices.append(_device(str(device), rows, x_col, y_col, on_front, peaks.get(str(device))))
    # The page shows one note per panel: each device's, after the campaign's.
    note = " ".join([note, *(f"{d.device}: {d.note}" for d in devices if d.note)]).strip()
    return RooflineInfo(devices, x_col, y_col, note, None)


def roofline_figure(info: RooflineInfo) -> go.Figure:
    """One log-log panel per device: points coloured by precision (the ceiling of a precision in
    its colour, dashed), front members ringed."""
    rows = max(len(info.devices), 1)
    figure = make_subplots(rows=rows, cols=1, subplot_titles=[d.device for d in info.devices],
                           vertical_spacing=0.25 / rows)
    precisions = sorted({g.name for d in info.devices for g in d.groups}
                        | {c.precision for d in info.devices for c in d.ceilings
                           if c.precision is not None})
    color = {p: _PALETTE[i % len(_PALETTE)] for i, p in enumerate(precisions)}
    shown: set[str] = set()
    for row, device in enumerate(info.devices, start=1):
        for ceiling in device.ceilings:
            line_color = color.get(ceiling.precision or "", "#555555")
            # Named at its right end, where the roof is flat (or the slope at its highest).
            figure.add_trace(go.Scatter(
                x=ceiling.x, y=ceiling.y, name=ceiling.name, mode="lines+text", showlegend=False,
                text=[""] * (len(ceiling.x) - 1) + [ceiling.name], textposition="top left",
                textfont={"color": line_color, "size": 11},
                line={"color": line_color, "dash": "dash", "width": 1.5},
                hovertemplate=f"{ceiling.name}<extra>{device.device}</extra>"), row=row, col=1)
        for group in device.groups:
            figure.add_trace(go.Scatter(
                x=group.x, y=group.y, name=group.name, legendgroup=group.name,
                showlegend=group.name not in shown, mode="markers", text=group.hover,
                hovertemplate="%{text}<extra></extra>",
                marker={"color": color[group.name], "size": 8}), row=row, col=1)
            shown.add(group.name)
        if device.front.trials:
            figure.add_trace(go.Scatter(
                x=device.front.x, y=device.front.y, name="Pareto front", legendgroup="front",
                showlegend="front" not in shown, mode="markers", text=device.front.hover,
                hovertemplate="%{text}<extra></extra>",
                marker={"symbol": "circle-open", "size": 15, "color": "#111111",
                        "line": {"width": 1.5}}), row=row, col=1)
            shown.add("front")
        figure.update_xaxes(type="log", title_text=info.x_title, row=row, col=1)
        figure.update_yaxes(type="log", title_text=info.y_title, row=row, col=1)
    figure.update_layout(template="plotly_white", height=120 + 420 * rows,
                         margin={"l": 70, "r": 20, "t": 40, "b": 60},
                         legend={"title": {"text": "precision"}})
    return figure


def _device(device: str, rows: pd.DataFrame, x_col: str, y_col: str,
            on_front: set[tuple[str, int]], peaks: Mapping[str, Any] | None) -> DeviceRoofline:
    precision = (rows["param.precision"].map(label) if "param.precision" in rows.columns
                 else pd.Series("", index=rows.index))
    groups = [_group(name or "unknown precision", rows[precision == name], x_col, y_col,
                     device, on_front)
              for name in sorted(set(precision))]
    front_rows = rows[[(device, int(n)) in on_front for n in rows["trial"]]]
    front = _group("Pareto front", front_rows, x_col, y_col, device, on_front)
    xs = rows[x_col].astype("float64")
    ceilings, note = _ceilings(device, peaks, float(xs.min()), float(xs.max()),
                               sorted({p for p in precision if p}))
    return DeviceRoofline(device, groups, front, ceilings, note)


def _group(name: str, rows: pd.DataFrame, x_col: str, y_col: str, device: str,
           on_front: set[tuple[str, int]]) -> RooflinePoints:
    numbers = [int(n) for n in rows["trial"]]
    return RooflinePoints(name, numbers, rows[x_col].astype("float64").tolist(),
                      rows[y_col].astype("float64").tolist(),
                      [(device, n) in on_front for n in numbers], _hover(rows, x_col, y_col))


def _hover(rows: pd.DataFrame, x_col: str, y_col: str) -> list[str]:
    """Where the point sits and how the trial was deployed; the Pareto panel's hover has the
    whole configuration (a campaign of 10,000 trials would carry it twice otherwise)."""
    def text(column: str) -> list[str]:
        return ([label(v) for v in rows[column]] if column in rows.columns
                else [""] * len(rows))

    return [html.escape(f"trial {trial} on {device}", quote=False)
            + "<br>" + html.escape(f"{backend}/{precision} batch {batch}", quote=False)
            + f"<br>{x:.4g} FLOP/B, {y:.4g} GFLOP/s"
            for trial, device, backend, precision, batch, x, y in zip(
                text("trial"), text("device"), text("param.backend"), text("param.precision"),
                text("param.batch_size"), rows[x_col].astype("float64"),
                rows[y_col].astype("float64"), strict=True)]


def compute_peaks(peaks: Mapping[str, Any]) -> dict[str, float]:
    """Peak GFLOP/s by precision: ``peak_gflops`` as fp32, overridden and joined by
    ``peak_gflops_by_precision``."""
    out: dict[str, float] = {}
    if peaks.get("peak_gflops"):
        out["fp32"] = float(peaks["peak_gflops"])
    out.update({str(k): float(v) for k, v in (peaks.get("peak_gflops_by_precision") or {}).items()
                if v})
    return out


def _ceilings(device: str, peaks: Mapping[str, Any] | None, low: float, high: float,
              used: Sequence[str]) -> tuple[list[Ceiling], str]:
    """The roofs over intensities from ``low`` to ``high`` (widened to show every ridge), and a
    note of what the profile leaves unknown."""
    if peaks is None:
        return [], (f"Ceilings unknown: the study of {device} stores no peak figures (studies "
                    f"opened before dse recorded them; reopen the campaign to record them).")
    compute = compute_peaks(peaks)
    bandwidth = float(peaks["peak_bandwidth_gbs"]) if peaks.get("peak_bandwidth_gbs") else None
    source = str(peaks.get("peak_source") or "").strip()
    cited = f" Peaks: {source}" if source else ""
    if not compute and bandwidth is None:
        return [], (f"Ceilings unknown: profile {device} gives neither peak_gflops nor "
                    f"peak_bandwidth_gbs.")
    notes = []
    if bandwidth is None:
        notes.append(f"memory-bandwidth ceiling unknown: profile {device} gives no "
                     f"peak_bandwidth_gbs")
    if not compute:
        notes.append(f"compute ceiling unknown: profile {device} gives no peak_gflops")
    missing = [p for p in used if p not in compute]
    if compute and missing:
        notes.append(f"no peak compute known for {', '.join(missing)} on profile {device}")
    ridges = [peak / bandwidth for peak in compute.values()] if bandwidth else []
    low = min([low, *ridges]) / _MARGIN
    high = max([high, *ridges]) * _MARGIN
    ceilings = []
    for precision, peak in sorted(compute.items(), key=lambda item: item[1]):
        # The profile gives integer precisions' peaks in operations, not floating-point ones.
        unit = "GOP/s" if precision.startswith("int") else "GFLOP/s"
        name = f"{precision} peak {_amount(peak)} {unit}"
        if bandwidth is None:
            ceilings.append(Ceiling(name, precision, [low, high], [peak, peak]))
        else:
            ceilings.append(Ceiling(f"{name}, {_amount(bandwidth)} GB/s", precision,
                                    [low, peak / bandwidth, high], [bandwidth * low, peak, peak]))
    if bandwidth is not None and not compute:
        ceilings.append(Ceiling(f"memory {_amount(bandwidth)} GB/s", None, [low, high],
                                [bandwidth * low, bandwidth * high]))
    text = "; ".join(notes)
    text = (text[:1].upper() + text[1:] + ".") if text else ""
    return ceilings, (text + cited).strip()


def _amount(value: float) -> str:
    """``300,000`` for a datasheet figure; a small one keeps three significant digits."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.3g}"
