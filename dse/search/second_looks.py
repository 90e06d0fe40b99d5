"""Second looks: at the end of a device's search, trials whose measurement was not clean
(``measurement_quality`` disturbed, unstable, underpowered or imprecise) measured once more.

A label keeps a trial off the front, and the other work that earned it the label (another job
on the machine, a burst of the hypervisor's neighbours) has often passed by the end of the
search, when an immediate re-measurement a second later could not escape it. Without a second
look, a candidate that happened to be timed during someone else's job is missing from that
run's front, and two runs of one campaign report different fronts for no property of the
candidates. A second look is a trial of its own, ``second_look_of`` naming the first; it is not
a distinct candidate (``budget.trials`` does not count it). A clean one competes for the front
in the first's place (:func:`dse.columns.competing_mask`).

Which trials, most promising first: those that no clean trial dominates on their (unclean)
values, then by how few clean trials dominate them, then by trial number; one per candidate, and
none for a candidate that already has a clean trial or a second look. At most
``measurement.second_looks`` per device, all told over every run of the campaign, so a resumed
run looks only at those still owed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from dse.columns import NON_OK_ON_FRONT_ATTR, SECOND_LOOK_COLUMN
from dse.metrics import Direction, metric

if TYPE_CHECKING:
    import optuna

def is_second_look(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether ``trial`` is a second look at another (its user attribute ``second_look_of``,
    :data:`dse.columns.SECOND_LOOK_COLUMN`, names the first)."""
    return SECOND_LOOK_COLUMN in trial.user_attrs


def pending_second_looks(study: optuna.Study, objectives: Sequence[str],
                         limit: int) -> list[optuna.trial.FrozenTrial]:
    """The trials of ``study`` still owed a second look (see the module), at most ``limit`` less
    the second looks already taken; none when the study lets unclean trials on the front."""
    if limit <= 0 or study.user_attrs.get(NON_OK_ON_FRONT_ATTR, False):
        return []
    trials = study.get_trials(deepcopy=False)
    # A second look an interrupt stopped is owed again; any other counts, whatever it found.
    taken = [t for t in trials if is_second_look(t) and not t.user_attrs.get("interrupted")]
    looked = {t.user_attrs[SECOND_LOOK_COLUMN] for t in taken}
    settled = {t.user_attrs.get("candidate_id") for t in trials if _measured(t, len(objectives))
               and t.user_attrs.get("measurement_quality") in (None, "ok")}
    settled |= {t.user_attrs.get("candidate_id") for t in taken}
    owed: dict[str, optuna.trial.FrozenTrial] = {}
    for trial in sorted(trials, key=lambda t: t.number):
        candidate = trial.user_attrs.get("candidate_id")
        if (_measured(trial, len(objectives)) and not is_second_look(trial)
                and trial.user_attrs.get("measurement_quality") not in (None, "ok")
                and trial.number not in looked and candidate not in settled
                and isinstance(trial.user_attrs.get("candidate"), dict)):
            owed.setdefault(str(candidate), trial)
    clean = [t for t in trials if _measured(t, len(objectives))
             and t.user_attrs.get("measurement_quality") == "ok"]
    beaten = _times_dominated(list(owed.values()), clean, objectives)
    ranked = sorted(owed.values(), key=lambda t: (beaten[t.number], t.number))
    return ranked[:max(0, limit - len(taken))]


def _measured(trial: optuna.trial.FrozenTrial, objectives: int) -> bool:
    """A trial that measured its candidate to values: complete, status ok, not a repeat of
    another trial's measurement, at fidelity full (a screen is only a first glance)."""
    from optuna.trial import TrialState

    attrs = trial.user_attrs
    return (trial.state == TrialState.COMPLETE and attrs.get("status") == "ok"
            and "reused_from" not in attrs and attrs.get("fidelity") != "screen"
            and trial.values is not None and len(trial.values) == objectives)


def _times_dominated(owed: Sequence[optuna.trial.FrozenTrial],
                     clean: Sequence[optuna.trial.FrozenTrial],
                     objectives: Sequence[str]) -> dict[int, int]:
    """For each owed trial, how many clean trials dominate its values (smaller: more likely a
    clean measurement of it changes the front)."""
    if not owed:
        return {}
    signs = np.array([-1.0 if metric(name).direction is Direction.MAXIMIZE else 1.0
                      for name in objectives])
    mine = np.array([t.values for t in owed], dtype=np.float64) * signs
    if not clean:
        return {t.number: 0 for t in owed}
    theirs = np.array([t.values for t in clean], dtype=np.float64) * signs
    # theirs[j] dominates mine[i]: no worse anywhere and better somewhere.
    no_worse = (theirs[None, :, :] <= mine[:, None, :]).all(axis=2)
    better = (theirs[None, :, :] < mine[:, None, :]).any(axis=2)
    counts = (no_worse & better).sum(axis=1)
    return {t.number: int(count) for t, count in zip(owed, counts, strict=True)}
