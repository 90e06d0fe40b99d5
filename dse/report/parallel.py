"""The parallel-coordinates panel: one line per measured feasible trial across the parameters that
vary and the objectives.

:func:`parallel_coordinates_info` is the data (no plotly): which axes, each value on its axis, and
what each axis is (categories with their labels, a plain or logarithmic number axis with its tick
format). :func:`parallel_figure` draws it, fitting each axis title in the space between axes
(:func:`dse.report.axis_text.wrap_title`).

A parameter is categorical when it takes few distinct values (a search space's choices: kernel 3
or 5, batch 1/8/32, a backend's name), and is then drawn with exactly its values as ticks, evenly
spaced; only a parameter with many distinct numbers (a range sampled often) is a number axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dse.core import Direction, find_metric
from dse.report.axis_text import format_number, tick_format, wrap_title
from dse.report.info import axis_title, infinite_note, wants_log
from dse.report.values import label, sort_key
from dse.results import PARAM_PREFIX, competing_mask, is_missing, metric_column, param_columns

NOT_APPLICABLE = "n/a"
"""The category of a trial that lacks the parameter (a knob of another backend)."""
MAX_CATEGORIES = 12
"""A parameter with at most this many distinct values is drawn as categories."""
# The page's plot area at a 1366-pixel-wide window (page margins, the figure's margins and its
# colour bar taken off), and the width of one character of the axis titles' 11-pixel font: the
# room each title has is the distance between two axes.
PLOT_WIDTH_PX = 1000
CHAR_PX = 6.6
TITLE_FONT_PX = 11
_MIN_LINE_CHARS = 6


class Dimension(NamedTuple):
    """One axis of the parallel-coordinates plot."""

    label: str
    """The whole name: ``knob.intra_op_threads``, ``accuracy [fraction] (higher is better)``."""
    values: list[float]
    """One per line: the number, its log10 on a log axis, or the category's index."""
    tickvals: list[float] | None
    """Where the ticks go, with :attr:`ticktext`: every category, or a log axis's 1-2-5 steps;
    None for a plain number axis (plotly places the ticks, in :attr:`tickformat`)."""
    ticktext: list[str] | None
    parts: tuple[str, ...] = ()
    """The title as drawn, in parts that each start a line (name, unit, which way is better)."""
    tickformat: str = ""
    """A d3 format for a plain number axis (:func:`dse.report.number_format.tick_format`)."""


class ParallelCoordinatesInfo(NamedTuple):
    dimensions: list[Dimension]
    trials: list[int]
    color: list[float]
    """The first objective, one value per line."""
    color_title: str
    color_higher_is_better: bool
    empty_reason: str | None
    note: str = ""
    """What is not drawn: trials at an infinite objective value."""
    color_format: str = ""
    """The d3 format of the colour bar's ticks."""


def parallel_coordinates_info(trials: pd.DataFrame,
                              objectives: Sequence[str]) -> ParallelCoordinatesInfo:
    """Data of the parallel-coordinates plot: one line per measured feasible trial, one axis per
    parameter that varies among them (categorical ones as ticks), then one per objective."""
    columns = [metric_column(name) for name in objectives]
    title = metric_column(objectives[0]) if objectives else ""
    spec = find_metric(objectives[0]) if objectives else None
    higher = spec is not None and spec.direction is Direction.MAXIMIZE
    if not objectives or any(column not in trials.columns for column in columns):
        return ParallelCoordinatesInfo([], [], [], title, higher,
                                       f"no trial has measured the objectives {list(objectives)}")
    rows = trials[competing_mask(trials)].dropna(subset=columns)
    finite = np.isfinite(rows[columns].to_numpy(dtype="float64")).all(axis=1)
    note = infinite_note(rows[~finite], objectives)
    rows = rows[finite]
    if rows.empty:
        return ParallelCoordinatesInfo([], [], [], title, higher,
                                       note or "no measured feasible trial yet")
    # A parameter with one value across all lines separates nothing; the table still shows it.
    dimensions = [parameter_dimension(column.removeprefix(PARAM_PREFIX), rows[column])
                  for column in param_columns(rows)
                  if rows[column].nunique(dropna=False) > 1]
    dimensions += [objective_dimension(name, rows[column].astype("float64"))
                   for name, column in zip(objectives, columns, strict=True)]
    color = rows[columns[0]].astype("float64").tolist()
    return ParallelCoordinatesInfo(dimensions, rows["trial"].tolist(), color, title, higher, None,
                                   note, tick_format(color))


def parameter_dimension(name: str, values: pd.Series) -> Dimension:
    """Categories in a stable order (numbers by value, then text), with :data:`NOT_APPLICABLE`
    last for a trial without the parameter, when there are at most :data:`MAX_CATEGORIES`
    distinct values or any is not a number; a number axis otherwise."""
    numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
    if numeric and not values.isna().any() and values.nunique() > MAX_CATEGORIES:
        numbers = values.astype("float64").tolist()
        return Dimension(name, numbers, None, None, (name,), tick_format(numbers))
    present = sorted({v for v in values.tolist() if not is_missing(v)}, key=sort_key)
    ticktext = [label(v) for v in present]
    if values.isna().any():
        ticktext.append(NOT_APPLICABLE)
    code = {text: float(i) for i, text in enumerate(ticktext)}
    encoded = [code[NOT_APPLICABLE if is_missing(v) else label(v)] for v in values.tolist()]
    return Dimension(name, encoded, [float(i) for i in range(len(ticktext))], ticktext, (name,))


def objective_dimension(name: str, values: pd.Series) -> Dimension:
    """An objective's axis: its values, on a log scale (log10 values, ticks labelled with the
    real ones) when they span a decade or more; titled name, unit, and which way is better."""
    spec = find_metric(name)
    unit = f"[{spec.unit}]" if spec is not None and spec.unit else ""
    better = ("" if spec is None else
              "better ↑" if spec.direction is Direction.MAXIMIZE else "better ↓")
    numbers = values.tolist()
    if wants_log(values):
        parts = (name, f"{unit[:-1]}, log]" if unit else "[log]", better)
        tickvals, ticktext = log_ticks(min(numbers), max(numbers))
        return Dimension(axis_title(name), [math.log10(v) for v in numbers], tickvals, ticktext,
                         tuple(p for p in parts if p))
    return Dimension(axis_title(name), numbers, None, None,
                     tuple(p for p in (name, unit, better) if p), tick_format(numbers))


def log_ticks(low: float, high: float) -> tuple[list[float], list[str]]:
    """Ticks of a log axis from ``low`` to ``high`` (both > 0): 1, 2 and 5 times each power of
    ten inside the range, and the two ends; positions as log10, labels as the values."""
    ends = [low, high]
    steps = [m * 10.0 ** e for e in range(math.floor(math.log10(low)),
                                          math.ceil(math.log10(high)) + 1)
             for m in (1, 2, 5) if low < m * 10.0 ** e < high]
    # Ticks too close to an end (under a tenth of the span, in log) would print over it.
    span = math.log10(high) - math.log10(low)
    inner = [v for v in steps if min(abs(math.log10(v / end)) for end in ends) > span / 10]
    values = sorted([low, *inner, high])
    return ([math.log10(v) for v in values],
            [format_number(v, max(0, 2 - math.floor(math.log10(v)))) for v in values])


def title_width(axes: int) -> int:
    """Characters per line of an axis title: the room between two of ``axes`` axes, at the
    page's plot width."""
    room = PLOT_WIDTH_PX / max(axes - 1, 1)
    return max(_MIN_LINE_CHARS, int(room * 0.9 / CHAR_PX))


def parallel_figure(info: ParallelCoordinatesInfo) -> go.Figure:
    """One line per feasible trial across parameters and objectives, coloured by the first
    objective so that the better end is always the bright one; each axis title wrapped to the
    room between axes, each number axis in its own format."""
    width = title_width(len(info.dimensions))
    dimensions = []
    most_lines = 1
    for dimension in info.dimensions:
        lines = wrap_title(dimension.parts or (dimension.label,), width)
        most_lines = max(most_lines, len(lines))
        axis: dict[str, object] = {"label": "<br>".join(_text(line) for line in lines),
                                   "values": dimension.values}
        if dimension.ticktext is not None:
            axis.update(tickvals=dimension.tickvals, ticktext=dimension.ticktext)
        elif dimension.tickformat:
            axis["tickformat"] = dimension.tickformat
        dimensions.append(axis)
    line = {"color": info.color, "colorscale": "Viridis",
            "reversescale": not info.color_higher_is_better, "showscale": True,
            "colorbar": {"title": {"text": "<br>".join(_text(p) for p in wrap_title(
                [info.color_title], 12)), "side": "top"},
                "tickformat": info.color_format, "thickness": 14}}
    # Titles below the axes: a title of several lines grows away from the axis there, where on
    # top its lines would run into the axis's top range label.
    figure = go.Figure(go.Parcoords(line=line, dimensions=dimensions, labelside="bottom",
                                    labelfont={"size": TITLE_FONT_PX},
                                    tickfont={"size": 10}, rangefont={"size": 9}))
    bottom = 40 + (TITLE_FONT_PX + 3) * most_lines
    figure.update_layout(template="plotly_white", height=420 + bottom,
                         margin={"l": 70, "r": 40, "t": 40, "b": bottom})
    return figure


def _text(text: str) -> str:
    """Plain text as plotly's labels take it (they read markup)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
