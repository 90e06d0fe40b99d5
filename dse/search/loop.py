"""The search loop: ask Optuna for a candidate, have its device measure it, tell the result.

This is the only module that joins the search and the farm. The driver owns the study; workers
never touch storage. What a trial carries (user attrs) is the contract that ``dse.results`` reads:
``candidate``, ``candidate_id``, ``status``, ``reason``, ``metrics``, ``missing``, ``provenance``,
and, where they apply, ``reused_from``, ``failure_scope`` (``arch``: a failure of the model
itself, reused by every candidate of its architecture), ``samples_file``, ``device_seconds`` and,
with screening (``search.screening``), ``fidelity``, ``screen_seconds`` and ``full_seconds``
(see :func:`dse.search.screening.fidelity_attrs`), and ``second_look_of`` on a trial that measured
another's candidate again at the end of the search (:mod:`dse.search.second_looks`).
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dse.core import Candidate, Measurement, Terminated, TrialAttr
from dse.farm import Done, Job
from dse.search.candidate_space import space_counter
from dse.search.device_search import DeviceSearch, KnownResult
from dse.search.duel_records import read_records
from dse.search.failure_stops import FailureStops
from dse.search.interrupts import StickyInterrupt
from dse.search.screening import FrontTracker, fidelity_attrs, screening_request
from dse.search.second_looks import look_is_slower, pending_second_looks
from dse.search.space import suggest_candidate
from dse.spec import Experiment
from dse.trial import NodeLock, current_node_id
from dse.util import atomic_write

if TYPE_CHECKING:
    import optuna


class JobDispatcher(Protocol):
    """What the loop needs of whoever measures: the farm's ``dse.farm.dispatcher.Dispatcher``,
    or the in-process evaluators of ``dse.search.evaluators.dispatchers``."""

    def start(self) -> None: ...

    def idle(self, profile_name: str) -> int: ...

    def submit(self, job: Job) -> None: ...

    def wait(self, timeout_s: float | None = None) -> list[Done]: ...

    def in_flight(self) -> int: ...

    def cancel(self) -> None: ...


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
    fidelity: str | None = None  # "screen" or "full" with screening on; None otherwise
    quality: str | None = None  # measurement_quality of a measured trial (None: not measured)
    second_look_of: int | None = None  # the trial a second look measured again


ProgressCallback = Callable[[TrialOutcome], None]


@dataclass
class _Pending:
    """A trial handed to the farm (or waiting on an identical candidate that is)."""

    profile: str
    trial: optuna.Trial
    candidate: Candidate
    second_look_of: int | None = None
    # A second look at a clean trial: that trial's objective values, which the look must beat
    # or tie to compete in its place (dse.search.second_looks.look_is_slower).
    clean_first: tuple[float, ...] | None = None


class SearchLoop:
    """Runs a campaign: one study per device profile, each until its budget of distinct
    candidates measured to an ok result is met (or its sampler finds no new candidate), with as
    many trials in flight as the profile has idle devices."""

    def __init__(self, experiment: Experiment, studies: Mapping[str, optuna.Study] | optuna.Study,
                 dispatcher: JobDispatcher, run_dir: Path,
                 on_trial: ProgressCallback | None = None, *,
                 evaluated: Collection[str] = (),
                 lease_check: Callable[[], None] | None = None) -> None:
        """``evaluated``: profiles whose candidates an evaluator or a replay table measures; the
        capability table does not narrow what they are offered."""
        if not isinstance(studies, Mapping):
            if len(experiment.devices) != 1:
                raise ValueError("one study per device profile is needed for a multi-device campaign")
            studies = {experiment.devices[0].name: studies}
        self.experiment = experiment
        self.space = experiment.space
        self.objectives = [o.metric for o in self.space.objectives]
        self.evaluated = frozenset(evaluated)
        self.screening = experiment.spec.search.screening
        # The percentiles the objectives and constraints use are floors on every run's samples.
        self.measurement = experiment.spec.measurement.for_metrics(
            self.objectives + [c.metric for c in self.space.constraints])
        # Screening saves device time; an evaluator or replay table spends none.
        self.searches = {p.name: DeviceSearch(
            p, studies[p.name], FrontTracker(self.objectives, self.space.constraints,
                                             read_records(studies[p.name].user_attrs))
            if self.screening.enabled and p.name not in self.evaluated else None,
            self.objectives, self.space.constraints, self.measurement.non_ok_on_front,
            space_counter(self.space, p, capabilities=p.name not in self.evaluated))
            for p in experiment.devices}
        self.dispatcher = dispatcher
        self.run_dir = run_dir
        self.on_trial = on_trial
        self.pending: dict[int, _Pending] = {}
        # Trials whose candidate is being measured right now for another trial: they reuse its
        # result when it arrives instead of measuring the same thing twice.
        self.followers: dict[str, list[_Pending]] = {}
        self._keys = itertools.count()
        budget = experiment.spec.budget
        self.stops = FailureStops(experiment.path, budget.max_failed,
                                  budget.stop_after_same_failure)
        # Raises once another driver has taken the campaign's lease (see dse.search.lease).
        self.lease_check = lease_check or (lambda: None)
        # Every trial this run created, by profile: an interrupt fails those still RUNNING.
        self.asked: dict[str, set[int]] = {}
        self._interrupts = StickyInterrupt()  # not installed: the run installs its own
        self.node_lock = NodeLock(current_node_id())

    @property
    def study(self) -> optuna.Study:
        """The study of a single-device campaign."""
        return next(iter(self.searches.values())).study

    # -- one trial ---------------------------------------------------------------------------

    def _save_samples(self, search: DeviceSearch, number: int,
                      measurement: Measurement) -> str | None:
        if not measurement.samples:
            return None
        folder = self.run_dir / "samples"
        folder.mkdir(parents=True, exist_ok=True)
        # A single-device campaign keeps the plain name; several studies share the folder.
        prefix = "" if len(self.searches) == 1 else f"{search.profile.name}-"
        target = folder / f"{prefix}trial-{number:05d}.npz"
        arrays: dict[str, Any] = {k: np.asarray(v, dtype=np.float64)
                                  for k, v in measurement.samples.items()}
        # A file object, so numpy does not append ".npz" to the temporary name.
        def write(tmp: Path) -> None:
            with tmp.open("wb") as stream:
                np.savez_compressed(stream, **arrays)

        atomic_write(target, write)
        return str(target.relative_to(self.run_dir))

    def _ask(self, search: DeviceSearch) -> None:
        """Ask the profile's study for one candidate: reuse a known result, follow an identical
        candidate in flight, or hand it to the farm."""
        with self._interrupts.deferred():
            trial = search.study.ask()
            self.asked.setdefault(search.profile.name, set()).add(trial.number)
        pending = _Pending(search.profile.name, trial, suggest_candidate(
            trial, self.space, search.profile,
            capabilities=search.profile.name not in self.evaluated))
        candidate = pending.candidate
        trial.set_user_attr(TrialAttr.CANDIDATE, candidate.to_dict())
        trial.set_user_attr(TrialAttr.CANDIDATE_ID, candidate.candidate_id)
        key = next(self._keys)
        self.pending[key] = pending
        # Its own earlier result, else its architecture's recorded failure: nothing to measure.
        known = search.answer(candidate)
        if known is not None:
            search.repeats_in_a_row += 1
            self._finish_reused(key, known)
        elif candidate.candidate_id in self.followers:
            search.repeats_in_a_row += 1
            self.followers[candidate.candidate_id].append(pending)
        else:
            search.repeats_in_a_row = 0
            self.followers[candidate.candidate_id] = []
            screening = (None if search.tracker is None
                         else screening_request(self.screening, search.tracker))
            self.dispatcher.submit(Job(key, candidate, self.space.training, self.measurement,
                                       self.experiment.spec.budget.trial_timeout_s,
                                       screening=screening))

    def _finish_reused(self, key: int, known: KnownResult) -> None:
        pending = self.pending.pop(key)
        search = self.searches[pending.profile]
        pending.trial.set_user_attr(TrialAttr.REUSED_FROM, known.number)
        if known.scope is not None:
            pending.trial.set_user_attr(TrialAttr.FAILURE_SCOPE, known.scope)
        status, reason = search.record(pending.trial, known.status, known.reason,
                                       known.metrics, known.missing, known.quality)
        self._outcome(search, pending, status, reason, known.metrics, known.number,
                      quality=known.quality)

    def _finish_measured(self, done: Done) -> None:
        pending = self.pending.pop(done.job.key)
        search = self.searches[pending.profile]
        trial, measurement = pending.trial, done.measurement
        trial.set_user_attr(TrialAttr.PROVENANCE, measurement.provenance)
        if done.device_id:
            trial.set_user_attr(TrialAttr.DEVICE_ID, done.device_id)
        samples_file = self._save_samples(search, trial.number, measurement)
        if samples_file:
            trial.set_user_attr(TrialAttr.SAMPLES_FILE, samples_file)
        fidelity = fidelity_attrs(measurement.provenance)
        for name, value in fidelity.items():
            trial.set_user_attr(name, value)
        quality = measurement.provenance.get("measurement_quality")
        # A failure of the model itself (the worker's ArchFailure) is its architecture's.
        scope = (measurement.provenance.get("failure_scope")
                 if measurement.status != "ok" else None)
        if scope is not None:
            trial.set_user_attr(TrialAttr.FAILURE_SCOPE, scope)
        slower = (pending.clean_first is not None and measurement.status == "ok"
                  and quality in (None, "ok")
                  and all(name in measurement.metrics for name in self.objectives)
                  and look_is_slower([measurement.metrics[name] for name in self.objectives],
                                     pending.clean_first, self.objectives))
        if slower:
            trial.set_user_attr(TrialAttr.SLOWER_THAN_FIRST, True)
        status, reason = search.record(trial, measurement.status, measurement.reason,
                                       measurement.metrics, measurement.missing, quality)
        if (search.tracker is not None and status == "ok" and not slower
                and fidelity.get(TrialAttr.FIDELITY) != "screen"
                and search.front_eligible(quality)):
            search.tracker.add(trial.number, measurement.metrics)
        known = KnownResult(trial.number, status, reason, measurement.metrics,
                            measurement.missing, quality, scope)
        search.learn(pending.candidate, known)
        self._outcome(search, pending, status, reason, measurement.metrics, None,
                      fidelity.get(TrialAttr.FIDELITY), quality)
        for follower in self.followers.pop(pending.candidate.candidate_id, []):
            key = next(k for k, v in self.pending.items() if v is follower)
            self._finish_reused(key, known)

    def _outcome(self, search: DeviceSearch, pending: _Pending, status: str, reason: str,
                 metrics: dict[str, float], reused: int | None,
                 fidelity: str | None = None, quality: str | None = None) -> None:
        # Only a measurement counts: a reused result spends no budget (budget.trials counts
        # distinct candidates) and is no new failure.
        if reused is None:
            self.stops.measured(f"{search.profile.name} trial {pending.trial.number}", status,
                                reason, farm=search.profile.name not in self.evaluated)
            if status == "ok" and pending.second_look_of is None:
                search.completed += 1
        if self.on_trial is not None:
            budget = self.experiment.spec.budget.trials
            self.on_trial(TrialOutcome(
                pending.trial.number, pending.candidate, status, reason, metrics, reused,
                sum(s.completed for s in self.searches.values()), budget * len(self.searches),
                fidelity, quality, pending.second_look_of))

    # -- the loop ----------------------------------------------------------------------------

    def _to_ask(self, search: DeviceSearch) -> int:
        """How many new trials the profile's study should start now."""
        budget = self.experiment.spec.budget.trials
        if search.exhausted:
            return 0
        running = sum(p.profile == search.profile.name for p in self.pending.values())
        return min(self.dispatcher.idle(search.profile.name),
                   max(0, budget - search.completed - running))

    def run(self) -> None:
        """Measure until every profile's budget is met.

        On Ctrl-C the trials in flight are failed as interrupted (re-queued on the next run), then
        the interrupt is re-raised. A dse bug fails them with the error and stops the run. Too many
        failed or infeasible trials stop the run with an error naming the last reason, and so does
        a write the file system refuses (DseError naming the run folder and "no space left on
        device" or "file too large"; the study keeps what it held).
        """
        with self._guarded() as interrupts:
            self._run(interrupts)

    @contextmanager
    def _guarded(self) -> Iterator[StickyInterrupt]:
        """Ctrl-C and termination held as :class:`StickyInterrupt`, refused writes as DseError,
        and on any exception the trials this run left RUNNING failed (:meth:`_abandon`)."""
        from dse.storage import RESUME_ADVICE, refused_writes_as_errors

        with StickyInterrupt() as interrupts, refused_writes_as_errors(self.run_dir, RESUME_ADVICE):
            self._interrupts = interrupts
            try:
                yield interrupts
            except BaseException as exc:
                self._abandon(exc)
                raise

    def _run(self, interrupts: StickyInterrupt) -> None:
        with self.node_lock.shared():
            for search in self.searches.values():
                search.recover()
        self.dispatcher.start()
        while self._open_searches():
            interrupts.check()
            self.lease_check()
            # The driver's own work is "other dse work" for a device on its node.
            asked = 0
            with self.node_lock.shared():
                for search in self.searches.values():
                    for _ in range(self._to_ask(search)):
                        self._ask(search)
                        asked += 1
            # Checked after asking too: a repeat of a failed candidate fails inside _ask,
            # leaves nothing pending, and would otherwise loop here for ever.
            self._stop_if_too_many_failed()
            if not self.pending:
                # Asked, and every answer was a reused result (finished at once): ask again.
                # Else every device is busy elsewhere or still starting: wait for a change
                # rather than spin.
                if not asked:
                    self.dispatcher.wait(timeout_s=0.5)
                continue
            finished = self.dispatcher.wait()
            with self.node_lock.shared():
                for done in finished:
                    self._finish_measured(done)
            self._stop_if_too_many_failed()

    # -- second looks ------------------------------------------------------------------------

    def second_looks(self, on_owed: Callable[[str, Sequence[optuna.trial.FrozenTrial]], object]
                     | None = None) -> int:
        """Measure once more, on each farm device, the trials still owed a second look
        (:func:`dse.search.second_looks.pending_second_looks`), each as a new trial recorded as
        any other; the number measured. ``on_owed`` is told each device's owed trials before
        they are measured. Interrupts and errors as in :meth:`run`."""
        limit = self.measurement.second_looks
        with self._guarded() as interrupts:
            with self.node_lock.shared():
                owed = {name: trials for name, search in self.searches.items()
                        if name not in self.evaluated
                        and (trials := pending_second_looks(
                            search.study, self.objectives, limit,
                            self.measurement.second_looks_near_front))}
            if not owed:
                return 0
            self.dispatcher.start()
            for name, trials in owed.items():
                if on_owed is not None:
                    on_owed(name, trials)
                for first in trials:
                    self._submit_second_look(self.searches[name], first)
            return self._measure_second_looks(interrupts)

    def _measure_second_looks(self, interrupts: StickyInterrupt) -> int:
        measured = 0
        while self.pending:
            interrupts.check()
            self.lease_check()
            finished = self.dispatcher.wait()
            with self.node_lock.shared():
                for done in finished:
                    self._finish_measured(done)
                    measured += 1
        return measured

    def _submit_second_look(self, search: DeviceSearch, first: optuna.trial.FrozenTrial) -> None:
        """A new trial of ``first``'s candidate, handed to the farm: created RUNNING with its
        parameters (not through the sampler, which has nothing to choose), recorded as this
        run's in one step."""
        import optuna

        template = optuna.trial.create_trial(
            state=optuna.trial.TrialState.RUNNING, params=first.params,
            distributions=first.distributions,
            user_attrs={TrialAttr.SECOND_LOOK_OF: first.number})
        study = search.study
        with self._interrupts.deferred():
            # Optuna's own storage call, as Study.enqueue_trial makes it (with a WAITING trial).
            trial_id = study._storage.create_new_trial(study._study_id, template_trial=template)
            trial = optuna.trial.Trial(study, trial_id)
            self.asked.setdefault(search.profile.name, set()).add(trial.number)
        candidate = Candidate.from_dict(dict(first.user_attrs[TrialAttr.CANDIDATE]))
        trial.set_user_attr(TrialAttr.CANDIDATE, candidate.to_dict())
        trial.set_user_attr(TrialAttr.CANDIDATE_ID, candidate.candidate_id)
        key = next(self._keys)
        clean = (first.user_attrs.get(TrialAttr.MEASUREMENT_QUALITY) == "ok"
                 and first.values is not None)
        self.pending[key] = _Pending(search.profile.name, trial, candidate, first.number,
                                     tuple(first.values) if clean else None)
        self.dispatcher.submit(Job(key, candidate, self.space.training, self.measurement,
                                   self.experiment.spec.budget.trial_timeout_s))

    def _open_searches(self) -> list[DeviceSearch]:
        """The profiles whose budget is still open: fewer distinct candidates measured than
        budget.trials, and a sampler that still finds new ones (or a measurement in flight)."""
        budget = self.experiment.spec.budget.trials
        return [s for s in self.searches.values() if s.completed < budget
                and (not s.exhausted or self._in_flight(s))]

    def _in_flight(self, search: DeviceSearch) -> bool:
        return any(p.profile == search.profile.name for p in self.pending.values())

    def exhausted_profiles(self) -> list[str]:
        """Profiles whose search stopped short of its budget because the sampler proposed only
        candidates already measured, many times in a row (see DeviceSearch.exhausted)."""
        budget = self.experiment.spec.budget.trials
        return [name for name, s in self.searches.items()
                if s.exhausted and s.completed < budget]

    def _stop_if_too_many_failed(self) -> None:
        """DseError naming the reason in full when failures stop the run (FailureStops): the
        first candidates of the run all failing alike, a device whose every proposed candidate
        failed, or budget.max_failed failures while some budget is still open."""
        self.stops.check(
            [s.profile.name for s in self.searches.values()
             if s.exhausted and s.completed == 0 and not self._in_flight(s)],
            bool(self._open_searches()), sum(s.completed for s in self.searches.values()),
            self.experiment.spec.budget.trials * len(self.searches))

    def _running_here(self) -> dict[str, list[tuple[optuna.trial.Trial, bool]]]:
        """This run's trials still RUNNING, by profile, each with whether it had its candidate:
        those in flight, and any an interrupt caught between their creation and their
        hand-over to a device."""
        import optuna

        running: dict[str, list[tuple[optuna.trial.Trial, bool]]] = {}
        for profile, numbers in self.asked.items():
            study = self.searches[profile].study
            for frozen in study.get_trials(deepcopy=False,
                                           states=(optuna.trial.TrialState.RUNNING,)):
                if frozen.number in numbers:
                    # A live handle on a stored trial, by its storage id (Optuna's own way in).
                    running.setdefault(profile, []).append(
                        (optuna.trial.Trial(study, frozen._trial_id),
                         TrialAttr.CANDIDATE in frozen.user_attrs))
        return running

    def _abandon(self, exc: BaseException) -> None:
        """Leave every study consistent, nothing half-written, and say what happened."""
        from optuna.exceptions import StorageInternalError
        from optuna.trial import TrialState
        from sqlalchemy.exc import SQLAlchemyError

        self.dispatcher.cancel()
        interrupted = isinstance(exc, KeyboardInterrupt)
        if isinstance(exc, Terminated):
            reason = (f"stopped by {signal.Signals(exc.signum).name} before the measurement "
                      f"finished")
        elif interrupted:
            reason = "interrupted before the measurement finished"
        else:
            reason = f"dse error: {type(exc).__name__}: {exc}"
        try:
            for profile, trials in self._running_here().items():
                study = self.searches[profile].study
                for trial, has_candidate in trials:
                    trial.set_user_attr(TrialAttr.STATUS, "failed")
                    if has_candidate:  # stopped mid-measurement: the next run measures it again
                        trial.set_user_attr(TrialAttr.INTERRUPTED, True)
                        trial.set_user_attr(TrialAttr.REASON, reason)
                    else:  # stopped before it had a candidate: nothing to measure again
                        trial.set_user_attr(TrialAttr.REASON,
                                            f"{reason.split(' before ')[0]} before a "
                                            f"candidate was chosen")
                    study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        except (StorageInternalError, SQLAlchemyError, OSError):
            # The study cannot be written any more (a full disk): leave the trials RUNNING,
            # as a killed driver does; the next run's recovery fails and re-queues them.
            # The error that stopped the run is raised by the caller.
            pass
        self.pending.clear()
        self.followers.clear()
