"""Measurements without a device: custom evaluator functions and replay tables.

A custom evaluator is a function ``evaluator(candidate) -> {metric: value}`` — a lookup in a
recorded benchmark table, a call to a remote service, a simulator — that the search loop calls
instead of handing the candidate to the farm (:class:`EvaluatorDispatcher`), under the trial
timeout: in a worker process when it is an importable function, else in a thread of the driver
(``dse.search.evaluator_runner``). A replay device is such a function over a recorded CSV or
parquet table (:class:`ReplayEvaluator`), looked up in the driver. :class:`MixedDispatcher` lets
either sit beside real devices in one campaign.

The metric names an evaluator may report are the built-in ones (``dse.metrics``) and those its
search space declares under ``metrics:``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from dse.candidate import Candidate
from dse.exceptions import DeviceError, SpecError
from dse.farm.dispatcher import Done, Job
from dse.measurement import Measurement
from dse.metrics import METRICS, current_metric_keys, current_metric_name, is_measured, name_of_column
from dse.search.evaluator_runner import (
    InfeasibleCandidate,
    InlineRunner,
    ProcessRunner,
    Runner,
    ThreadRunner,
    importable_reference,
)
from dse.spec import MeasureSpec, SearchSpace, TrainingSpec
from dse.spec.loading import Evaluator

if TYPE_CHECKING:
    from dse.farm.dispatcher import Dispatcher

__all__ = [
    "Evaluator",
    "EvaluatorDispatcher",
    "InfeasibleCandidate",
    "MixedDispatcher",
    "ReplayEvaluator",
    "known_metrics",
    "space_parameter_names",
]


def known_metrics(space: SearchSpace) -> frozenset[str]:
    """What an evaluator of ``space`` may report: the built-in metrics and the space's own."""
    return frozenset(METRICS) | {m.name for m in space.metrics}


class EvaluatorDispatcher:
    """Measures candidates with functions, one function per device profile.

    It has the dispatcher interface the search loop drives (``start``, ``idle``, ``submit``,
    ``wait``, ``in_flight``, ``cancel``, and the blocking ``evaluate``). ``submit`` makes the call
    and waits for it: the loop submits while it holds the node's lock shared, so an evaluator
    never runs while a device of this node measures. ``wait`` hands back what ``submit`` finished
    and never blocks. One call at a time: ``idle`` is 1 for a profile with no result waiting to be
    collected, else 0.

    Where a call runs (``dse.search.evaluator_runner``): an importable function in a worker
    process, which a call past the job's ``timeout_s`` gets killed and replaced; any other
    callable in a thread of the driver, whose call past the timeout is abandoned; a
    :class:`ReplayEvaluator` in the driver itself. ``cancel`` stops the worker processes.

    The function's failure is its trial's result, never the campaign's: an exception (even
    ``SystemExit`` or ``KeyboardInterrupt``), a timeout or a dead worker fails the trial with the
    reason, :class:`InfeasibleCandidate` makes it infeasible, and a result that is not a mapping
    of known metric names to finite numbers fails it with the reason. Ctrl-C interrupts the wait
    and stops the run.
    """

    def __init__(self, evaluators: Mapping[str, Evaluator], metrics: Collection[str]) -> None:
        self.evaluators = dict(evaluators)
        self.metrics = frozenset(metrics)
        self.finished: list[Done] = []
        runners: dict[int, Runner] = {}  # profiles served by one function share its runner
        for function in self.evaluators.values():
            if id(function) not in runners:
                runners[id(function)] = _runner(function)
        self._runners = {profile: runners[id(function)]
                         for profile, function in self.evaluators.items()}

    def start(self) -> None:
        """Nothing to start: a worker process starts with its first call."""

    def idle(self, profile_name: str) -> int:
        waiting = any(d.job.candidate.device_profile == profile_name for d in self.finished)
        return 0 if waiting else 1

    def in_flight(self) -> int:
        return len(self.finished)

    def submit(self, job: Job) -> None:
        self.finished.append(Done(job, self.measure(job.candidate, job.timeout_s), ""))

    def wait(self, timeout_s: float | None = None) -> list[Done]:
        """What ``submit`` finished since the last call; empty at once when nothing was."""
        done, self.finished = self.finished, []
        return done

    def cancel(self) -> None:
        """Forget finished results and stop the worker processes (a later call starts one)."""
        self.finished.clear()
        for runner in self._runners.values():
            runner.close()

    def evaluate(self, candidate: Candidate, training: TrainingSpec, measure: MeasureSpec,
                 timeout_s: float) -> Measurement:
        """The blocking one-candidate form (``training`` and ``measure`` are for devices and do
        not apply)."""
        return self.measure(candidate, timeout_s)

    def measure(self, candidate: Candidate, timeout_s: float | None = None) -> Measurement:
        """Call the function of the candidate's device profile, stopped after ``timeout_s``
        seconds (None: never); its outcome as a Measurement."""
        function = self.evaluators.get(candidate.device_profile)
        if function is None:
            raise DeviceError(f"no evaluator serves device profile {candidate.device_profile!r} "
                              f"(this one serves {sorted(self.evaluators)})")
        name = _qualified_name(function)
        runner = self._runners[candidate.device_profile]
        provenance = {"evaluator": name, "device_profile": candidate.device_profile,
                      "evaluator_runs_in": runner.where}
        outcome = runner.call(candidate, timeout_s)
        if outcome.kind == "infeasible":
            return Measurement(candidate.candidate_id, "infeasible", reason=outcome.error,
                               provenance=provenance)
        if outcome.kind == "failed":
            return Measurement(candidate.candidate_id, "failed",
                               reason=f"evaluator {name} {outcome.error}", provenance=provenance)
        provenance["evaluator_seconds"] = f"{outcome.seconds:.6f}"
        metrics, problem = _checked(outcome.result, self.metrics)
        if problem:
            return Measurement(candidate.candidate_id, "failed", reason=f"evaluator {name} "
                               f"{problem}", metrics=metrics, provenance=provenance)
        return Measurement(candidate.candidate_id, "ok", metrics=metrics, provenance=provenance)


def _runner(function: Evaluator) -> Runner:
    """Where ``function``'s calls run: a replay table's lookups in the driver; an importable
    function in a worker process that a deadline can stop; any other callable (it cannot be
    found again in another process, and it may share state with the caller) in a thread."""
    if isinstance(function, ReplayEvaluator):
        return InlineRunner(function)
    reference = importable_reference(function)
    return ThreadRunner(function) if reference is None else ProcessRunner(reference)


def _qualified_name(function: object) -> str:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module}:{name}" if module else str(name)


def _checked(result: object, known: frozenset[str]) -> tuple[dict[str, float], str]:
    """The finite numbers of known metrics in ``result``, and what is wrong with the rest."""
    if not isinstance(result, Mapping):
        return {}, (f"returned a {type(result).__name__}; expected a mapping of metric name to "
                    f"number")
    # An evaluator written before a metric was renamed reports it under its former name.
    result = current_metric_keys({str(key): value for key, value in result.items()})
    metrics: dict[str, float] = {}
    problems = []
    unknown = sorted(str(key) for key in result if key not in known)
    if unknown:
        problems.append(f"reported unknown metrics {unknown}; allowed: the built-in metrics "
                        f"(dse.metrics) and those the search space declares under metrics:")
    for key, value in result.items():
        if key not in known:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            problems.append(f"reported {key} = {value!r}, not a number")
        elif not is_measured(key, float(value)):
            problems.append(f"reported {key} = {value}, not a finite number")
        else:
            metrics[key] = float(value)
    return metrics, "; ".join(problems)


class MixedDispatcher:
    """The farm for real device profiles, in-process evaluators for the others (a replay device
    beside real ones): each job goes to the part serving its candidate's device profile.

    ``wait`` hands back the evaluators' results at once, with whatever the farm has finished by
    then; with none, it waits on the farm as the farm's own ``wait`` does.
    """

    def __init__(self, farm: Dispatcher, local: EvaluatorDispatcher) -> None:
        self.farm = farm
        self.local = local

    def _part(self, profile_name: str) -> Dispatcher | EvaluatorDispatcher:
        return self.local if profile_name in self.local.evaluators else self.farm

    def start(self) -> None:
        self.farm.start()
        self.local.start()

    def idle(self, profile_name: str) -> int:
        return self._part(profile_name).idle(profile_name)

    def in_flight(self) -> int:
        return self.farm.in_flight() + self.local.in_flight()

    def submit(self, job: Job) -> None:
        self._part(job.candidate.device_profile).submit(job)

    def wait(self, timeout_s: float | None = None) -> list[Done]:
        done = self.local.wait()
        if done:
            return done + (self.farm.wait(timeout_s=0) if self.farm.in_flight() else [])
        if timeout_s is None and not self.farm.in_flight():
            return []  # nothing runs anywhere, so nothing would ever arrive
        return self.farm.wait(timeout_s)

    def cancel(self) -> None:
        self.farm.cancel()
        self.local.cancel()

    def evaluate(self, candidate: Candidate, training: TrainingSpec, measure: MeasureSpec,
                 timeout_s: float) -> Measurement:
        part = self._part(candidate.device_profile)
        return part.evaluate(candidate, training, measure, timeout_s)


# -- replay ----------------------------------------------------------------------------------------

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
