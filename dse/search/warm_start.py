"""Warm start across devices: a device's new study begins with another device's Pareto front.

When a campaign gains a device (it is rerun with one more profile), the new profile's study is
empty while another profile's study in the same storage has results. The configurations on that
study's feasible Pareto front are a better first guess than the sampler's random start-up trials:
what is fast and accurate on one device is often so on another. They are queued
(``study.enqueue_trial``) right after the baseline, each with the user attribute
``warm_start_from`` (``{"study", "device", "trial"}``), so the sampler learns from them as from
any other trial.

Only what the new device can run is queued, planned by the baseline's own machinery
(:func:`dse.search.baseline_plan.plan_baseline`): the space's values and conditions, the profile's
backends and precisions and, for a device the farm measures, the capability table. What is left
out is logged with the reason and kept in the study attribute ``warm_start``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError

from dse.core import Candidate, SpecError, StudyAttr, TrialAttr, current_constraint_text, current_metric_name
from dse.search.baseline_plan import baseline_problems, plan_baseline
from dse.search.pareto import pareto_mask
from dse.search.second_looks import outranked
from dse.spec import BaselineSpec, HardwareProfile, SearchSpace, WarmStartSpec

if TYPE_CHECKING:
    import optuna

    from dse.spec import Experiment

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Seed:
    """One front configuration of the source study, as Optuna parameters of the new study."""

    params: dict[str, Any]
    candidate_id: str
    source_trial: int


@dataclass(frozen=True)
class WarmStartPlan:
    """What a study is seeded with: ``seeds`` from the study ``source`` (of device
    ``source_device``), and one line per front configuration ``skipped`` with why. Without a
    source (``source`` None) ``note`` says why nothing is seeded."""

    source: str | None
    source_device: str | None = None
    seeds: tuple[Seed, ...] = ()
    skipped: tuple[str, ...] = ()
    note: str = ""
    front_size: int = 0

    def record(self) -> dict[str, Any]:
        """The plan as the study attribute ``warm_start`` keeps it."""
        return {"source": self.source, "source_device": self.source_device,
                "front_size": self.front_size,
                "seeded_from_trials": [seed.source_trial for seed in self.seeds],
                "skipped": list(self.skipped), "note": self.note}


@dataclass
class _Source:
    study: optuna.Study
    device: str | None
    completed: list[optuna.trial.FrozenTrial] = field(default_factory=list)


def seed_cap(setting: WarmStartSpec, budget: int) -> int:
    """Most seeds per study: ``max_trials`` (at most the budget), else half the budget, so the
    sampler keeps at least half of it to explore the new device on its own."""
    return min(setting.max_trials, budget) if setting.max_trials is not None else budget // 2


def warm_start_plan(sources: Sequence[optuna.Study], space: SearchSpace, profile: HardwareProfile,
                    setting: WarmStartSpec, budget: int, *, capabilities: bool = True,
                    exclude: Collection[str] = ()) -> WarmStartPlan:
    """The seeds of ``profile``'s new study, taken from one of ``sources`` (the campaign's other
    studies in the same storage, each with its ``device_profile`` attribute).

    The source is the study of device ``setting.source`` or, when that is None (``auto``), the
    study with the most completed trials (ties: the first by name); a study of ``profile``
    itself is never one. Its feasible Pareto front (trials COMPLETE, status ok, constraints met,
    not a reuse) is thinned, evenly along the first objective, to :func:`seed_cap` configurations
    this device can run; candidate ids in ``exclude`` (the baseline) are not seeded again.
    ``capabilities`` as the search loop offers the profile's candidates (false where an
    evaluator or a replay table measures them).
    """
    if not setting.enabled:
        return WarmStartPlan(None, note="warm start is off")
    cap = seed_cap(setting, budget)
    if cap <= 0:
        return WarmStartPlan(None, note=f"a budget of {budget} trials leaves no room for seeds")
    source = _choose(sources, profile.name, setting.source)
    if isinstance(source, str):
        return WarmStartPlan(None, note=source)
    front = _front(source.study, source.completed)
    seeds: list[Seed] = []
    skipped: list[str] = []
    seen = set(exclude)
    for trial in front:
        where = f"{source.study.study_name}#{trial.number}"
        seed, why = _plan_seed(trial, space, profile, capabilities, where)
        if seed is None:
            skipped.append(f"{where}: {why}")
        elif seed.candidate_id in seen:
            skipped.append(f"{where}: already queued (the baseline, or an equal configuration)")
        else:
            seen.add(seed.candidate_id)
            seeds.append(seed)
    chosen = _spread(seeds, cap)
    left_out = len(seeds) - len(chosen)
    if left_out:
        skipped.append(f"{left_out} more front configurations: at most {cap} seeds "
                       f"(search.warm_start.max_trials, default half the budget)")
    return WarmStartPlan(source.study.study_name, source.device, tuple(chosen), tuple(skipped),
                         f"{len(chosen)} of {len(front)} front configurations seeded",
                         len(front))


def seed_new_studies(experiment: Experiment, studies: Mapping[str, optuna.Study],
                     evaluated: Collection[str]) -> dict[str, WarmStartPlan]:
    """Seed each of ``studies`` (profile -> study) that has no trial yet but its queued ones,
    from the campaign's other studies in the same storage; returns the plans, by profile.

    The plan is kept in the study's ``warm_start`` attribute. A study that has begun is left as
    it is; a rerun before it began (a crash right after the queueing) queues only what is not
    queued yet.
    """
    from optuna.trial import TrialState

    setting = experiment.spec.search.warm_start
    budget = experiment.spec.budget.trials
    others = _campaign_studies(experiment, studies)
    plans: dict[str, WarmStartPlan] = {}
    for profile in experiment.devices:
        study = studies[profile.name]
        trials = study.get_trials(deepcopy=False)
        if any(t.state != TrialState.WAITING for t in trials):
            continue
        queued = {_source_key(t.user_attrs.get(TrialAttr.WARM_START_FROM)) for t in trials}
        baseline = study.user_attrs.get(StudyAttr.BASELINE_CANDIDATE_ID)
        sources = [s for s in others if s.study_name != study.study_name]
        plan = warm_start_plan(sources, experiment.space, profile, setting, budget,
                               capabilities=profile.name not in evaluated,
                               exclude=[] if baseline is None else [str(baseline)])
        for seed in plan.seeds:
            origin = {"study": plan.source, "device": plan.source_device,
                      "trial": seed.source_trial}
            if _source_key(origin) not in queued:
                study.enqueue_trial(seed.params, user_attrs={TrialAttr.WARM_START_FROM: origin})
        study.set_user_attr(StudyAttr.WARM_START, plan.record())
        _log(study.study_name, plan)
        plans[profile.name] = plan
    return plans


def _source_key(origin: object) -> tuple[str, int] | None:
    if isinstance(origin, Mapping) and "study" in origin and "trial" in origin:
        return str(origin["study"]), int(origin["trial"])
    return None


def _log(name: str, plan: WarmStartPlan) -> None:
    if plan.source is None:
        log.info("warm start of %s: nothing seeded: %s", name, plan.note)
        return
    log.info("warm start of %s from %s (device %s): %s", name, plan.source, plan.source_device,
             plan.note)
    for line in plan.skipped:
        log.info("warm start of %s: skipped %s", name, line)


def _campaign_studies(experiment: Experiment,
                      opened: Mapping[str, optuna.Study]) -> list[optuna.Study]:
    """Every study of the campaign in its storage: those just opened, and those of devices the
    experiment no longer lists."""
    import optuna

    chosen = experiment.storage
    storage = chosen.for_writing()
    mine = {study.study_name: study for study in opened.values()}
    campaign = experiment.name
    for name in chosen.guarded(lambda: optuna.study.get_all_study_names(storage)):
        if name not in mine and (name == campaign or name.startswith(f"{campaign}@")):
            mine[name] = optuna.load_study(study_name=name, storage=storage)
    return [mine[name] for name in sorted(mine)]


def _choose(sources: Sequence[optuna.Study], profile: str,
            wanted: str | None) -> _Source | str:
    """The source study, or why there is none."""
    from optuna.trial import TrialState

    if wanted == profile:
        return f"search.warm_start.from names this device ({profile!r}) itself"
    found = []
    for study in sources:
        device = study.user_attrs.get(StudyAttr.DEVICE_PROFILE)
        device = None if device is None else str(device)
        if device == profile or (wanted is not None and device != wanted):
            continue
        completed = [t for t in study.get_trials(deepcopy=False)
                     if t.state == TrialState.COMPLETE]
        if completed:
            found.append(_Source(study, device, completed))
    if not found:
        which = f"device {wanted!r}" if wanted is not None else "another device"
        return f"no study of {which} has completed trials in this campaign's storage"
    # Most completed first; ties by name, so the choice does not depend on storage order.
    found.sort(key=lambda s: (-len(s.completed), s.study.study_name))
    return found[0]


def _front(study: optuna.Study,
           completed: Sequence[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """The study's feasible Pareto front, ordered along its first objective (best first)."""
    # A study written before a metric was renamed names it by its former name.
    objectives = [current_metric_name(str(name))
                  for name in study.user_attrs.get(StudyAttr.OBJECTIVES, [])]
    declared = [current_constraint_text(str(text))
                for text in study.user_attrs.get(StudyAttr.CONSTRAINTS, [])]
    # Of a trial and its second look, one competes (dse.search.second_looks.outranked).
    looked = outranked(completed)
    competing = [t for t in completed
                 if t.user_attrs.get(TrialAttr.STATUS) == "ok"
                 and TrialAttr.REUSED_FROM not in t.user_attrs
                 and t.number not in looked and t.values is not None and len(t.values) == len(objectives)
                 and TrialAttr.CANDIDATE in t.user_attrs and _feasible(t, declared)]
    if not competing or not objectives:
        return []
    values = np.array([t.values for t in competing], dtype=np.float64)
    on_front = [t for t, keep in zip(competing, pareto_mask(values, objectives), strict=True)
                if keep]
    sign = -1.0 if study.directions[0].name == "MAXIMIZE" else 1.0
    return sorted(on_front, key=lambda t: (sign * t.values[0], t.number))


def _feasible(trial: optuna.trial.FrozenTrial, declared: Sequence[str]) -> bool:
    """Every declared constraint recorded and met (the results table's rule)."""
    constraints = {current_constraint_text(str(k)): float(v) for k, v in trial.constraints.items()}
    return all(text in constraints for text in declared) and all(
        value <= 0 for value in constraints.values())


def _plan_seed(trial: optuna.trial.FrozenTrial, space: SearchSpace, profile: HardwareProfile,
               capabilities: bool, where: str) -> tuple[Seed | None, str]:
    """The trial's configuration as a seed of ``profile``'s study, or why it cannot be one."""
    candidate = Candidate.from_dict(dict(trial.user_attrs[TrialAttr.CANDIDATE]))
    try:
        point = BaselineSpec.model_validate({
            "arch": candidate.arch, "backend": candidate.backend or None,
            "precision": candidate.precision or None,
            "batch_size": candidate.batch_size or None, "knobs": candidate.knobs,
            "params": candidate.params})
    except ValidationError as exc:  # a value this version of dse cannot hold
        return None, f"not a configuration of this space: {exc.errors()[0]['msg']}"
    problems = baseline_problems(point, space, where, field="configuration")
    if problems:
        return None, "not a point of the search space: " + "; ".join(
            p.removeprefix(f"{where}: ") for p in problems)
    try:
        plan = plan_baseline(point, space, profile, capabilities=capabilities, whose="its")
    except (KeyError, SpecError) as exc:
        return None, str(exc.args[0]) if exc.args else repr(exc)
    if plan.params is None or plan.candidate_id is None:
        return None, plan.note
    return Seed(plan.params, plan.candidate_id, trial.number), ""


def _spread(seeds: list[Seed], cap: int) -> list[Seed]:
    """At most ``cap`` seeds, evenly spaced along the front (its ends included)."""
    if len(seeds) <= cap:
        return seeds
    if cap == 1:
        return seeds[:1]
    picks = sorted({round(float(i)) for i in np.linspace(0, len(seeds) - 1, cap)})
    return [seeds[i] for i in picks]
