"""Second looks: at the end of a device's search, trials whose measurement was not clean
(``measurement_quality`` disturbed, unstable, underpowered or imprecise) measured once more.

A label keeps a trial off the front, and the other work that earned it the label (another job
on the machine, a burst of the hypervisor's neighbours) has often passed by the end of the
search, when an immediate re-measurement a second later could not escape it. Without a second
look, a candidate that happened to be timed during someone else's job is missing from that
run's front, and two runs of one campaign report different fronts for no property of the
candidates. A second look is a trial of its own, ``second_look_of`` naming the first; it is not
a distinct candidate (``budget.trials`` does not count it). A clean one competes for the front
in the first's place (:func:`dse.core.columns.competing_mask`).

Which trials, most promising first: those that no clean trial dominates on their (unclean)
values, then by how few clean trials dominate them, then by trial number; one per candidate, and
none for a candidate that already has a clean trial or a second look.

Clean trials near the front get one too, after those (``measurement.second_looks_near_front``):
a virtual machine or its host can run a whole window slow — for seconds to minutes, by a third
or more, with no other process to see and a tight interval (docs/benchmarks.md, "The VM's
speed states") — so a candidate timed in a slow spell reads slower than it runs and drops off
a front it belongs to, in one run and not the next. "Near": it would be on the front of the
clean trials were its speed-bound objectives (:func:`speed_bound`) that factor better; those
the front dominates go first (their look is what moves a point onto the front), its own points
last. Of a candidate's two clean looks the faster competes (:func:`look_is_slower`): a slow
spell stalls the candidate from outside, as other work does, and every candidate near the front gets the
same two chances. The slower stays in the tables, marked
(:attr:`dse.core.trial_record.TrialAttr.SLOWER_THAN_FIRST` on a look that lost).

At most ``measurement.second_looks`` per device, all told over every run of the campaign, so a
resumed run looks only at those still owed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from dse.core import Direction, StudyAttr, TrialAttr, blocks_front, metric

# Units of the metrics a slow spell of the machine scales: times, rates, energy per call.
_SPEED_UNITS = frozenset({"ms", "s", "mJ"})

if TYPE_CHECKING:
    import optuna

def is_second_look(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether ``trial`` is a second look at another (its user attribute ``second_look_of``,
    :attr:`dse.core.trial_record.TrialAttr.SECOND_LOOK_OF`, names the first)."""
    return TrialAttr.SECOND_LOOK_OF in trial.user_attrs


def speed_bound(name: str) -> bool:
    """Whether metric ``name`` moves with the machine's speed: a time, a rate or an energy per
    call (latency, throughput, energy), not accuracy, memory or size."""
    unit = metric(name).unit
    return unit in _SPEED_UNITS or unit.endswith("/s")


def look_is_slower(look: Sequence[float], first: Sequence[float],
                   objectives: Sequence[str]) -> bool:
    """Whether a second look measured its candidate slower than the first look did: the mean,
    over the speed-bound objectives with positive values in both, of the log ratio, signed so
    that better is positive, is negative. A tie is not slower (the later look competes)."""
    gains = [(1.0 if metric(name).direction is Direction.MAXIMIZE else -1.0)
             * float(np.log(new / old))
             for name, new, old in zip(objectives, look, first, strict=True)
             if speed_bound(name) and new > 0 and old > 0]
    return bool(gains) and float(np.mean(gains)) < 0


def outranked(trials: Sequence[optuna.trial.FrozenTrial],
              non_ok_on_front: bool = False) -> set[int]:
    """Numbers of the trials that compete for no front because of a second look: a first look
    an ok second look measured again and did not lose to; a second look that was slower than
    its clean first (:attr:`dse.core.trial_record.TrialAttr.SLOWER_THAN_FIRST`), or labelled
    where its first was measured cleanly (``non_ok_on_front``: labels count as clean). The
    stored-trial form of :func:`dse.core.columns.competing_mask`'s rule."""
    clean = {trial.number for trial in trials
             if trial.user_attrs.get(TrialAttr.STATUS) == "ok"
             and not blocks_front(trial.user_attrs.get(TrialAttr.MEASUREMENT_QUALITY),
                                  non_ok_on_front)}
    out: set[int] = set()
    for trial in trials:
        attrs = trial.user_attrs
        if TrialAttr.SECOND_LOOK_OF in attrs and attrs.get(TrialAttr.STATUS) == "ok":
            first = int(attrs[TrialAttr.SECOND_LOOK_OF])
            lost = attrs.get(TrialAttr.SLOWER_THAN_FIRST) or (trial.number not in clean
                                                               and first in clean)
            out.add(trial.number if lost else first)
    return out


def pending_second_looks(study: optuna.Study, objectives: Sequence[str], limit: int,
                         near_front: float = 1.0) -> list[optuna.trial.FrozenTrial]:
    """The trials of ``study`` still owed a second look (see the module), at most ``limit`` less
    the second looks already taken: those not measured cleanly first, then the clean ones
    within ``near_front`` of the front (1: none); none when the study lets unclean trials on the
    front."""
    if limit <= 0 or study.user_attrs.get(StudyAttr.NON_OK_ON_FRONT, False):
        return []
    trials = study.get_trials(deepcopy=False)
    # A second look an interrupt stopped is owed again; any other counts, whatever it found.
    taken = [t for t in trials if is_second_look(t) and not t.user_attrs.get(TrialAttr.INTERRUPTED)]
    looked = {t.user_attrs[TrialAttr.SECOND_LOOK_OF] for t in taken}
    measured = [t for t in trials if _measured(t, len(objectives)) and not is_second_look(t)
                and isinstance(t.user_attrs.get(TrialAttr.CANDIDATE), dict)]
    clean = [t for t in measured if t.user_attrs.get(TrialAttr.MEASUREMENT_QUALITY) == "ok"]
    settled = {t.user_attrs.get(TrialAttr.CANDIDATE_ID) for t in clean}
    settled |= {t.user_attrs.get(TrialAttr.CANDIDATE_ID) for t in taken}
    owed: dict[str, optuna.trial.FrozenTrial] = {}
    for trial in measured:
        if (trial.user_attrs.get(TrialAttr.MEASUREMENT_QUALITY) not in (None, "ok")
                and trial.number not in looked
                and trial.user_attrs.get(TrialAttr.CANDIDATE_ID) not in settled):
            owed.setdefault(str(trial.user_attrs.get(TrialAttr.CANDIDATE_ID)), trial)
    beaten = _times_dominated(list(owed.values()), clean, objectives)
    ranked = sorted(owed.values(), key=lambda t: (beaten[t.number], t.number))
    ranked += _near_front(clean, objectives, near_front,
                          {t.user_attrs.get(TrialAttr.CANDIDATE_ID) for t in taken})
    return ranked[:max(0, limit - len(taken))]


def _near_front(clean: Sequence[optuna.trial.FrozenTrial], objectives: Sequence[str],
                factor: float, looked: set[object]) -> list[optuna.trial.FrozenTrial]:
    """The clean trials that would be on the clean trials' front were their speed-bound
    objectives ``factor`` times better, one per candidate not looked at yet: those dominated
    first (the fewest dominating first), the front's own points last, then by number."""
    if factor <= 1.0 or not clean:
        return []
    firsts: dict[object, optuna.trial.FrozenTrial] = {}
    for trial in clean:
        firsts.setdefault(trial.user_attrs.get(TrialAttr.CANDIDATE_ID), trial)
    chosen = [t for key, t in firsts.items() if key not in looked]
    if not chosen:
        return []
    signs = np.array([-1.0 if metric(name).direction is Direction.MAXIMIZE else 1.0
                      for name in objectives])
    # Better by the factor: a minimised value divided by it, a maximised one multiplied.
    scale = np.array([factor ** -s if speed_bound(name) else 1.0
                      for name, s in zip(objectives, signs, strict=True)])
    mine = np.array([t.values for t in chosen], dtype=np.float64) * scale * signs
    theirs = np.array([t.values for t in clean], dtype=np.float64) * signs
    no_worse = (theirs[None, :, :] <= mine[:, None, :]).all(axis=2)
    better = (theirs[None, :, :] < mine[:, None, :]).any(axis=2)
    near = [t for t, beaten in zip(chosen, (no_worse & better).any(axis=1), strict=True)
            if not beaten]
    counts = _times_dominated(near, clean, objectives)
    # A look moves a point onto the front when its first was slow: the trials the front
    # dominates go first, the fewest dominating first; the front's own points, whose look can
    # only make them better, after them.
    return sorted(near, key=lambda t: (counts[t.number] == 0, counts[t.number], t.number))


def _measured(trial: optuna.trial.FrozenTrial, objectives: int) -> bool:
    """A trial that measured its candidate to values: complete, status ok, not a repeat of
    another trial's measurement, at fidelity full (a screen is only a first glance)."""
    from optuna.trial import TrialState

    attrs = trial.user_attrs
    return (trial.state == TrialState.COMPLETE and attrs.get(TrialAttr.STATUS) == "ok"
            and TrialAttr.REUSED_FROM not in attrs and attrs.get(TrialAttr.FIDELITY) != "screen"
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
