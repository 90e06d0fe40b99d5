"""Opening a campaign's Optuna studies, one per device profile: created or resumed in the
campaign's storage (:mod:`dse.search.study_storage`), refused where the stored study optimises
other objectives or another space (:mod:`dse.search.study_fingerprint`), with the sampler
(:mod:`dse.search.samplers.registered`), the study attributes the report reads, the objectives as the
study's metric names (what optuna-dashboard labels them), the baseline queued first in a new
study (:mod:`dse.search.baseline_plan`) and the warm start's seeds after it; and how far a study
is (:func:`study_progress`), which tells a finished campaign from one to resume.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.core import SpecError, StudyAttr, TrialAttr, current_metric_name, metric
from dse.search.baseline_plan import BaselinePlan, plan_baseline
from dse.search.device_search import counts_toward_budget
from dse.search.experiment_checks import search_problems
from dse.search.samplers.registered import make_sampler
from dse.search.study_fingerprint import changed_sections, space_fingerprint
from dse.search.study_storage import campaign_storage, resolve_study_names
from dse.search.warm_start import seed_new_studies
from dse.spec import HardwareProfile, SamplerSpec, SearchSpace

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    import optuna

    from dse.search.samplers.surrogate import SamplerContext
    from dse.spec import Experiment
    from dse.storage import CampaignStorage


def device_peaks(profile: HardwareProfile) -> dict[str, Any]:
    """The roofline figures of ``profile``, as plain JSON data: ``profile``, ``kind``,
    ``peak_gflops`` (fp32), ``peak_gflops_by_precision``, ``peak_bandwidth_gbs`` (None where the
    profile gives none) and ``peak_source``."""
    return {"profile": profile.name, "kind": profile.kind, "peak_gflops": profile.peak_gflops,
            "peak_gflops_by_precision": dict(profile.peak_gflops_by_precision),
            "peak_bandwidth_gbs": profile.peak_bandwidth_gbs, "peak_source": profile.peak_source}


def open_experiment_studies(experiment: Experiment,
                            evaluated: Collection[str] | None = None) -> dict[str, optuna.Study]:
    """The studies of a campaign (see :func:`open_studies`), its baseline queued first in each new
    one, then (``search.warm_start``) the front of another device's study
    (:func:`dse.search.warm_start.seed_new_studies`). SpecError, before any study is touched,
    when the sampler, baseline or warm start does not fit the experiment.

    ``evaluated``: the profiles whose candidates an evaluator or a replay table measures, as the
    search loop is told (the capability table does not narrow what they are offered); by
    default the replay profiles, or every profile when the experiment names an evaluator.
    """
    problems = search_problems(experiment)
    if problems:
        raise SpecError(problems)
    if evaluated is None:
        evaluated = [p.name for p in experiment.devices
                     if experiment.spec.evaluator is not None or p.kind == "replay"]
    baseline = experiment.spec.baseline
    plans = {} if baseline is None else {
        p.name: plan_baseline(baseline, experiment.space, p, capabilities=p.name not in evaluated)
        for p in experiment.devices}
    contexts = {p.name: _sampler_context(experiment, p, p.name not in evaluated)
                for p in experiment.devices}
    studies = open_studies(experiment.storage, experiment.name, experiment.space,
                           experiment.spec.sampler, [p.name for p in experiment.devices], plans,
                           contexts)
    for profile in experiment.devices:
        # The report has only the study: it draws the roofline's ceilings from these. Written on
        # every open, so a profile whose peaks were corrected shows the corrected ceilings.
        studies[profile.name].set_user_attr(StudyAttr.DEVICE_PEAKS, device_peaks(profile))
        # Whether trials not measured cleanly may be on the front: read with the trials table.
        studies[profile.name].set_user_attr(StudyAttr.NON_OK_ON_FRONT,
                                            experiment.spec.measurement.non_ok_on_front)
    if experiment.spec.search.warm_start.enabled:
        seed_new_studies(experiment, studies, evaluated)
    return studies


def _sampler_context(experiment: Experiment, profile: HardwareProfile,
                     capabilities: bool) -> SamplerContext:
    """The device's candidate space."""
    from dse.search.candidate_space import CandidateSpace
    from dse.search.samplers.surrogate import SamplerContext

    return SamplerContext(CandidateSpace(experiment.space, profile, capabilities))


def open_studies(where: Path | CampaignStorage, campaign: str, space: SearchSpace,
                 sampler: SamplerSpec, profiles: list[str],
                 baselines: Mapping[str, BaselinePlan] | None = None,
                 contexts: Mapping[str, SamplerContext] | None = None) -> dict[str, optuna.Study]:
    """One study per device profile (see :func:`study_name`), created or resumed in ``where``
    (a run folder's SQLite study, or a :class:`~dse.storage.CampaignStorage`); ``baselines``
    holds each profile's baseline (see :func:`open_study`), ``contexts`` what a space-aware
    sampler knows of each profile. A profile that already has a study under the other form of
    the name (the campaign gained or lost a device since) resumes it."""
    names = resolve_study_names(where, campaign, profiles)
    studies = {}
    for profile in profiles:
        study = open_study(where, names[profile], space, sampler,
                           (baselines or {}).get(profile), (contexts or {}).get(profile))
        study.set_user_attr(StudyAttr.CAMPAIGN, campaign)
        study.set_user_attr(StudyAttr.DEVICE_PROFILE, profile)
        studies[profile] = study
    return studies


def open_study(where: Path | CampaignStorage, name: str, space: SearchSpace,
                sampler: SamplerSpec, baseline: BaselinePlan | None = None,
                context: SamplerContext | None = None) -> optuna.Study:
    """Create the campaign's study in ``where`` (a run folder's SQLite study, or a
    :class:`~dse.storage.CampaignStorage`), or load it to resume.

    Refuses to resume a study made with other objectives or another space: its trials would not
    be comparable (and Optuna cannot change a parameter's choices within one study).

    A new (still empty) study gets ``baseline`` enqueued as its first trial, user attribute
    ``baseline: True``, and remembers its candidate id in the study attribute
    ``baseline_candidate_id``; a device that cannot run it gets ``baseline_skipped`` (why). A
    resumed study keeps what it has: a baseline added later is not measured.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    chosen = campaign_storage(where)
    run_dir = chosen.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    objectives = [o.metric for o in space.objectives]
    constraints = [str(c) for c in space.constraints]
    storage = _one_storage(chosen)
    existing = chosen.guarded(lambda: optuna.study.get_all_study_names(storage))
    resumed = 0
    if name in existing:
        previous = chosen.guarded(lambda: optuna.load_study(study_name=name, storage=storage))
        # A study written before a metric was renamed names it by its former name.
        raw = previous.user_attrs.get(StudyAttr.OBJECTIVES)
        stored_objectives = None if raw is None else [current_metric_name(str(n)) for n in raw]
        if stored_objectives != objectives:
            raise SpecError([
                f"{chosen.location}: objectives: the stored study optimises "
                f"{stored_objectives}, the experiment asks {objectives}; "
                f"rename the campaign or delete its run folder"])
        changed = changed_sections(space, previous.user_attrs.get(StudyAttr.SPACE_FINGERPRINT, {}))
        if changed:
            raise SpecError([
                f"{chosen.location}: {', '.join(changed)}: the search space {space.name!r} "
                f"changed since this campaign's study was created; rename the campaign to start "
                f"a new study, or delete {_what_to_delete(chosen, name)} to start over"])
        resumed = len(previous.trials)
    study = chosen.guarded(lambda: optuna.create_study(
        storage=storage, study_name=name, load_if_exists=True,
        directions=[metric(m).direction.value for m in objectives],
        sampler=make_sampler(sampler, resumed, context),
    ))
    study.set_user_attr(StudyAttr.CAMPAIGN, name)
    study.set_user_attr(StudyAttr.OBJECTIVES, objectives)
    study.set_user_attr(StudyAttr.CONSTRAINTS, constraints)
    study.set_user_attr(StudyAttr.SPACE_FINGERPRINT, space_fingerprint(space))
    _name_objectives(study, objectives)
    # Empty rather than just created: a driver that died between creating the study and
    # queueing the baseline still gets it queued on the rerun.
    if baseline is not None and resumed == 0:
        _queue_baseline(study, baseline)
    return study


def _one_storage(chosen: CampaignStorage) -> str | optuna.storages.BaseStorage:
    """The storage the three calls of :func:`open_study` share: an SQLite URL made into one
    ``RDBStorage`` here, where Optuna would make one per call and check the schema each time
    (tens of milliseconds each)."""
    import optuna

    storage = chosen.for_writing()
    if isinstance(storage, str):
        url = storage
        return chosen.guarded(lambda: optuna.storages.RDBStorage(url))
    return storage


def _name_objectives(study: optuna.Study, objectives: list[str]) -> None:
    """Name the study's objectives after their metrics (optuna-dashboard and Optuna's own plots
    label the values by them): on a new study, and on one a dse before this wrote unnamed."""
    import warnings

    from optuna.exceptions import ExperimentalWarning

    if study.metric_names == objectives:
        return
    with warnings.catch_warnings():  # experimental since Optuna 3.2, unchanged since
        warnings.simplefilter("ignore", ExperimentalWarning)
        study.set_metric_names(objectives)


@dataclass(frozen=True)
class StudyProgress:
    """How far one device's study is.

    Attributes:
        started: Trials that ran or run (0: the campaign starts on this device; a baseline or
            warm-start seed queued in a new study is not one).
        completed: Distinct candidates measured to an ok result, the count ``budget.trials``
            sets (a trial that reused an earlier result is not one), as the search loop counts
            them when it resumes (``DeviceSearch.recover``).
        running: Trials left RUNNING by a driver that stopped: the next run fails them and
            measures their candidates again.
    """

    started: int
    completed: int
    running: int


def study_progress(study: optuna.Study) -> StudyProgress:
    """The :class:`StudyProgress` of ``study``, read from its stored trials."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    return StudyProgress(
        started=sum(t.state != TrialState.WAITING for t in trials),
        completed=sum(counts_toward_budget(t) for t in trials),
        running=sum(t.state == TrialState.RUNNING for t in trials))


def _what_to_delete(storage: CampaignStorage, name: str) -> str:
    if storage.kind == "postgresql":
        return f"its study {name!r} (optuna delete-study --storage URL --study-name {name})"
    return str(storage.run_dir)


def _queue_baseline(study: optuna.Study, baseline: BaselinePlan) -> None:
    if baseline.params is None:
        study.set_user_attr(StudyAttr.BASELINE_SKIPPED, baseline.note)
        return
    study.enqueue_trial(baseline.params, user_attrs={TrialAttr.BASELINE: True})
    study.set_user_attr(StudyAttr.BASELINE_CANDIDATE_ID, baseline.candidate_id)
