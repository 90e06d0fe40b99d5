"""What each dashboard plot shows, as plain data: no plotly here.

Following Optuna's split (``_get_pareto_front_info`` / ``_get_pareto_front_plot``), each function
turns a trials table (``dse.results.trials_frame``) into a NamedTuple that a thin renderer draws
and a test can check. A panel with nothing to draw says why in ``empty_reason``.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import NamedTuple

import pandas as pd

from dse.metrics import Direction, find_metric
from dse.report.values import label, sort_key
from dse.results import (
    PARAM_PREFIX,
    competing_mask,
    front_frame,
    metric_column,
    metric_columns,
    metric_name,
    outcomes,
    param_columns,
)
from dse.results.dtypes import is_missing

NOT_APPLICABLE = "n/a"


class AxisInfo(NamedTuple):
    metric: str
    title: str
    log: bool = False


def _wants_log(values: pd.Series) -> bool:
    """A log axis when all values are positive and span at least a decade (latencies of batch 1
    and batch 32 models would otherwise crowd into one corner)."""
    finite = values.dropna().astype("float64")
    return bool(len(finite) > 1 and (finite > 0).all() and finite.max() >= 10 * finite.min())


class PointGroup(NamedTuple):
    """Points drawn alike: one backend/precision pair, the infeasible ones, or the front."""

    name: str
    trials: list[int]
    x: list[float]
    y: list[float]
    on_front: list[bool]
    hover: list[str]


class ParetoScatterInfo(NamedTuple):
    x_axis: AxisInfo | None
    y_axis: AxisInfo | None
    groups: list[PointGroup]
    """Measured feasible trials, one group per ``backend/precision``, sorted by name."""
    infeasible: PointGroup
    """Trials with both values that are infeasible or failed: shown, never on the front."""
    front: PointGroup
    """The Pareto front over all objectives, sorted by x."""
    front_is_line: bool
    """True when the plot's axes are exactly the objectives, so joining the front is meaningful."""
    note: str
    """What is not drawn: trials without values, trials still running."""
    empty_reason: str | None


class Dimension(NamedTuple):
    """One axis of the parallel-coordinates plot; categorical axes carry tick labels."""

    label: str
    values: list[float]
    tickvals: list[float] | None
    ticktext: list[str] | None


class ParallelCoordinatesInfo(NamedTuple):
    dimensions: list[Dimension]
    trials: list[int]
    color: list[float]
    """The first objective, one value per line."""
    color_title: str
    color_higher_is_better: bool
    empty_reason: str | None


def axis_title(name: str) -> str:
    """``latency_p99_ms [ms] (lower is better)``; an unknown metric keeps its bare name."""
    spec = find_metric(name)
    if spec is None:
        return name
    better = "higher" if spec.direction is Direction.MAXIMIZE else "lower"
    return f"{spec.column} ({better} is better)"


def pareto_scatter_info(trials: pd.DataFrame, objectives: Sequence[str], x: str | None = None,
                        y: str | None = None) -> ParetoScatterInfo:
    """Data of the 2-D Pareto scatter: by default the second objective across, the first up.

    The front is computed over all ``objectives`` (``dse.results.front_frame``); its points are
    flagged in their groups and repeated, sorted by x, in ``front``.
    """
    y = y if y is not None else (objectives[0] if objectives else None)
    x = x if x is not None else (objectives[1] if len(objectives) > 1 else None)
    if x is None or y is None:
        reason = f"a scatter needs two metrics; the objectives are {list(objectives)}"
        return ParetoScatterInfo(None, None, [], _no_points(), _no_points(), False, "", reason)
    x_axis, y_axis = AxisInfo(x, axis_title(x)), AxisInfo(y, axis_title(y))
    x_col, y_col = metric_column(x), metric_column(y)
    if x_col not in trials.columns or y_col not in trials.columns:
        return ParetoScatterInfo(x_axis, y_axis, [], _no_points(), _no_points(), False, "",
                                 f"no trial has measured both {x} and {y}")

    # A trial is (device, number): a multi-device campaign numbers each device's study from 0.
    front_trials = set(_keys(front_frame(trials, objectives)))
    measured = trials[trials[x_col].notna() & trials[y_col].notna()]
    x_axis = x_axis._replace(log=_wants_log(measured[x_col]))
    y_axis = y_axis._replace(log=_wants_log(measured[y_col]))
    competing = competing_mask(measured)
    groups = [_group(name, rows, x_col, y_col, front_trials)
              for name, rows in _by_stack(measured[competing])]
    infeasible = _group("infeasible or failed", measured[~competing], x_col, y_col, set())
    on_front = measured[_among(measured, front_trials)]
    front = _group("Pareto front", on_front.sort_values([x_col, y_col, "trial"], kind="mergesort"),
                   x_col, y_col, front_trials)
    plotted = set(_keys(measured))
    note = _note(trials[~_among(trials, plotted)], x, y)
    empty_reason = None if len(measured) else f"no trial has measured both {x} and {y} yet"
    return ParetoScatterInfo(x_axis, y_axis, groups, infeasible, front,
                             set(objectives) == {x, y} and len(objectives) == 2, note,
                             empty_reason)


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
    if rows.empty:
        return ParallelCoordinatesInfo([], [], [], title, higher,
                                       "no measured feasible trial yet")
    # A parameter with one value across all lines separates nothing; the table still shows it.
    dimensions = [_dimension(column.removeprefix(PARAM_PREFIX), rows[column])
                  for column in param_columns(rows)
                  if rows[column].nunique(dropna=False) > 1]
    dimensions += [Dimension(axis_title(name), rows[col].astype("float64").tolist(), None, None)
                   for name, col in zip(objectives, columns, strict=True)]
    return ParallelCoordinatesInfo(dimensions, rows["trial"].tolist(),
                                   rows[columns[0]].astype("float64").tolist(), title, higher,
                                   None)


def hover_texts(rows: pd.DataFrame) -> list[str]:
    """Every detail of each trial, one per line: where it ran, the whole configuration, every
    metric with its unit, and why it is not ok when it is not."""
    params, metrics = param_columns(rows), metric_columns(rows)
    texts = []
    for _, row in rows.iterrows():
        lines = [f"trial {row['trial']} on {label(row['device'])}"]
        if not is_missing(row["status"]) and row["status"] != "ok":
            reason = "" if is_missing(row["reason"]) else f": {row['reason']}"
            lines.append(f"{row['status']}{reason}")
        elif row["state"] == "COMPLETE" and not row["feasible"]:
            lines.append("violates a constraint")
        if not is_missing(row["reused_from"]):
            lines.append(f"measurement reused from trial {row['reused_from']}")
        lines += [f"{column.removeprefix(PARAM_PREFIX)}: {label(row[column])}"
                  for column in params if not is_missing(row[column])]
        lines += [f"{metric_name(column)}: {label(row[column])}{_unit(metric_name(column))}"
                  for column in metrics if not is_missing(row[column])]
        texts.append("<br>".join(html.escape(line, quote=False) for line in lines))
    return texts


def _unit(name: str) -> str:
    spec = find_metric(name)
    return f" {spec.unit}" if spec is not None else ""


def _by_stack(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Rows grouped by ``backend/precision``, groups sorted by that name."""
    def part(column: str) -> list[str]:
        return [label(v) for v in rows[column]] if column in rows.columns else [""] * len(rows)

    names = pd.Series([f"{b}/{p}" for b, p in zip(part("param.backend"), part("param.precision"),
                                                    strict=True)], index=rows.index, dtype="str")
    return [(name, rows[names == name]) for name in sorted(set(names))]


def _no_points() -> PointGroup:
    return PointGroup("", [], [], [], [], [])


def _keys(rows: pd.DataFrame) -> list[tuple[str, int]]:
    return list(zip(rows["device"].astype("string").fillna("").tolist(),
                    [int(n) for n in rows["trial"]], strict=True))


def _among(rows: pd.DataFrame, keys: set[tuple[str, int]]) -> pd.Series:
    """A boolean mask of ``rows`` whose (device, trial) is in ``keys``."""
    return pd.Series([key in keys for key in _keys(rows)], index=rows.index, dtype="bool")


def _group(name: str, rows: pd.DataFrame, x_col: str, y_col: str,
           front_trials: set[tuple[str, int]]) -> PointGroup:
    numbers = [int(n) for n in rows["trial"]]
    return PointGroup(
        name, numbers, rows[x_col].astype("float64").tolist(),
        rows[y_col].astype("float64").tolist(), [key in front_trials for key in _keys(rows)],
        hover_texts(rows))


def _note(unplotted: pd.DataFrame, x: str, y: str) -> str:
    """Say what the scatter leaves out, so a campaign full of failures does not look empty."""
    running = unplotted["state"].isin(["RUNNING", "WAITING"])
    done = unplotted[~running]
    parts = []
    if len(done):
        kinds = outcomes(done).value_counts()
        detail = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
        parts.append(f"{len(done)} finished trial(s) lack {x} or {y} and are not shown ({detail})")
    if running.any():
        parts.append(f"{int(running.sum())} trial(s) still running or queued")
    return "; ".join(parts) + ("." if parts else "")


def _dimension(name: str, values: pd.Series) -> Dimension:
    """A numeric axis when every value is a number; else categories in a stable order, with
    ``n/a`` for a parameter the trial does not have (a knob of another backend)."""
    numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
    if numeric and not values.isna().any():
        return Dimension(name, values.astype("float64").tolist(), None, None)
    present = sorted({v for v in values.tolist() if not is_missing(v)}, key=sort_key)
    ticktext = [label(v) for v in present]
    if values.isna().any():
        ticktext.append(NOT_APPLICABLE)
    code = {text: float(i) for i, text in enumerate(ticktext)}
    encoded = [code[NOT_APPLICABLE if is_missing(v) else label(v)] for v in values.tolist()]
    return Dimension(name, encoded, [float(i) for i in range(len(ticktext))], ticktext)
