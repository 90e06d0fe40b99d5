"""The failures panel: every trial that did not give a feasible result, grouped by how it ended
and why, so that "50 infeasible" in the header comes with its reasons.

:func:`failures_info` is the data (no HTML): one group per (status, reason) — a trial's status
``failed`` or ``infeasible`` (or any other not ``ok``) with its recorded reason in full, or a
measured trial that breaks a constraint, with the constraints it breaks — with the count, the
trial numbers and the devices. Trials that carry an earlier trial's result (``reused_from``: a
repeated candidate, or a deterministic failure recorded once per architecture) are grouped by
the same text and counted apart. :func:`failures_table` lays it out for
:func:`dse.report.page.table_html`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pandas as pd

from dse.core import TrialAttr
from dse.report.table_info import TableInfo
from dse.report.values import trial_keys
from dse.results import CONSTRAINT_PREFIX, constraint_columns, is_missing, outcomes

VIOLATES = "violates a constraint"
"""The status shown for a measured trial (status ok) that breaks a constraint."""
NO_REASON = "(no reason recorded)"
MAX_GROUPS = 50
"""At most this many groups are listed, the largest first; the note counts the rest."""
# A reason is shown in full; this bounds only a pathological one (a whole log in one message).
REASON_CHARS = 4000
_UNFINISHED = ("running", "waiting")


class FailureGroup(NamedTuple):
    status: str
    """``failed``, ``infeasible`` (any status but ok), or :data:`VIOLATES`."""
    reason: str
    """The recorded reason in full (:data:`NO_REASON` when none), or the constraints broken."""
    trials: list[tuple[str, int]]
    """(device, trial number) of each trial, by device then number."""
    reused: int
    """How many of them carry an earlier trial's result rather than their own (``reused_from``)."""

    @property
    def size(self) -> int:
        return len(self.trials)

    @property
    def devices(self) -> list[str]:
        return sorted({device for device, _ in self.trials})


class FailuresInfo(NamedTuple):
    groups: list[FailureGroup]
    """The largest group first; ties by status, then reason."""
    note: str
    """Groups not listed, when there are more than :data:`MAX_GROUPS`."""
    empty_reason: str | None


def failures_info(trials: pd.DataFrame) -> FailuresInfo:
    """Finished trials without a feasible result, grouped by status and reason text (see the
    module's docstring). Trials still running or queued are not counted."""
    ended = outcomes(trials).astype("string").fillna("")
    done = ~ended.isin(_UNFINISHED)
    status_bad = done & (ended != "ok")
    broken = done & (ended == "ok") & (trials["state"] == "COMPLETE") & ~trials["feasible"]
    found: dict[tuple[str, str], list[tuple[str, int, bool]]] = {}
    reused = (trials[TrialAttr.REUSED_FROM].notna() if TrialAttr.REUSED_FROM in trials.columns
              else pd.Series(False, index=trials.index))
    keys = dict(zip(trials.index, trial_keys(trials), strict=True))
    for index, status, reason in _why(trials, ended, status_bad, broken):
        found.setdefault((status, reason), []).append((*keys[index], bool(reused[index])))
    if not found:
        return FailuresInfo([], "", "every finished trial gave a feasible result")
    groups = [FailureGroup(status, reason, sorted((d, n) for d, n, _ in members),
                           sum(r for _, _, r in members))
              for (status, reason), members in found.items()]
    groups.sort(key=lambda g: (-g.size, g.status, g.reason))
    left = groups[MAX_GROUPS:]
    note = (f"{len(left)} more group(s) of {sum(g.size for g in left)} trial(s) not listed (the "
            f"{MAX_GROUPS} largest are).") if left else ""
    return FailuresInfo(groups[:MAX_GROUPS], note, None)


def _why(trials: pd.DataFrame, ended: pd.Series, status_bad: pd.Series,
         broken: pd.Series) -> list[tuple[int, str, str]]:
    """(row index, status, reason) of each trial to group."""
    rows: list[tuple[int, str, str]] = []
    for index in trials.index[status_bad]:
        reason = trials.at[index, TrialAttr.REASON]
        text = NO_REASON if is_missing(reason) or not str(reason).strip() else str(reason)
        rows.append((index, str(ended[index]), _bounded(text)))
    bounds = constraint_columns(trials)
    # A constraint with no recorded value counts as broken: nothing shows it holds.
    breaks = ~(trials[bounds].astype("float64") <= 0)
    for index in trials.index[broken]:
        names = [column.removeprefix(CONSTRAINT_PREFIX) for column in bounds
                 if breaks.at[index, column]]
        rows.append((index, VIOLATES, "violates " + ("; ".join(names) or "a constraint")))
    return rows


def _bounded(text: str) -> str:
    if len(text) <= REASON_CHARS:
        return text
    return text[:REASON_CHARS] + f"… ({len(text) - REASON_CHARS} more characters in the study)"


def trial_ranges(numbers: Sequence[int]) -> str:
    """``3–5, 9, 12``: sorted trial numbers with runs of consecutive ones joined."""
    ordered = sorted(set(numbers))
    parts: list[str] = []
    start = previous = None
    for number in [*ordered, None]:
        if number is not None and previous is not None and number == previous + 1:
            previous = number
            continue
        if start is not None and previous is not None:
            parts.append(str(start) if start == previous else
                         f"{start}, {previous}" if previous == start + 1 else
                         f"{start}–{previous}")
        start = previous = number
    return ", ".join(parts)


def failures_table(info: FailuresInfo) -> TableInfo:
    """One row per group: status, count (and how many reuse an earlier result), the reason
    (wrapped), the trials by device."""
    if info.empty_reason is not None:
        return TableInfo([], [], info.empty_reason)
    rows = []
    for group in info.groups:
        count = str(group.size) + (f" ({group.reused} reused)" if group.reused else "")
        by_device = "; ".join(
            f"{device}: {trial_ranges([n for d, n in group.trials if d == device])}"
            for device in group.devices)
        rows.append([group.status, count, group.reason, by_device])
    return TableInfo(["status", "trials", "reason", "trial numbers by device"], rows, None,
                     note=info.note, prose=(2, 3))
