"""One device profile's study as the search loop drives it: what it has learnt (earlier results
that an identical candidate reuses, failures of an architecture that its every candidate reuses,
the fully measured front that screening compares with), learnt again from the stored trials when
a run resumes, and each result recorded on its trial and told to Optuna."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dse.core import Candidate, TrialAttr, blocks_front, current_metric_keys, is_measured

if TYPE_CHECKING:
    from collections.abc import Sequence

    import optuna

    from dse.search.screening import FrontTracker
    from dse.spec import ConstraintSpec, HardwareProfile


#: Proposals in a row of candidates already measured after which a profile's search stops (its
#: space is measured in full, or all its sampler still proposes is): 5 per distinct candidate
#: known, at least EXHAUSTED_MIN, at most EXHAUSTED_AFTER. Uniform sampling that has seen N
#: candidates misses one still unmeasured R times in a row with odds of about exp(-R / N): under
#: 1 % at 5 N. Each reuse costs a few study writes, so the cap keeps a large space's end short.
EXHAUSTED_AFTER = 200
EXHAUSTED_MIN = 50


def repeats_to_stop(known: int) -> int:
    """Proposals in a row of measured candidates that end a search which knows ``known``."""
    return min(EXHAUSTED_AFTER, max(EXHAUSTED_MIN, 5 * known))


def counts_toward_budget(trial: optuna.trial.FrozenTrial) -> bool:
    """A distinct candidate measured to an ok result: what ``budget.trials`` counts (a trial that
    reused an earlier result is not one). Read by the loop on resume and by the resume notice."""
    from optuna.trial import TrialState

    # A second look (dse.search.second_looks) measures a candidate already counted.
    return (trial.state == TrialState.COMPLETE and TrialAttr.REUSED_FROM not in trial.user_attrs
            and TrialAttr.SECOND_LOOK_OF not in trial.user_attrs)


#: ``failure_scope`` of a failure that is the architecture's (the worker's ArchFailure: the model
#: failed to build, score or train before any backend touched it).
ARCH_SCOPE = "arch"


@dataclass
class KnownResult:
    """An earlier result that an identical candidate reuses instead of being measured again;
    ``scope`` ``"arch"`` when it is a failure of the architecture, which every candidate of the
    same architecture reuses too."""

    number: int
    status: str
    reason: str
    metrics: dict[str, float]
    missing: dict[str, str]
    quality: str | None = None
    scope: str | None = None


class DeviceSearch:
    """The study of one device profile and what it has learnt so far.

    ``objectives`` and ``constraints`` are the search space's; ``non_ok_on_front``
    (``measurement.non_ok_on_front``) whether a measurement that is not clean may be on the
    front, and so screen other candidates out.
    """

    def __init__(self, profile: HardwareProfile, study: optuna.Study,
                 tracker: FrontTracker | None, objectives: Sequence[str],
                 constraints: Sequence[ConstraintSpec], non_ok_on_front: bool,
                 space_size: Callable[[], int | None] = lambda: None) -> None:
        self.profile = profile
        self.study = study
        # Distinct candidates measured to an ok result: what budget.trials counts. A proposal
        # of a candidate already measured (reused) costs no budget.
        self.completed = 0
        self.known: dict[str, KnownResult] = {}
        # Failures of an architecture (by Candidate.arch_id), deterministic whatever the backend,
        # precision or batch: its other candidates are answered from them, never measured.
        self.arch_failures: dict[str, KnownResult] = {}
        # Proposals in a row that brought no new candidate; at EXHAUSTED_AFTER the sampler is
        # taken to have nothing new to offer (a small space measured in full) and asking stops.
        self.repeats_in_a_row = 0
        # How many distinct candidates the device's space holds (None: too many to count, or
        # continuous); asked only once a repeat happens, and then kept.
        self._space_size = space_size
        self._size: int | None = None
        self._size_known = False
        # The fully measured front that screening compares with (None: no screening here).
        self.tracker = tracker
        self.objectives = list(objectives)
        self.constraints = list(constraints)
        self.non_ok_on_front = non_ok_on_front

    @property
    def exhausted(self) -> bool:
        """The space holds nothing new the sampler will find: every candidate of it has a result
        (a repeat was just proposed), or the sampler proposed only candidates already measured
        :func:`repeats_to_stop` times in a row."""
        if self.repeats_in_a_row == 0:
            return False
        if not self._size_known:
            self._size, self._size_known = self._space_size(), True
        if self._size is not None and len(self.known) >= self._size:
            return True
        return self.repeats_in_a_row >= repeats_to_stop(len(self.known))

    def answer(self, candidate: Candidate) -> KnownResult | None:
        """The earlier result ``candidate`` reuses: its own, else its architecture's failure;
        None when it must be measured. An architecture's answer is remembered as the
        candidate's own, so the space's count of known candidates grows."""
        known = self.known.get(candidate.candidate_id)
        if known is None:
            known = self.arch_failures.get(candidate.arch_id)
            if known is not None:
                self.known[candidate.candidate_id] = known
        return known

    def learn(self, candidate: Candidate, known: KnownResult) -> None:
        """Remember a measured result of ``candidate`` (and of its architecture, when it is the
        architecture's failure)."""
        self.known[candidate.candidate_id] = known
        if known.scope == ARCH_SCOPE and known.status != "ok":
            self.arch_failures.setdefault(candidate.arch_id, known)

    def front_eligible(self, quality: str | None) -> bool:
        """Whether a measurement of this quality may be on the front (and so screen others)."""
        return not blocks_front(quality, self.non_ok_on_front)

    def recover(self) -> None:
        """Learn earlier results; fail trials a dead driver left running and re-queue them once,
        and re-queue once the candidates an interrupt or a crash stopped mid-measurement."""
        import optuna
        from optuna.trial import TrialState

        study = self.study
        for frozen in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
            attrs = frozen.user_attrs
            if frozen.state == TrialState.RUNNING:
                trial = optuna.trial.Trial(study, frozen._trial_id)
                trial.set_user_attr(TrialAttr.STATUS, "failed")
                trial.set_user_attr(TrialAttr.REASON, "the driver stopped while this trial ran")
                trial.set_user_attr(TrialAttr.INTERRUPTED, True)
                study.tell(frozen.number, state=TrialState.FAIL)
                _requeue_once(study, frozen)
            elif attrs.get(TrialAttr.INTERRUPTED):
                # Never measured to the end: no result to reuse, so measure it again (once).
                _requeue_once(study, frozen)
            elif TrialAttr.CANDIDATE_ID in attrs and TrialAttr.STATUS in attrs:
                # A trial written before a metric was renamed holds its former name.
                metrics = current_metric_keys(attrs.get(TrialAttr.METRICS) or {})
                known = self.known.get(attrs[TrialAttr.CANDIDATE_ID])
                # A later success replaces an earlier failure of the same candidate.
                if known is None or (known.status != "ok" and attrs[TrialAttr.STATUS] == "ok"):
                    self.known[attrs[TrialAttr.CANDIDATE_ID]] = KnownResult(
                        frozen.number, attrs[TrialAttr.STATUS], attrs.get(TrialAttr.REASON, ""),
                        metrics, current_metric_keys(attrs.get(TrialAttr.MISSING) or {}),
                        attrs.get(TrialAttr.MEASUREMENT_QUALITY),
                        attrs.get(TrialAttr.FAILURE_SCOPE))
                self._learn_arch_failure(frozen)
                if (self.tracker is not None and frozen.state == TrialState.COMPLETE
                        and attrs[TrialAttr.STATUS] == "ok" and TrialAttr.REUSED_FROM not in attrs
                        and attrs.get(TrialAttr.FIDELITY) != "screen"
                        and self.front_eligible(attrs.get(TrialAttr.MEASUREMENT_QUALITY))):
                    self.tracker.add(frozen.number, metrics)
        self.completed = sum(counts_toward_budget(t) for t in study.get_trials(deepcopy=False))

    def _learn_arch_failure(self, frozen: optuna.trial.FrozenTrial) -> None:
        """An architecture's failure a stored trial recorded (measured, or answered from the one
        that was: ``reused_from`` names it)."""
        attrs = frozen.user_attrs
        if (attrs.get(TrialAttr.FAILURE_SCOPE) != ARCH_SCOPE or attrs[TrialAttr.STATUS] == "ok"
                or not isinstance(attrs.get(TrialAttr.CANDIDATE), dict)):
            return
        arch_id = Candidate(**attrs[TrialAttr.CANDIDATE]).arch_id
        if arch_id not in self.arch_failures:
            self.arch_failures[arch_id] = KnownResult(
                int(attrs.get(TrialAttr.REUSED_FROM, frozen.number)), attrs[TrialAttr.STATUS],
                attrs.get(TrialAttr.REASON, ""),
                current_metric_keys(attrs.get(TrialAttr.METRICS) or {}),
                current_metric_keys(attrs.get(TrialAttr.MISSING) or {}), None, ARCH_SCOPE)

    def record(self, trial: optuna.Trial, status: str, reason: str, metrics: dict[str, float],
               missing: dict[str, str], quality: str | None) -> tuple[str, str]:
        """Store the result on the trial and tell Optuna; returns the final status and reason
        (an ok measurement without a value for an objective or constrained metric becomes
        failed; a metric's defined infinitely bad value, as a proxy's -inf, is a value)."""
        from optuna.trial import TrialState

        if status == "ok":
            absent = [m for m in self.objectives + [c.metric for c in self.constraints]
                      if not is_measured(m, metrics.get(m, math.nan))]
            if absent:
                status = "failed"
                reason = "; ".join(f"{m} not measured: {missing.get(m, 'no value')}"
                                   for m in absent)
        trial.set_user_attr(TrialAttr.STATUS, status)
        trial.set_user_attr(TrialAttr.REASON, reason)
        if status == "ok" and quality is not None:
            # A measurement that is not clean stays in the study and the tables, shown apart,
            # and (unless measurement.non_ok_on_front) off the reported front.
            trial.set_user_attr(TrialAttr.MEASUREMENT_QUALITY, quality)
        trial.set_user_attr(TrialAttr.METRICS, metrics)
        trial.set_user_attr(TrialAttr.MISSING, missing)
        if status != "ok":
            self.study.tell(trial, state=TrialState.FAIL)
            return status, reason
        for constraint in self.constraints:
            trial.set_constraint(str(constraint), constraint.violation(metrics[constraint.metric]))
        self.study.tell(trial, [metrics[m] for m in self.objectives])
        return status, reason


def _requeue_once(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
    """Queue the trial's parameters again, unless it is itself a re-queue or was re-queued; never
    a second look (the second-look round owes it again: dse.search.second_looks)."""
    if (TrialAttr.REQUEUED_FROM in frozen.user_attrs
            or TrialAttr.SECOND_LOOK_OF in frozen.user_attrs or not frozen.params):
        return
    requeued = {t.user_attrs.get(TrialAttr.REQUEUED_FROM) for t in study.get_trials(deepcopy=False)}
    if frozen.number not in requeued:
        study.enqueue_trial(frozen.params, user_attrs={TrialAttr.REQUEUED_FROM: frozen.number})
