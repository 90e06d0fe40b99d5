"""The search loop: ask Optuna for a candidate, have its device measure it, tell the result.

This is the only module that joins the search and the farm. The driver owns the study; workers
never touch storage. What a trial carries (user attrs) is the contract that ``dse.results`` reads:
``candidate``, ``candidate_id``, ``status``, ``reason``, ``metrics``, ``missing``, ``provenance``,
and, where they apply, ``reused_from`` and ``samples_file``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.atomic import atomic_write
from dse.candidate import Candidate
from dse.exceptions import DseError
from dse.measurement import Measurement
from dse.search.space import suggest_candidate
from dse.spec import Experiment

if TYPE_CHECKING:
    import optuna

    from dse.farm.dispatcher import Dispatcher


@dataclass(frozen=True)
class TrialOutcome:
    """What happened to one trial, for progress displays."""

    number: int
    candidate: Candidate
    status: str
    reason: str
    metrics: dict[str, float]
    reused_from: int | None
    completed: int
    budget: int


ProgressCallback = Callable[[TrialOutcome], None]


@dataclass
class _Known:
    """An earlier result that an identical candidate reuses instead of being measured again."""

    number: int
    status: str
    reason: str
    metrics: dict[str, float]
    missing: dict[str, str]


class SearchLoop:
    """Runs a campaign's study on one device until the budget of completed trials is met."""

    def __init__(self, experiment: Experiment, study: optuna.Study, dispatcher: Dispatcher,
                 run_dir: Path, on_trial: ProgressCallback | None = None) -> None:
        if len(experiment.devices) != 1:
            from dse.exceptions import SpecError

            raise SpecError([f"{experiment.path}: devices: this version measures one device per "
                             f"campaign, found {len(experiment.devices)}"])
        self.experiment = experiment
        self.space = experiment.space
        self.profile = experiment.devices[0]
        self.study = study
        self.dispatcher = dispatcher
        self.run_dir = run_dir
        self.on_trial = on_trial
        self.objectives = [o.metric for o in self.space.objectives]
        self.known: dict[str, _Known] = {}

    # -- bookkeeping -------------------------------------------------------------------------

    def _counts(self) -> tuple[int, int]:
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False)
        completed = sum(t.state == TrialState.COMPLETE for t in trials)
        failed = sum(t.state == TrialState.FAIL for t in trials)
        return completed, failed

    def _recover(self) -> None:
        """Learn earlier results; fail trials a dead driver left running and re-queue them once,
        and re-queue once the candidates an interrupt or a crash stopped mid-measurement."""
        import optuna
        from optuna.trial import TrialState

        for frozen in sorted(self.study.get_trials(deepcopy=False), key=lambda t: t.number):
            attrs = frozen.user_attrs
            if frozen.state == TrialState.RUNNING:
                trial = optuna.trial.Trial(self.study, frozen._trial_id)
                trial.set_user_attr("status", "failed")
                trial.set_user_attr("reason", "the driver stopped while this trial ran")
                trial.set_user_attr("interrupted", True)
                self.study.tell(frozen.number, state=TrialState.FAIL)
                self._requeue_once(frozen)
            elif attrs.get("interrupted"):
                # Never measured to the end: no result to reuse, so measure it again (once).
                self._requeue_once(frozen)
            elif "candidate_id" in attrs and "status" in attrs:
                known = self.known.get(attrs["candidate_id"])
                # A later success replaces an earlier failure of the same candidate.
                if known is None or (known.status != "ok" and attrs["status"] == "ok"):
                    self.known[attrs["candidate_id"]] = _Known(
                        frozen.number, attrs["status"], attrs.get("reason", ""),
                        attrs.get("metrics", {}), attrs.get("missing", {}))

    def _requeue_once(self, frozen: optuna.trial.FrozenTrial) -> None:
        if "requeued_from" in frozen.user_attrs or not frozen.params:
            return
        requeued = {t.user_attrs.get("requeued_from") for t in self.study.get_trials(deepcopy=False)}
        if frozen.number not in requeued:
            self.study.enqueue_trial(frozen.params, user_attrs={"requeued_from": frozen.number})

    # -- one trial ---------------------------------------------------------------------------

    def _record(self, trial: optuna.Trial, candidate: Candidate, status: str, reason: str,
                metrics: dict[str, float], missing: dict[str, str]) -> str:
        """Store the result on the trial and tell Optuna; returns the final status."""
        from optuna.trial import TrialState

        if status == "ok":
            absent = [m for m in self.objectives + [c.metric for c in self.space.constraints]
                      if not math.isfinite(metrics.get(m, math.nan))]
            if absent:
                status = "failed"
                reason = "; ".join(f"{m} not measured: {missing.get(m, 'no value')}"
                                   for m in absent)
        trial.set_user_attr("status", status)
        trial.set_user_attr("reason", reason)
        trial.set_user_attr("metrics", metrics)
        trial.set_user_attr("missing", missing)
        if status != "ok":
            self.study.tell(trial, state=TrialState.FAIL)
            return status
        for constraint in self.space.constraints:
            trial.set_constraint(str(constraint), constraint.violation(metrics[constraint.metric]))
        self.study.tell(trial, [metrics[m] for m in self.objectives])
        return status

    def _save_samples(self, number: int, measurement: Measurement) -> str | None:
        if not measurement.samples:
            return None
        folder = self.run_dir / "samples"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"trial-{number:05d}.npz"
        arrays: dict[str, Any] = {k: np.asarray(v, dtype=np.float64)
                                  for k, v in measurement.samples.items()}
        # A file object, so numpy does not append ".npz" to the temporary name.
        def write(tmp: Path) -> None:
            with tmp.open("wb") as stream:
                np.savez_compressed(stream, **arrays)

        atomic_write(target, write)
        return str(target.relative_to(self.run_dir))

    def _run_one(self, trial: optuna.Trial) -> tuple[Candidate, str, str, dict[str, float], int | None]:
        candidate = suggest_candidate(trial, self.space, self.profile)
        trial.set_user_attr("candidate", candidate.to_dict())
        trial.set_user_attr("candidate_id", candidate.candidate_id)
        known = self.known.get(candidate.candidate_id)
        if known is not None:
            trial.set_user_attr("reused_from", known.number)
            status = self._record(trial, candidate, known.status, known.reason,
                                  known.metrics, known.missing)
            return candidate, status, known.reason, known.metrics, known.number
        measurement = self.dispatcher.evaluate(
            candidate, self.space.training, self.experiment.spec.measurement,
            timeout_s=self.experiment.spec.budget.trial_timeout_s)
        trial.set_user_attr("provenance", measurement.provenance)
        samples_file = self._save_samples(trial.number, measurement)
        if samples_file:
            trial.set_user_attr("samples_file", samples_file)
        status = self._record(trial, candidate, measurement.status, measurement.reason,
                              measurement.metrics, measurement.missing)
        self.known[candidate.candidate_id] = _Known(
            trial.number, status, measurement.reason, measurement.metrics, measurement.missing)
        return candidate, status, measurement.reason, measurement.metrics, None

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """Measure until the budget is met.

        On Ctrl-C the trial in flight is failed as interrupted (re-queued on the next run), then
        the interrupt is re-raised. A dse bug fails the trial with the error and stops the run.
        Too many failed or infeasible trials stop the run with an error naming the last reason.
        """
        from optuna.trial import TrialState

        self._recover()
        budget = self.experiment.spec.budget
        failed_here = 0
        last_failure = ""
        completed, _ = self._counts()
        while completed < budget.trials:
            trial = self.study.ask()
            try:
                candidate, status, reason, metrics, reused = self._run_one(trial)
            except BaseException as exc:
                # Leave the study consistent, nothing half-written, and say what happened.
                self.dispatcher.cancel()
                interrupted = isinstance(exc, KeyboardInterrupt)
                trial.set_user_attr("status", "failed")
                trial.set_user_attr("interrupted", True)
                trial.set_user_attr("reason", "interrupted before the measurement finished"
                                    if interrupted else f"dse error: {type(exc).__name__}: {exc}")
                self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
                raise
            if status == "ok":
                completed += 1
            else:
                failed_here += 1
                last_failure = f"trial {trial.number} {status}: {reason}"
            if self.on_trial is not None:
                self.on_trial(TrialOutcome(trial.number, candidate, status, reason, metrics,
                                           reused, completed, budget.trials))
            if failed_here >= budget.max_failed and completed < budget.trials:
                raise DseError(
                    f"{self.experiment.path}: budget.max_failed: stopped after {failed_here} failed "
                    f"or infeasible trials in this run ({completed} of {budget.trials} completed); "
                    f"last: {last_failure}")
