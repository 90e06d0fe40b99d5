"""The hypervolume history panel: how each device's front grew, trial after trial.

:func:`hypervolume_history_info` is the data (no plotly); :func:`hypervolume_history_figure`
draws it. The volumes come from :mod:`dse.search.pareto`, under one reference point for every
device (:func:`~dse.search.pareto.default_reference` over the whole campaign), so the lines of
several devices can be compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dse.core import Direction, TrialAttr, find_metric, metric
from dse.report.axis_text import tick_format
from dse.report.render import _PALETTE
from dse.report.values import label
from dse.results import competing_mask, metric_column
from dse.search import default_reference, hypervolume_history

# Trials not finished yet cannot have grown the front; they are left off the x axis.
_UNFINISHED = ("RUNNING", "WAITING")


class HypervolumeLine(NamedTuple):
    """One device's history: after finished trial ``trials[i]`` (the ``completed[i]``-th to
    finish on that device), its feasible front dominated ``hypervolume[i]``."""

    device: str
    trials: list[int]
    completed: list[int]
    hypervolume: list[float]


class HypervolumeHistoryInfo(NamedTuple):
    lines: list[HypervolumeLine]
    """One per device, sorted by device name."""
    reference: list[float]
    """The reference point, one value per objective in metric units (empty when none)."""
    y_title: str
    note: str
    """The reference point in words, and the trials not counted."""
    empty_reason: str | None


def hypervolume_history_info(trials: pd.DataFrame,
                             objectives: Sequence[str]) -> HypervolumeHistoryInfo:
    """The hypervolume of each device's feasible front after each of its finished trials.

    ``trials`` is :func:`dse.results.trials_frame` of the campaign; only competing trials (state
    COMPLETE, status ok, feasible, not a reuse) grow a front, every other finished trial repeats
    the value before it. The reference point is :func:`dse.search.pareto.default_reference` over
    all devices' trials: each objective's worst competing value pushed out by 10% of its range.
    """
    objectives = list(objectives)
    if not objectives:
        return HypervolumeHistoryInfo([], [], "", "", "the study names no objective")
    try:
        reference = default_reference(trials, objectives)
    except ValueError:
        return HypervolumeHistoryInfo(
            [], [], "", "",
            f"no feasible, completed trial has measured all of {objectives} yet, so no front "
            f"has a volume")
    finished = trials[~trials["state"].isin(_UNFINISHED)]
    devices = finished["device"].astype("string").fillna("")
    lines = []
    for device, rows in finished.groupby(devices, sort=True):
        history = hypervolume_history(rows, objectives, reference)
        numbers = sorted(int(n) for n in rows["trial"])
        lines.append(HypervolumeLine(str(device), numbers, list(range(1, len(numbers) + 1)),
                                     history))
    unfinished = len(trials) - len(finished)
    note = reference_note(trials, objectives, reference)
    if unfinished:
        note += f" {unfinished} trial(s) still running or queued are not counted."
    return HypervolumeHistoryInfo(lines, reference, _y_title(objectives), note, None)


def hypervolume_history_figure(info: HypervolumeHistoryInfo) -> go.Figure:
    """One step line per device: hypervolume against trial number."""
    figure = go.Figure()
    for index, line in enumerate(info.lines):
        figure.add_trace(go.Scatter(
            x=line.trials, y=line.hypervolume, name=line.device or "(no device)",
            mode="lines+markers", line={"shape": "hv", "color": _PALETTE[index % len(_PALETTE)]},
            marker={"size": 5}, customdata=line.completed,
            hovertemplate=("trial %{x} (%{customdata} finished)<br>hypervolume %{y:.4g}"
                           "<extra>%{fullData.name}</extra>")))
    figure.update_layout(
        template="plotly_white", height=420, margin={"l": 70, "r": 20, "t": 30, "b": 60},
        legend={"title": {"text": "device"}},
        xaxis={"title": {"text": "trial number"}},
        yaxis={"title": {"text": info.y_title},
               "tickformat": tick_format(v for line in info.lines for v in line.hypervolume)})
    return figure


def reference_note(trials: pd.DataFrame, objectives: Sequence[str],
                   reference: Sequence[float]) -> str:
    """The reference point in words, each objective in its own direction: the worst feasible
    value seen and how far beyond it the volume is measured from ("throughput_sps: lowest seen
    500 samples/s, measured from 5,695 below it"), never the point's bare coordinates — a
    maximised metric's reference pushed below its lowest value can be negative (a throughput of
    -5,195 samples/s), which means nothing to a reader."""
    competing = trials[competing_mask(trials) & trials[TrialAttr.REUSED_FROM].isna()]
    parts = []
    for name, value in zip(objectives, reference, strict=True):
        higher = metric(name).direction is Direction.MAXIMIZE
        seen = competing[metric_column(name)].astype("float64")
        seen = seen[np.isfinite(seen)]
        worst = float(seen.min() if higher else seen.max())
        gap = abs(worst - value)
        parts.append(f"{name}: {'lowest' if higher else 'highest'} seen {label(worst)}"
                     f"{_unit(name)}, measured from {label(gap)} {'below' if higher else 'above'}"
                     f" it")
    return ("The hypervolume is measured from a point just beyond each objective's worst "
            "feasible value over all devices (by 10% of its range; one point for all devices, "
            "so their volumes compare): " + "; ".join(parts) + ".")


def _unit(name: str) -> str:
    spec = find_metric(name)
    return f" {spec.unit}" if spec is not None else ""


def _y_title(objectives: Sequence[str]) -> str:
    """``hypervolume [fraction × ms]``: the volume's unit is the product of the objectives'."""
    units = [spec.unit for spec in map(find_metric, objectives) if spec is not None]
    if len(units) != len(objectives):
        return "hypervolume"
    return f"hypervolume [{' × '.join(units)}]"
