"""Replay devices: the recorded-table evaluator and the parameter and metric names a table holds."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse.core import METRICS, Candidate, SpecError, current_metric_name, name_of_column
from dse.search.evaluators.calls import InfeasibleCandidate
from dse.spec import SearchSpace


def known_metrics(space: SearchSpace) -> frozenset[str]:
    """What an evaluator of ``space`` may report: the built-in metrics and the space's own."""
    return frozenset(METRICS) | {m.name for m in space.metrics}


def space_parameter_names(space: SearchSpace) -> list[str]:
    """Every parameter the space searches, named as :meth:`Candidate.parameters` names it (the
    model family is one fixed value, not searched, so it is not among them)."""
    names = [] if space.model is None else [f"arch.{key}" for key in space.model.arch]
    if space.deployment is not None:
        names += ["backend", "precision", "batch_size"]
        names += list(dict.fromkeys(f"knob.{key}" for spec in space.deployment.backends.values()
                                    for key in spec.knobs))
    return names + list(space.parameters)


class ReplayEvaluator:
    """Serves recorded measurements: the row of a CSV or parquet table whose parameter columns
    equal the candidate's parameters.

    Columns: one per parameter the space searches, named as result tables name them, with or
    without their ``param.`` prefix (``x1``, ``arch.depth``, ``backend``,
    ``knob.intra_op_threads``); one per metric, ``name`` or ``name [unit]``. So a campaign's own
    ``trials.parquet`` (one device's rows) replays as it is. Other columns are ignored.

    Values match after normalisation: numbers as floats rounded to 12 significant digits (a
    stepped range's 0.30000000000000004 is a CSV's 0.3), numeric text as numbers, true/false text
    as booleans. The first matching row wins, a row with status ``ok`` before others where the
    table has a ``status`` column. No row, or a row recorded without a measurement, makes the
    candidate infeasible ("not in the recorded table"). Empty metric cells are left out (missing,
    not failed).

    Args:
        table: The recorded table, a ``.csv`` file (any other suffix is read as parquet).
        space: The search space whose parameters and metrics the table holds.

    Attributes:
        path: The table's path, as given.

    Raises:
        SpecError: When the table cannot be read, lacks a column for a parameter of the space,
            has no metric column, or holds a metric value that is not a number.

    Examples:
        >>> from dse import Candidate, InfeasibleCandidate, ReplayEvaluator, load_experiment
        >>> experiment = load_experiment("experiments/custom-evaluator.yaml")
        >>> replay = next(p for p in experiment.devices if p.kind == "replay")
        >>> evaluator = ReplayEvaluator(replay.table, experiment.space)
        >>> evaluator(Candidate(params={"x1": 0.0, "x2": 0.25, "x3": 0.0},
        ...                     device_profile=replay.name))
        {'zdt_f1': 0.0, 'zdt_f2': 2.125}
        >>> try:
        ...     evaluator(Candidate(params={"x1": 0.05, "x2": 0.25, "x3": 0.0}))
        ... except InfeasibleCandidate as exc:
        ...     print(exc)
        not in the recorded table zdt1-grid.csv
    """

    def __init__(self, table: Path, space: SearchSpace) -> None:
        frame = _read_table(table)
        self.path = table
        self._columns = {key: _parameter_column(frame, key, table)
                         for key in space_parameter_names(space)}
        used = set(self._columns.values())
        known = known_metrics(space)
        # A table recorded before a metric was renamed has a column under its former name
        # (``memory_peak_mb [MB]``); it is read as the current one, unless both are there.
        headings = {str(c): name_of_column(str(c)) for c in frame.columns if str(c) not in used}
        written = set(headings.values())
        metric_columns = {}
        for column, heading in headings.items():
            name = current_metric_name(heading)
            if name in known and (name == heading or name not in written):
                metric_columns[column] = name
        if not metric_columns:
            raise SpecError([f"{table}: no metric column: name one after a built-in metric or "
                             f"one the search space {space.name!r} declares (name or "
                             f"'name [unit]'); columns: {', '.join(map(str, frame.columns))}"])
        self._values = {key: [_normal(v) for v in frame[column].tolist()]
                        for key, column in self._columns.items()}
        self._metrics = [_row_metrics(frame, metric_columns, table, row)
                         for row in range(len(frame))]
        self._status = ([str(s) if isinstance(s, str) else "not measured"
                         for s in frame["status"].tolist()]
                        if "status" in frame.columns else ["ok"] * len(frame))
        self._reason = (["" if not isinstance(r, str) else r for r in frame["reason"].tolist()]
                        if "reason" in frame.columns else [""] * len(frame))
        self._indexes: dict[tuple[str, ...], dict[tuple[object, ...], int]] = {}

    def __call__(self, candidate: Candidate) -> dict[str, float]:
        """The recorded metrics of ``candidate``'s row.

        Args:
            candidate: The candidate; its parameters (:meth:`Candidate.parameters`, less
                ``family``) are looked up.

        Returns:
            Metric name -> value of the first matching row, empty cells left out.

        Raises:
            InfeasibleCandidate: When the table has no column for one of the candidate's
                parameters, no matching row, or only a row recorded without a measurement.
        """
        wanted = {k: v for k, v in candidate.parameters().items() if k != "family"}
        absent = [key for key in wanted if key not in self._columns]
        if absent:
            raise InfeasibleCandidate(f"not in the recorded table {self.path.name}: it has no "
                                      f"column for {', '.join(absent)}")
        keys = tuple(sorted(wanted))
        row = self._index(keys).get(tuple(_normal(wanted[key]) for key in keys))
        if row is None:
            raise InfeasibleCandidate(f"not in the recorded table {self.path.name}")
        if self._status[row] != "ok":
            reason = f": {self._reason[row]}" if self._reason[row] else ""
            raise InfeasibleCandidate(f"not in the recorded table {self.path.name} with a "
                                      f"measurement: recorded {self._status[row]}{reason}")
        return dict(self._metrics[row])

    def _index(self, keys: tuple[str, ...]) -> dict[tuple[object, ...], int]:
        """Row by the values of ``keys`` (a candidate's keys differ by backend, through its
        knobs); rows lacking one of them are not in it."""
        index = self._indexes.get(keys)
        if index is None:
            index = {}
            columns = [self._values[key] for key in keys]
            for row, values in enumerate(zip(*columns, strict=True)):
                if any(value is None for value in values):
                    continue
                first = index.get(values)
                if first is None or (self._status[first] != "ok" and self._status[row] == "ok"):
                    index[values] = row
            self._indexes[keys] = index
        return index


def _read_table(path: Path) -> pd.DataFrame:
    try:
        if path.suffix.lower() == ".csv":
            return pd.read_csv(path)
        return pd.read_parquet(path)
    except (OSError, ValueError, ImportError) as exc:
        raise SpecError([f"{path}: cannot read the replay table: {exc}"]) from None


def _parameter_column(frame: pd.DataFrame, key: str, table: Path) -> str:
    for column in (key, f"param.{key}"):
        if column in frame.columns:
            return column
    raise SpecError([f"{table}: no column for the search space's parameter {key!r} (named "
                     f"{key!r} or 'param.{key}'); columns: {', '.join(map(str, frame.columns))}"])


def _row_metrics(frame: pd.DataFrame, columns: Mapping[str, str], table: Path,
                 row: int) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for column, name in columns.items():
        value = frame[column].iat[row]
        if _missing(value):
            continue
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
            where = f"line {row + 2}" if table.suffix.lower() == ".csv" else f"row {row}"
            raise SpecError([f"{table}: {where}: column {column!r}: {value!r} is not a number"])
        metrics[name] = float(value)
    return metrics


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _normal(value: Any) -> tuple[str, object] | None:
    """A value as the table and the candidate are compared: kind and canonical value."""
    if _missing(value):
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("true", "false"):
            return ("bool", text.lower() == "true")
        try:
            value = float(text)
        except ValueError:
            return ("text", text)
        if math.isnan(value):
            return None
    if isinstance(value, bool | np.bool_):  # before numbers: True == 1 must not match 1
        return ("bool", bool(value))
    if isinstance(value, numbers.Real):
        return ("number", float(f"{float(value):.12g}"))
    return ("text", str(value))
