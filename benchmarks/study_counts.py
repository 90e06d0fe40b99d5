"""What the reliability benchmarks count in a study, by the rule ``budget.trials`` follows: the
budget counts distinct candidates measured. A trial whose candidate was measured before reuses
that result (``reused_from``) and a second look measures a counted candidate once more on purpose
(``second_look_of``): both complete, neither is a measurement the budget should have prevented.

A duplicate is a second measured trial of one candidate: what two drivers racing on one study, or
a driver killed between ask and tell and rerun, must never produce."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from optuna.trial import FrozenTrial, TrialState

from dse.core.trial_record import TrialAttr


def is_measurement(trial: FrozenTrial) -> bool:
    """A COMPLETE trial that measured its candidate for the budget (not a reuse, not a second
    look)."""
    return (trial.state == TrialState.COMPLETE and TrialAttr.REUSED_FROM not in trial.user_attrs
            and TrialAttr.SECOND_LOOK_OF not in trial.user_attrs)


def measured_candidates(trials: Iterable[FrozenTrial]) -> Counter[str]:
    """Measurements per candidate id."""
    return Counter(str(t.user_attrs.get(TrialAttr.CANDIDATE_ID)) for t in trials
                   if is_measurement(t))


def duplicates(measured: Counter[str]) -> int:
    """Measurements beyond the first of each candidate."""
    return sum(count - 1 for count in measured.values())
