"""The text panels of a dashboard, as plain data: the campaign header and the table of the front."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pandas as pd

from dse.metrics import find_metric
from dse.report.values import label
from dse.results import (
    PARAM_PREFIX,
    metric_column,
    metric_columns,
    outcomes,
    param_columns,
    portable_front,
)

# Usual outcomes first, in the order a reader expects them; anything else after, by name.
_STATUS_ORDER = ("ok", "infeasible", "failed", "running", "waiting")


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


class TableInfo(NamedTuple):
    columns: list[str]
    rows: list[list[str]]
    empty_reason: str | None


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
                       _stamp(completed.max()) if len(completed) else None)


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


def front_table_info(front: pd.DataFrame, objectives: Sequence[str]) -> TableInfo:
    """One row per front configuration: trial, device, every parameter, then the objectives and
    the other metrics, with units in the headings. Columns empty on the whole front are left out."""
    if front.empty:
        return TableInfo([], [], "no feasible trial has been measured yet")
    first = [metric_column(name) for name in objectives if metric_column(name) in front.columns]
    metrics = first + [column for column in metric_columns(front) if column not in first]
    columns = [column for column in ["trial", "device", *param_columns(front), *metrics]
               if front[column].notna().any()]
    headings = [column.removeprefix(PARAM_PREFIX) for column in columns]
    rows = [[label(value) for value in row] for row in front[columns].itertuples(index=False)]
    return TableInfo(headings, rows, None)
