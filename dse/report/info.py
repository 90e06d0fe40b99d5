"""What each dashboard plot shows, as plain data: no plotly here.

Following Optuna's split (``_get_pareto_front_info`` / ``_get_pareto_front_plot``), each function
turns a trials table (``dse.results.trials_frame``) into a NamedTuple that a thin renderer draws
and a test can check. A panel with nothing to draw says why in ``empty_reason``.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np
import optuna
import pandas as pd

from dse.core import Direction, TrialAttr, find_metric
from dse.report.values import (
    VALUE_LIMIT,
    TrialKey,
    TrialProvenance,
    clip,
    constraint_metrics,
    device_provenance,
    hover_table,
    label,
    trial_keys,
)
from dse.results import (
    competing_mask,
    front_frame,
    metric_column,
    outcomes,
)

FRONT_NAME = "Pareto front"
"""The legend name of the trace of front points (a browser test looks it up by this name)."""

PointKind = Literal["feasible", "infeasible", "failed", "unclean", "front"]


class AxisInfo(NamedTuple):
    metric: str
    title: str
    log: bool = False


def wants_log(values: pd.Series) -> bool:
    """A log axis when all values are positive and span at least a decade (latencies of batch 1
    and batch 32 models would otherwise crowd into one corner)."""
    finite = values.dropna().astype("float64")
    return bool(len(finite) > 1 and (finite > 0).all() and finite.max() >= 10 * finite.min())


class PointGroup(NamedTuple):
    """Points drawn alike: one backend/precision pair's feasible trials, the infeasible ones, the
    failed ones, or the front. A group spans devices; each point carries its own."""

    name: str
    kind: PointKind
    devices: list[str]
    trials: list[int]
    values: list[list[float]]
    """One list per axis of the scatter (``ParetoScatterInfo.axes``), one value per point."""
    on_front: list[bool]
    hover: list[list[str]]
    """Per point, its text for each of ``ParetoScatterInfo.hover_fields`` ('' where none)."""


class ParetoScatterInfo(NamedTuple):
    """Each device's Pareto front among all its plotted trials, seen along any pair of axes (2-D)
    or, with three axes or more, any three of them (3-D)."""

    axes: list[AxisInfo]
    """The objectives (or the metrics asked for), in order; pairs and triples index them."""
    pairs: list[tuple[int, int]]
    """(x, y) of every pair of axes, the default view first: the second axis across, the first
    up."""
    joined: list[bool]
    """Per pair: True when its axes are exactly the two objectives, so joining the front is
    meaningful."""
    triples: list[tuple[int, int, int]]
    """(x, y, z) of every three axes, the first axis up; empty with fewer than three."""
    devices: list[str]
    """Devices with plotted points, sorted; the first is the default view."""
    groups: list[PointGroup]
    """Measured feasible trials, one group per ``backend/precision``, sorted by name."""
    infeasible: PointGroup
    """Measured trials that violate a constraint or that their device cannot run: shown, never on
    the front."""
    failed: PointGroup
    """Trials that failed yet report every axis value: shown, never on the front."""
    front: PointGroup
    """Each device's Pareto front over all objectives, by device, then sorted along the x axis of
    the first joined pair (else of the default pair)."""
    hover_fields: list[str]
    """Labels (HTML-escaped) of the per-point hover texts: trial, outcome, every parameter, the
    objective and constraint metrics, and the provenance that varies within a device."""
    device_notes: dict[str, list[str]]
    """Per device, the provenance lines (HTML-escaped) true of all its plotted trials."""
    note: str
    """What is not drawn: trials without values, trials still running."""
    empty_reason: str | None
    unclean: PointGroup = PointGroup("not measured cleanly", "unclean", [], [], [], [], [])
    """Feasible trials whose measurement was disturbed, underpowered or unstable, kept off the
    front (``measurement.non_ok_on_front`` false): shown apart, never on the front."""
    projection_note: str = ""
    """With more than two objectives: the front is over all of them, so in a 2-D view a front
    point may look dominated (by a point worse on an objective not drawn). '' with two."""


def axis_title(name: str) -> str:
    """``latency_p99_ms [ms] (lower is better)``; an unknown metric keeps its bare name."""
    spec = find_metric(name)
    if spec is None:
        return name
    better = "higher" if spec.direction is Direction.MAXIMIZE else "lower"
    return f"{spec.column} ({better} is better)"


def pareto_scatter_info(trials: pd.DataFrame, objectives: Sequence[str],
                        axes: Sequence[str] | None = None,
                        provenance: TrialProvenance | None = None,
                        front: pd.DataFrame | None = None) -> ParetoScatterInfo:
    """Data of the Pareto scatter: every pair of ``axes`` (default: the objectives) in 2-D, every
    three in 3-D, each device's points apart.

    The front is computed over all ``objectives``, each device on its own
    (``dse.results.front_frame``); its points are flagged in their groups and repeated in
    ``front``. A trial is plotted when it has a finite value on every axis. ``provenance``
    (:func:`trial_provenance`) adds where and with what each trial was measured to the hover.
    ``front`` is ``front_frame(trials, objectives)`` where the caller has it already (it is the
    costly part for a large study).
    """
    names = list(axes) if axes is not None else list(objectives)
    axis_infos = [AxisInfo(name, axis_title(name)) for name in names]
    pairs = [(j, i) for i, j in itertools.combinations(range(len(names)), 2)]
    joined = [len(objectives) == 2 and {names[x], names[y]} == set(objectives)
              for x, y in pairs]
    triples = [(j, k, i) for i, j, k in itertools.combinations(range(len(names)), 3)]
    columns = [metric_column(name) for name in names]
    if len(names) < 2:
        return _empty_scatter(axis_infos, f"a scatter needs two metrics; the objectives are "
                                          f"{list(objectives)}")
    absent = [name for name, column in zip(names, columns, strict=True)
              if column not in trials.columns]
    if absent:
        return _empty_scatter(axis_infos, f"no trial has measured {' or '.join(absent)}")

    # A trial is (device, number): a multi-device campaign numbers each device's study from 0.
    front_trials = set(trial_keys(front if front is not None else
                                  front_frame(trials, objectives)))
    # A value no axis can hold (a proxy's -inf, its defined worst) is not drawn; the note and the
    # tables say so.
    present = trials[columns].notna().all(axis=1)
    drawable = present & pd.Series(np.isfinite(trials[columns].to_numpy(dtype="float64")).all(axis=1),
                                   index=trials.index)
    measured = trials[drawable]
    axis_infos = [axis._replace(log=wants_log(measured[column]))
                  for axis, column in zip(axis_infos, columns, strict=True)]
    shared = device_provenance(measured, provenance)
    hover = hover_table(measured, [*names, *constraint_metrics(trials)], provenance, shared)

    competing = competing_mask(measured)
    failed = ~competing & ~outcomes(measured).isin(["ok", "infeasible"])
    unclean = (~competing & ~failed & measured["feasible"]
               & measured.get("quality_blocks_front", pd.Series(False, index=measured.index))
               .fillna(False).astype(bool))
    parts = _Parts(measured, columns, front_trials, hover.rows)
    groups = [parts.group(name, "feasible", rows.index)
              for name, rows in _by_stack(measured[competing])]
    # The front of each device, ordered along the axis its line is drawn on.
    along = pairs[joined.index(True)] if any(joined) else pairs[0]
    on_front = measured[_among(measured, front_trials)]
    on_front = on_front.assign(_device=on_front["device"].astype("string").fillna("")).sort_values(
        ["_device", columns[along[0]], columns[along[1]], "trial"], kind="mergesort")

    devices = sorted({device for device, _ in trial_keys(measured)})
    notes = {device: [html.escape(clip(f"{key}: {value}", VALUE_LIMIT), quote=False)
                      for key, value in shared.get(device, {}).items()] for device in devices}
    empty_reason = None if len(measured) else f"no trial has measured {_all_of(names)} yet"
    return ParetoScatterInfo(
        axis_infos, pairs, joined, triples, devices, groups,
        # Not drawn: a clean trial a second look took the place of, or a look slower than its
        # first (dse.search.second_looks); both stay in the tables.
        parts.group("infeasible", "infeasible",
                    measured.index[~competing & ~failed & ~unclean & ~measured["feasible"]]),
        parts.group("failed", "failed", measured.index[failed]),
        parts.group(FRONT_NAME, "front", on_front.index), hover.fields, notes,
        " ".join(filter(None, [_note(trials[~present], names),
                               infinite_note(trials[present & ~drawable], names)])),
        empty_reason,
        parts.group("not measured cleanly", "unclean", measured.index[unclean]),
        projection_note(objectives))


def projection_note(objectives: Sequence[str]) -> str:
    """Why a ringed point can look dominated in two dimensions: '' for two objectives."""
    if len(objectives) <= 2:
        return ""
    return (f"The front is over all {len(objectives)} objectives ({', '.join(objectives)}): in "
            f"a 2-D view a ringed point may look dominated by one that is worse on an objective "
            f"not drawn.")


def trial_provenance(study: optuna.Study | Sequence[optuna.Study]) -> dict[TrialKey, dict[str, str]]:
    """What each measured trial recorded of where and with what it ran (its ``provenance`` user
    attribute, and the ``device_id`` of the physical device), keyed as the trials table
    identifies a trial: (device, number). A trial that reuses another's measurement
    (``reused_from``) carries that trial's provenance."""
    studies = [study] if isinstance(study, optuna.Study) else list(study)
    found: dict[TrialKey, dict[str, str]] = {}
    reuses: dict[TrialKey, TrialKey] = {}
    for one in studies:
        for trial in one.get_trials(deepcopy=False):
            attrs = trial.user_attrs
            device = str((attrs.get(TrialAttr.CANDIDATE) or {}).get("device_profile") or "")
            record = {str(k): str(v) for k, v in (attrs.get(TrialAttr.PROVENANCE) or {}).items()}
            if attrs.get(TrialAttr.DEVICE_ID):
                record.setdefault("device_id", str(attrs[TrialAttr.DEVICE_ID]))
            if record:
                found[(device, trial.number)] = record
            elif attrs.get(TrialAttr.REUSED_FROM) is not None:
                reuses[(device, trial.number)] = (device, int(attrs[TrialAttr.REUSED_FROM]))
    for key, source in reuses.items():
        if source in found:
            found[key] = found[source]
    return found


class _Parts:
    """Cuts point groups out of the plotted rows, all sharing one hover table."""

    def __init__(self, measured: pd.DataFrame, columns: list[str],
                 front_trials: set[TrialKey], hover_rows: list[list[str]]) -> None:
        self.measured = measured
        self.columns = columns
        self.front_trials = front_trials
        self.hover = dict(zip(measured.index, hover_rows, strict=True))

    def group(self, name: str, kind: PointKind, index: pd.Index) -> PointGroup:
        rows = self.measured.loc[index]
        keys = trial_keys(rows)
        return PointGroup(
            name, kind, [device for device, _ in keys], [number for _, number in keys],
            [rows[column].astype("float64").tolist() for column in self.columns],
            [key in self.front_trials for key in keys], [self.hover[i] for i in index])


def _empty_scatter(axes: list[AxisInfo], reason: str) -> ParetoScatterInfo:
    none = _no_points()
    return ParetoScatterInfo(axes, [], [], [], [], [], none, none, none, [], {}, "", reason)


def _no_points(name: str = "", kind: PointKind = "feasible") -> PointGroup:
    return PointGroup(name, kind, [], [], [], [], [])


def hover_texts(rows: pd.DataFrame, metrics: Sequence[str] | None = None,
                provenance: TrialProvenance | None = None) -> list[str]:
    """Each trial's details as one HTML text, a line (``<br>``) each: where it ran, how it ended,
    the whole configuration, the ``metrics`` (default: every metric column) with their units, and
    its provenance (:func:`dse.report.values.hover_table`). Every value is escaped."""
    table = hover_table(rows, metrics, provenance)
    texts = []
    for device, row in zip(rows["device"].tolist(), table.rows, strict=True):
        lines = [f"trial {row[0]} on {html.escape(label(device), quote=False)}"]
        lines += [f"{field}: {text}"
                  for field, text in zip(table.fields[1:], row[1:], strict=True) if text]
        texts.append("<br>".join(lines))
    return texts


def _all_of(names: Sequence[str]) -> str:
    return " and ".join(names) if len(names) == 2 else f"all of {', '.join(names)}"


def _by_stack(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Rows grouped by ``backend/precision``, groups sorted by that name."""
    def part(column: str) -> list[str]:
        return [label(v) for v in rows[column]] if column in rows.columns else [""] * len(rows)

    names = pd.Series([f"{b}/{p}" for b, p in zip(part("param.backend"), part("param.precision"),
                                                    strict=True)], index=rows.index, dtype="str")
    return [(name, rows[names == name]) for name in sorted(set(names))]


def _among(rows: pd.DataFrame, keys: set[TrialKey]) -> pd.Series:
    """A boolean mask of ``rows`` whose (device, trial) is in ``keys``."""
    return pd.Series([key in keys for key in trial_keys(rows)], index=rows.index, dtype="bool")


def _note(unplotted: pd.DataFrame, names: Sequence[str]) -> str:
    """Say what the scatter leaves out, so a campaign full of failures does not look empty."""
    running = unplotted["state"].isin(["RUNNING", "WAITING"])
    done = unplotted[~running]
    parts = []
    lack = " or ".join(names) if len(names) == 2 else f"one of {', '.join(names)}"
    if len(done):
        kinds = outcomes(done).value_counts()
        detail = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
        parts.append(f"{len(done)} finished trial(s) lack {lack} and are not shown ({detail})")
    if running.any():
        parts.append(f"{int(running.sum())} trial(s) still running or queued")
    return "; ".join(parts) + ("." if parts else "")


def infinite_note(rows: pd.DataFrame, names: Sequence[str]) -> str:
    """Say which trials have an infinite value on an axis (not drawn), per metric."""
    if rows.empty:
        return ""
    found = []
    for name in names:
        values = rows[metric_column(name)].astype("float64")
        for value in (-np.inf, np.inf):
            count = int((values == value).sum())
            if count:
                found.append(f"{count} at {name} = {label(float(value))}")
    return (f"{len(rows)} trial(s) with an infinite value are not drawn ({', '.join(found)}: "
            f"the metric's worst value, which no axis holds); the tables list them.")
