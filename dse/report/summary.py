"""The text panels of a dashboard, as plain data: the campaign header and the comparison of
devices (the table of the front is :mod:`dse.report.front_table`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import pandas as pd

from dse.core import Direction, TrialAttr, find_metric, metric
from dse.report.front_table import DEPLOYMENT_FIELDS
from dse.report.table_info import TableInfo
from dse.report.values import label, plain, sort_key
from dse.results import (
    PARAM_PREFIX,
    competing_mask,
    front_frame,
    metric_column,
    outcomes,
    param_columns,
    portable_front,
    quality_summary,
)

# Usual outcomes first, in the order a reader expects them; anything else after, by name.
_STATUS_ORDER = ("ok", "infeasible", "failed", "running", "waiting")
# At most this many architectures in the side-by-side table: a page scales to 10,000 trials.
ARCHITECTURE_ROWS = 100


class SummaryInfo(NamedTuple):
    campaign: str
    trials: int
    counts: list[tuple[str, int]]
    """Trials by status (by lower-case state for a trial without one, e.g. running)."""
    objectives: list[str]
    """``maximize accuracy [fraction]``, in objective order."""
    constraints: list[str]
    first_started: str | None
    last_completed: str | None
    devices: tuple[str, ...] = ()
    """The device profiles with trials, by name (dashboards/index.html lists them)."""
    quality: str = ""
    """How cleanly the trials were measured (:func:`dse.results.quality_summary`)."""
    description: str = ""
    """What the campaign is for (:func:`dse.report.description.campaign_description`)."""
    repeats: int = 0
    """Trials that carry an earlier trial's result (``reused_from``: a repeat of a candidate
    measured before, or a failure of its architecture): counted among ``trials`` and their
    status, so the header says how many measured nothing."""
    duels: str = ""
    """What the duels of close calls decided (:func:`dse.results.duel_summary`); "" for none."""


class DeviceComparisonInfo(NamedTuple):
    """How the devices of a campaign compare: their fronts, and the architectures measured on
    several of them."""

    devices: TableInfo
    """Per device: trials, feasible ones, front size, and the best value of each objective."""
    architectures: TableInfo
    """Per architecture feasible on two devices or more: its best value of each objective on
    each device, side by side."""


def status_counts(trials: pd.DataFrame) -> list[tuple[str, int]]:
    """How many trials ended how, usual outcomes first."""
    kinds = outcomes(trials).value_counts()
    counts = {str(kind): int(count) for kind, count in kinds.items()}
    order = [k for k in _STATUS_ORDER if k in counts] + sorted(set(counts) - set(_STATUS_ORDER))
    return [(kind, counts[kind]) for kind in order]


def summary_info(trials: pd.DataFrame, campaign: str, objectives: Sequence[str],
                 constraints: Sequence[str]) -> SummaryInfo:
    """The header: what the campaign optimises under which bounds, and how its trials went. The
    only times shown are the study's own, so the same study always gives the same page."""
    specs = {name: find_metric(name) for name in objectives}
    described = [name if spec is None else f"{spec.direction.value} {spec.column}"
                 for name, spec in specs.items()]
    started, completed = trials["started"].dropna(), trials["completed"].dropna()
    return SummaryInfo(campaign, len(trials), status_counts(trials), described, list(constraints),
                       _stamp(started.min()) if len(started) else None,
                       _stamp(completed.max()) if len(completed) else None,
                       tuple(sorted(trials["device"].dropna().astype(str).unique())),
                       quality_summary(trials),
                       repeats=int(trials[TrialAttr.REUSED_FROM].notna().sum())
                       if TrialAttr.REUSED_FROM in trials else 0)


def _stamp(moment: pd.Timestamp) -> str:
    return moment.isoformat(sep=" ", timespec="seconds")


def portable_table_info(front: pd.DataFrame) -> TableInfo:
    """The architectures on more than one device's front (``dse.results.portable_front``)."""
    portable = portable_front(front)
    if portable.empty:
        return TableInfo([], [], "no architecture is on the front of more than one device (yet)")
    headings = [str(c).removeprefix(PARAM_PREFIX) for c in portable.columns]
    rows = [[label(value) for value in row] for row in portable.itertuples(index=False)]
    return TableInfo(headings, rows, None)


def device_comparison_info(trials: pd.DataFrame, objectives: Sequence[str],
                           front: pd.DataFrame | None = None) -> DeviceComparisonInfo:
    """The devices side by side: per device its trials, feasible trials, front size (each
    device's own front, ``dse.results.front_frame``) and best value of each objective; then each
    architecture that is feasible on two devices or more, with its best value of each objective
    on every device (best over its deployments there: precisions, runtimes, batch sizes).

    An architecture is its ``param.arch.*`` values, or, in a space of free parameters, every
    parameter but the deployment ones (as ``dse.results.portable_front`` has it). At most
    :data:`ARCHITECTURE_ROWS` architectures are listed, those on most devices first. ``front``
    is ``front_frame(trials, objectives)`` where the caller has it already.
    """
    columns = {name: metric_column(name) for name in objectives
               if metric_column(name) in trials.columns}
    front = front if front is not None else front_frame(trials, objectives)
    competing = trials[competing_mask(trials)]
    devices = sorted(trials["device"].dropna().astype(str).unique())
    headings = ["device", "trials", "feasible", "on front",
                *[f"best {column}" for column in columns.values()]]
    rows = []
    for device in devices:
        mine = front[front["device"] == device]
        rows.append([device, str(int((trials["device"] == device).sum())),
                     str(int((competing["device"] == device).sum())), str(len(mine)),
                     *[label(_best(mine[column], name)) for name, column in columns.items()]])
    table = TableInfo(headings, rows, None if rows else "no trial has a device yet")
    return DeviceComparisonInfo(table, _architecture_table(competing, columns, devices))


def _best(values: pd.Series, name: str) -> float | None:
    present = values.dropna().astype("float64")
    if present.empty:
        return None
    return float(present.max() if _higher(name) else present.min())


def _architecture_table(competing: pd.DataFrame, columns: Mapping[str, str],
                        devices: Sequence[str]) -> TableInfo:
    keys = _architecture_columns(competing)
    nothing = TableInfo([], [], "no architecture is feasible on more than one device (yet)")
    if not keys or len(devices) < 2 or not columns:
        return nothing
    # The best of each objective per architecture and device, in one pass over the trials.
    best = competing[competing["device"].notna()].groupby(
        [*keys, "device"], dropna=False, sort=False).agg(
        {column: "max" if _higher(name) else "min" for name, column in columns.items()})
    best = best.reset_index()
    found = []
    for values, rows in best.groupby(keys, dropna=False, sort=False):
        if len(rows) < 2:
            continue
        on = dict(zip(rows["device"].astype(str), rows[list(columns.values())].itertuples(
            index=False), strict=True))
        values = values if isinstance(values, tuple) else (values,)
        cells = [label(on[device][i]) if device in on else ""
                 for device in devices for i in range(len(columns))]
        found.append((len(on), [plain(v) for v in values],
                      [*map(label, values), str(len(on)), *cells]))
    if not found:
        return nothing
    found.sort(key=lambda item: (-item[0], [sort_key(v) for v in item[1]]))
    headings = [*(key.removeprefix(PARAM_PREFIX) for key in keys), "devices",
                *(f"{device}: {column}" for device in devices for column in columns.values())]
    left = len(found) - ARCHITECTURE_ROWS
    note = (f"{left} more architecture(s) feasible on several devices are not listed."
            if left > 0 else "")
    return TableInfo(headings, [row for _, _, row in found[:ARCHITECTURE_ROWS]], None, note=note)


def _higher(name: str) -> bool:
    return metric(name).direction is Direction.MAXIMIZE


def _architecture_columns(frame: pd.DataFrame) -> list[str]:
    """The columns that name an architecture (as ``dse.results.portable_front`` reads them)."""
    arch = [c for c in param_columns(frame) if c.startswith(PARAM_PREFIX + "arch.")]
    deployment = {PARAM_PREFIX + key for key in ("family", *DEPLOYMENT_FIELDS)}
    return arch or [c for c in param_columns(frame) if c not in deployment
                    and not c.startswith(PARAM_PREFIX + "knob.")]
