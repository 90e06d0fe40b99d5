"""What duels decided, kept on the device's study, and read back as the pairwise overrides the
fronts apply.

A duel of trials ``a`` < ``b`` is one :class:`DuelRecord` in the study attribute
:attr:`dse.core.trial_record.StudyAttr.DUELS` (a list, one entry per pair, the latest duel of a pair
replacing an earlier one). Its :class:`MetricVerdict` per contested objective says which trial is
better on it (``a_faster``: A has the lower latency, or the higher throughput) or that neither is
shown to be (``tie``), with A's value over B's and its 95% interval. Only a ``measured`` duel's
verdicts count; a ``disturbed`` one (other work took the device) is run again by the next run, a
``failed`` one (a candidate that no longer builds, a timeout) is not.

The trials table carries each trial's side of its counted duels in the column
:data:`dse.core.columns.DUEL_COLUMN` (JSON, from the trial's point of view: ``faster``, ``slower`` or
``tie`` than trial ``vs``), so every front made from a table applies them
(:func:`table_overrides`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dse.core import StudyAttr
from dse.measure import A_FASTER, B_FASTER, TIE, Verdict

if TYPE_CHECKING:
    import optuna

    from dse.util import Overrides

DuelStatus = Literal["measured", "disturbed", "failed"]
MEASURED: DuelStatus = "measured"
DISTURBED: DuelStatus = "disturbed"
FAILED: DuelStatus = "failed"

# A trial's side of a verdict, as its table cell says it.
_SIDE_WORDS = {A_FASTER: ("faster", "slower"), B_FASTER: ("slower", "faster"), TIE: ("tie", "tie")}
# Which row is better, as the overrides hold it: -1 the first row of the pair, +1 the second,
# 0 neither (a tie).
_SIGNS = {"faster": -1.0, "slower": 1.0, "tie": 0.0}


@dataclass(frozen=True)
class MetricVerdict:
    """The order of A and B on one objective: ``verdict``, and ``ratio`` = A's value over B's
    (in the metric's own terms: latency or throughput) with its 95% interval."""

    metric: str
    verdict: Verdict
    ratio: float
    low: float
    high: float


@dataclass(frozen=True)
class DuelRecord:
    """One duel of trials ``a`` < ``b`` of a device's study: how it ended (``status``, with
    ``reason`` where it was not measured cleanly), its verdicts, and what it took."""

    a: int
    b: int
    status: DuelStatus
    reason: str = ""
    verdicts: tuple[MetricVerdict, ...] = field(default_factory=tuple)
    rounds: int = 0
    seconds: float = 0.0
    device_id: str = ""

    @property
    def counts(self) -> bool:
        """Whether the fronts use its verdicts (a duel measured without disturbance)."""
        return self.status == MEASURED

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["verdicts"] = [asdict(v) for v in self.verdicts]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DuelRecord:
        verdicts = tuple(MetricVerdict(**v) for v in data.get("verdicts", ()))
        return cls(int(data["a"]), int(data["b"]), data["status"], str(data.get("reason", "")),
                   verdicts, int(data.get("rounds", 0)), float(data.get("seconds", 0.0)),
                   str(data.get("device_id", "")))


def read_records(user_attrs: Mapping[str, Any]) -> list[DuelRecord]:
    """The duels a study's user attributes hold, in the order they were recorded."""
    return [DuelRecord.from_dict(entry) for entry in user_attrs.get(StudyAttr.DUELS) or ()]


def store_record(study: optuna.Study, record: DuelRecord) -> None:
    """Keep ``record`` on ``study``, replacing an earlier duel of the same pair."""
    kept = [r for r in read_records(study.user_attrs) if (r.a, r.b) != (record.a, record.b)]
    study.set_user_attr(StudyAttr.DUELS, [r.to_dict() for r in [*kept, record]])


def trial_cells(records: Iterable[DuelRecord], numbers: Sequence[int]) -> list[str | None]:
    """Per trial of ``numbers``, its side of every counted duel as the table's JSON cell (None
    for a trial in none)."""
    sides: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        if not record.counts:
            continue
        for verdict in record.verdicts:
            words = _SIDE_WORDS[verdict.verdict]
            for me, other, word, flip in ((record.a, record.b, words[0], False),
                                          (record.b, record.a, words[1], True)):
                ratio, low, high = ((1 / verdict.ratio, 1 / verdict.high, 1 / verdict.low)
                                    if flip else (verdict.ratio, verdict.low, verdict.high))
                sides.setdefault(me, []).append(
                    {"vs": other, "metric": verdict.metric, "verdict": word,
                     "ratio": _round(ratio), "low": _round(low), "high": _round(high)})
    return [json.dumps(sides[n], separators=(",", ":")) if n in sides else None for n in numbers]


def parse_cell(cell: object) -> list[dict[str, Any]]:
    """A table cell's duel entries (none for an empty cell)."""
    if not isinstance(cell, str) or not cell:
        return []
    entries: list[dict[str, Any]] = json.loads(cell)
    return entries


def table_overrides(numbers: Sequence[int], cells: Sequence[object],
                    objectives: Sequence[str]) -> Overrides:
    """The pairwise overrides of one device's rows (trial ``numbers`` with their duel ``cells``)
    for :func:`dse.util.dominance.undominated`: for each pair of rows a duel ordered, per objective
    -1 (the first row is better), +1 (the second is), 0 (neither) or NaN (no verdict)."""
    where = {int(n): i for i, n in enumerate(numbers)}
    column = {name: j for j, name in enumerate(objectives)}
    overrides: Overrides = {}
    for row, cell in enumerate(cells):
        for entry in parse_cell(cell):
            other, j = where.get(int(entry["vs"])), column.get(str(entry["metric"]))
            if other is None or j is None or other == row:
                continue
            signs = overrides.setdefault((row, other), np.full(len(objectives), np.nan))
            signs[j] = _SIGNS[str(entry["verdict"])]
    return overrides


def record_overrides(numbers: Sequence[int], records: Iterable[DuelRecord],
                     objectives: Sequence[str]) -> Overrides:
    """:func:`table_overrides` of the trials ``numbers`` from the study's records."""
    return table_overrides(numbers, trial_cells(records, numbers), objectives)


def _round(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None
