"""Measurements without a device: custom evaluator functions and replay tables.

A custom evaluator is a function ``evaluator(candidate) -> {metric: value}`` — a lookup in a
recorded benchmark table, a call to a remote service, a simulator — that the search loop calls
instead of handing the candidate to the farm (:class:`EvaluatorDispatcher`), under the trial
timeout: in a worker process when it is an importable function, else in a thread of the driver
(``dse.search.evaluators.runner``). A replay device is such a function over a recorded CSV or
parquet table (:class:`ReplayEvaluator`, in ``dse.search.evaluators.replay``), looked up in the driver.
:class:`MixedDispatcher` lets either sit beside real devices in one campaign.

The metric names an evaluator may report are the built-in ones (``dse.core.metrics``) and those its
search space declares under ``metrics:``.
"""

from __future__ import annotations

import numbers
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from dse.core import Candidate, DeviceError, Measurement, current_metric_keys, is_measured
from dse.farm import Done, Job
from dse.search.evaluators.replay import ReplayEvaluator, known_metrics, space_parameter_names
from dse.search.evaluators.runner import (
    InfeasibleCandidate,
    InlineRunner,
    ProcessRunner,
    Runner,
    ThreadRunner,
    importable_reference,
)
from dse.spec import Evaluator, MeasureSpec, TrainingSpec

if TYPE_CHECKING:
    from dse.farm import Dispatcher

__all__ = [
    "Evaluator",
    "EvaluatorDispatcher",
    "InfeasibleCandidate",
    "MixedDispatcher",
    "ReplayEvaluator",
    "known_metrics",
    "space_parameter_names",
]


class EvaluatorDispatcher:
    """Measures candidates with functions, one function per device profile.

    It has the dispatcher interface the search loop drives (``start``, ``idle``, ``submit``,
    ``wait``, ``in_flight``, ``cancel``, and the blocking ``evaluate``). ``submit`` makes the call
    and waits for it: the loop submits while it holds the node's lock shared, so an evaluator
    never runs while a device of this node measures. ``wait`` hands back what ``submit`` finished
    and never blocks. One call at a time: ``idle`` is 1 for a profile with no result waiting to be
    collected, else 0.

    Where a call runs (``dse.search.evaluators.runner``): an importable function in a worker
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
                        f"(dse.core.metrics) and those the search space declares under metrics:")
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
