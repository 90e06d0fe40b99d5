"""The Optuna study of a campaign: storage on disk, directions from the metrics table, sampler,
and the baseline candidate that a new study measures first.

Constraints reach the samplers without a ``constraints_func``: the loop stores each constraint
with ``trial.set_constraint`` and Optuna 5's TPE, NSGA-II, NSGA-III and GP samplers read
``trial.constraints`` themselves. (``constraints_func`` is deprecated in Optuna 5, and its
``after_trial`` would store a second, unnamed copy of every constraint beside the named one.)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.candidate import stable_hash
from dse.exceptions import SpecError
from dse.metrics import current_metric_name, former_metric_name, metric
from dse.search.space import device_options, suggest_candidate
from dse.spec import HardwareProfile, RangeParam, SamplerSpec, SearchSpace
from dse.spec.models import BaselineSpec, DeploymentSpec, ParamSpec, Scalar

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    import optuna

    from dse.spec import Experiment
    from dse.storage import CampaignStorage


def storage_url(run_dir: Path) -> str:
    """The SQLAlchemy URL of a run folder's SQLite study (the default storage)."""
    return f"sqlite:///{run_dir / 'study.db'}"


def campaign_storage(where: Path | CampaignStorage) -> CampaignStorage:
    """``where`` as a storage: a run folder stands for its SQLite study."""
    from dse.storage import CampaignStorage

    return where if isinstance(where, CampaignStorage) else CampaignStorage.sqlite(where)


# -- samplers ------------------------------------------------------------------------------------

_DEFAULT_POPULATION = 50  # Optuna's NSGAIISampler and NSGAIIISampler default

def make_sampler(spec: SamplerSpec, resumed_trials: int) -> optuna.samplers.BaseSampler:
    """Optuna's own samplers. The seed is offset by the trials already run, so a resumed campaign
    continues the sequence instead of replaying the first proposals."""
    from optuna.exceptions import ExperimentalWarning

    with warnings.catch_warnings():
        # Optuna 5 still calls NSGA-III and the brute-force grid experimental; chosen knowingly.
        warnings.simplefilter("ignore", ExperimentalWarning)
        return _new_sampler(spec, spec.seed + resumed_trials)


def _new_sampler(spec: SamplerSpec, seed: int) -> optuna.samplers.BaseSampler:
    import optuna

    if spec.name == "tpe":
        # constant_liar: with several devices measuring at once, TPE treats the running trials as
        # bad results instead of proposing the same region to every idle device.
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=spec.startup_trials,
                                          multivariate=True, constant_liar=True)
    population = spec.population_size or _DEFAULT_POPULATION
    if spec.name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=population)
    if spec.name == "nsga3":
        return optuna.samplers.NSGAIIISampler(seed=seed, population_size=population)
    if spec.name == "gp":
        # Running trials enter its q-batch acquisition, so parallel devices get distinct points.
        # The precision and knobs of a backend are conditional parameters, which GP leaves to
        # its random fallback; that is by design here, so no warning per trial.
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=spec.startup_trials,
                                         warn_independent_sampling=False)
    if spec.name == "grid":
        return _exhaustive_sampler(seed)
    return optuna.samplers.RandomSampler(seed=seed)


def _exhaustive_sampler(seed: int) -> optuna.samplers.BaseSampler:
    """The ``grid`` sampler: Optuna's BruteForceSampler, which walks a define-by-run space, so
    conditional parameters (``precision.<backend>``, ``<backend>.<knob>``) give every valid
    combination once. (GridSampler is a product over fixed names: it would propose each
    candidate once per value of the other backends' parameters, and values the device lacks.)

    Its ``after_trial`` only calls ``study.stop()`` once the grid is exhausted, which raises
    outside ``study.optimize``; the search loop stops on its budget instead, and proposals
    past the end of the grid repeat earlier candidates, which the loop reuses unmeasured.
    """
    import optuna

    class ExhaustiveSampler(optuna.samplers.BruteForceSampler):
        def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                        state: optuna.trial.TrialState, values: Sequence[float] | None) -> None:
            return None

    return ExhaustiveSampler(seed=seed)


def _space_params(space: SearchSpace) -> list[tuple[str, ParamSpec]]:
    """Every searched parameter with its field path in the search-space file."""
    found: list[tuple[str, ParamSpec]] = []
    if space.model is not None:
        found.extend((f"model.arch.{k}", v) for k, v in space.model.arch.items())
    if space.deployment is not None:
        for backend, spec in space.deployment.backends.items():
            found.extend((f"deployment.backends.{backend}.knobs.{k}", v)
                         for k, v in spec.knobs.items())
    found.extend((f"parameters.{k}", v) for k, v in space.parameters.items())
    return found


def grid_problems(space: SearchSpace, space_file: str, experiment_file: str) -> list[str]:
    """Parameters the grid sampler cannot enumerate: continuous float ranges (no ``step``)."""
    return [f"{space_file}: {field}: the grid sampler (sampler.name in {experiment_file}) "
            f"needs a step on this continuous range [{spec.low}, {spec.high}]; add `step:` or "
            f"choose another sampler"
            for field, spec in _space_params(space)
            if isinstance(spec, RangeParam) and not spec.is_int and spec.step is None]


# -- the baseline --------------------------------------------------------------------------------

@dataclass(frozen=True)
class BaselinePlan:
    """The baseline on one device: the Optuna parameters to enqueue and the candidate they make,
    or (``params`` None) why the device cannot run it."""

    params: dict[str, Any] | None
    candidate_id: str | None
    note: str = ""


def _value_problem(spec: ParamSpec, value: Scalar) -> str:
    """Why ``value`` is not a point of ``spec``; empty when it is."""
    if isinstance(spec, RangeParam):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{value!r} is not a number"
        if spec.is_int and not float(value).is_integer():
            return f"{value!r} is not an integer, as the range [{spec.low}, {spec.high}] is"
        if not spec.low <= value <= spec.high:
            return f"{value!r} is outside the range [{spec.low}, {spec.high}]"
        if spec.step is not None:
            steps = (value - spec.low) / spec.step
            if not math.isclose(steps, round(steps), abs_tol=1e-9):
                return f"{value!r} is not on the range's grid ({spec.low} + k * {spec.step})"
        return ""
    return "" if _matching_choice(list(spec), value) else (
        f"{value!r} is not one of the choices {list(spec)}")


def _matching_choice(choices: Sequence[Any], value: Any) -> tuple[Any] | None:
    """The choice equal to ``value`` (in a 1-tuple, since a choice may be falsy), or None."""
    for choice in choices:
        # True == 1 in Python; a flag is not a number here.
        if choice == value and isinstance(choice, bool) == isinstance(value, bool):
            return (choice,)
    return None


def _group_problems(given: Mapping[str, Scalar], specs: Mapping[str, ParamSpec], field: str,
                    space_field: str, space: str, source: str) -> list[str]:
    """Problems of the baseline's ``field`` against the space's ``space_field``."""
    problems = []
    missing = [k for k in specs if k not in given]
    if missing:
        problems.append(f"{source}: {field}: missing {', '.join(missing)}; the baseline needs a "
                        f"value for every parameter in {space_field} of {space} "
                        f"({', '.join(specs)})")
    for key, value in given.items():
        if key not in specs:
            problems.append(f"{source}: {field}.{key}: not in {space_field} of {space}; "
                            f"allowed: {', '.join(specs) or 'none'}")
        elif problem := _value_problem(specs[key], value):
            problems.append(f"{source}: {field}.{key}: {problem} of {space_field}.{key} in {space}")
    return problems


def _deployment_problems(baseline: BaselineSpec, deployment: DeploymentSpec, space: str,
                         source: str, field: str) -> list[str]:
    problems = []
    for key in ("backend", "precision", "batch_size"):
        if getattr(baseline, key) is None:
            problems.append(f"{source}: {field}.{key}: required, since {space} searches a "
                            f"deployment")
    if baseline.backend is not None:
        if baseline.backend not in deployment.backends:
            problems.append(f"{source}: {field}.backend: {baseline.backend!r} is not in "
                            f"deployment.backends of {space}; allowed: "
                            f"{', '.join(deployment.backends)}")
        else:
            problems.extend(_group_problems(
                baseline.knobs, deployment.backends[baseline.backend].knobs, f"{field}.knobs",
                f"deployment.backends.{baseline.backend}.knobs", space, source))
    if baseline.precision is not None and baseline.precision not in deployment.precisions:
        problems.append(f"{source}: {field}.precision: {baseline.precision!r} is not in "
                        f"deployment.precisions of {space}; allowed: "
                        f"{', '.join(deployment.precisions)}")
    if baseline.batch_size is not None and baseline.batch_size not in deployment.batch_sizes:
        problems.append(f"{source}: {field}.batch_size: {baseline.batch_size} is not in "
                        f"deployment.batch_sizes of {space}; allowed: "
                        f"{', '.join(map(str, deployment.batch_sizes))}")
    return problems


def baseline_problems(baseline: BaselineSpec, space: SearchSpace, source: str,
                      field: str = "baseline") -> list[str]:
    """Where the baseline of experiment file ``source`` is not a point of ``space``: one line per
    problem, naming the baseline's field (``field``, e.g. ``baseline.arch``) and the space's."""
    name = f"space {space.name!r}"
    problems = []
    if space.model is not None:
        problems.extend(_group_problems(baseline.arch, space.model.arch, f"{field}.arch",
                                        "model.arch", name, source))
    elif baseline.arch:
        problems.append(f"{source}: {field}.arch: {name} has no model; leave arch out")
    if space.deployment is not None:
        problems.extend(_deployment_problems(baseline, space.deployment, name, source, field))
    else:
        given = [f for f in ("backend", "precision", "batch_size", "knobs") if getattr(baseline, f)]
        if given:
            problems.append(f"{source}: {field}: {name} has no deployment; leave out "
                            f"{', '.join(given)}")
    if space.parameters or baseline.params:
        problems.extend(_group_problems(baseline.params, space.parameters, f"{field}.params",
                                        "parameters", name, source))
    return problems


class _BaselineAnswers:
    """A Suggester answering with the baseline's values, turned into the space's own values
    (Optuna hands an enqueued value back unconverted, so a baseline's ``1`` must become the
    space's ``1.0``, or its candidate id would differ from the same configuration proposed
    later). Records what it answered, by Optuna parameter name."""

    def __init__(self, baseline: BaselineSpec) -> None:
        self.baseline = baseline
        self.params: dict[str, Any] = {}

    def _value(self, name: str) -> Any:
        """The baseline's value of the Optuna parameter ``name``, as ``suggest_candidate`` names
        them: ``arch.<k>``, ``backend``, ``precision.<backend>``, ``batch_size``,
        ``<backend>.<knob>``, and each free parameter by its own name."""
        b = self.baseline
        group, _, key = name.partition(".")
        if group == "arch" and key in b.arch:
            return b.arch[key]
        if name == "backend":
            return b.backend
        if name == "batch_size":
            return b.batch_size
        if group == "precision":
            return b.precision
        if group == b.backend and key in b.knobs:
            return b.knobs[key]
        if name in b.params:
            return b.params[name]
        raise KeyError(f"the baseline has no value for search parameter {name!r}")

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        value = self._value(name)
        found = _matching_choice(list(choices), value)
        if found is None:
            raise KeyError(f"baseline value {value!r} of {name!r} is not among {list(choices)}")
        self.params[name] = found[0]
        return found[0]

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int:
        self.params[name] = int(self._value(name))
        return int(self.params[name])

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        self.params[name] = float(self._value(name))
        return float(self.params[name])


def plan_baseline(baseline: BaselineSpec, space: SearchSpace, profile: HardwareProfile, *,
                  capabilities: bool = True, whose: str = "the baseline's") -> BaselinePlan:
    """The baseline as Optuna parameters of ``profile``'s study, or why that device cannot run
    it. ``baseline`` must have passed :func:`baseline_problems`; ``capabilities`` as the search
    loop offers the profile's candidates (false where an evaluator or replay table measures).
    Any point of the space planned the same way (a warm start's seeds) names itself in the
    note through ``whose``."""
    if space.deployment is not None:
        options = device_options(space, profile, capabilities=capabilities)
        backend, precision = baseline.backend, baseline.precision
        if backend not in options or precision not in options[backend]:
            offered = ", ".join(f"{b}/{p}" for b, ps in options.items() for p in ps)
            return BaselinePlan(None, None, f"device {profile.name!r} cannot run {whose} "
                                            f"{backend}/{precision}; it offers {offered}")
    answers = _BaselineAnswers(baseline)
    candidate = suggest_candidate(answers, space, profile, capabilities=capabilities)
    return BaselinePlan(answers.params, candidate.candidate_id)


def search_problems(experiment: Experiment) -> list[str]:
    """What the YAML models cannot check on their own: the sampler and the baseline against the
    experiment's search space. One line per problem, naming file and field."""
    source = str(experiment.path)
    problems = []
    if experiment.spec.sampler.name == "grid":
        space_file = str(experiment.path.parent / experiment.spec.search_space)
        problems.extend(grid_problems(experiment.space, space_file, source))
    if experiment.spec.baseline is not None:
        problems.extend(baseline_problems(experiment.spec.baseline, experiment.space, source))
    warm_source = experiment.spec.search.warm_start.source
    names = [p.name for p in experiment.devices]
    if warm_source is not None and warm_source not in names:
        problems.append(f"{source}: search.warm_start.from: unknown device profile "
                        f"{warm_source!r}; allowed: {', '.join(names)}")
    return problems


# -- studies -------------------------------------------------------------------------------------

# The parts of a space that change what a trial means; a resumed study must not mix two of them.
_SPACE_SECTIONS = ("model", "training", "deployment", "constraints", "parameters", "metrics")


def space_fingerprint(space: SearchSpace, *, former_names: bool = False) -> dict[str, str]:
    """A hash of each section of ``space`` that changes what a trial means. ``former_names``:
    with each renamed metric a constraint bounds under its former name, as a study written
    before the rename holds it (see ``dse.metrics.RENAMED_METRICS``)."""
    dumped = space.model_dump(mode="json")
    if former_names:
        dumped["constraints"] = [{**c, "metric": former_metric_name(c["metric"])}
                                 for c in dumped["constraints"]]
    return {section: stable_hash(dumped[section]) for section in _SPACE_SECTIONS}


def _unchanged(section: str, now: str, stored: Mapping[str, str], before_renames: str) -> bool:
    """Whether a space section is as the stored study knew it: ``now``, or ``before_renames``
    (the section with renamed metrics under their former names) for a study written before a
    metric was renamed. A study made before a section existed (free ``parameters``, declared
    ``metrics``) knew it as the field's default."""
    if section in stored:
        return stored[section] in (now, before_renames)
    field = SearchSpace.model_fields[section]
    default = field.get_default(call_default_factory=True)
    return stable_hash(default if default is None else _json(default)) == now


def _json(value: object) -> object:
    import json

    return json.loads(json.dumps(value, default=str))


def study_name(campaign: str, profile: str, device_count: int) -> str:
    """A single-device campaign's study is named like the campaign; with several devices each
    profile has its own study, ``<campaign>@<profile>``, in the same storage."""
    return campaign if device_count == 1 else f"{campaign}@{profile}"


def resolve_study_names(where: Path | CampaignStorage, campaign: str,
                        profiles: Sequence[str]) -> dict[str, str]:
    """Each profile's study name in the campaign's storage (``where``: a run folder's SQLite
    study, or a :class:`~dse.storage.CampaignStorage`): :func:`study_name`, unless the
    profile's study exists under the other form. A campaign rerun with a device added keeps its
    first device's study ``<campaign>`` (so that it resumes, and can seed the new device's
    study); one rerun with a device left out keeps ``<campaign>@<profile>``. A name held by
    another profile's study is never taken: that profile gets ``<campaign>@<profile>``."""
    import optuna

    storage = campaign_storage(where)
    owners: dict[str, str | None] = {}
    # A file storage not written yet is not created by a look at it.
    if storage.path is None or storage.path.is_file():
        url = storage.for_writing()
        summaries = storage.guarded(
            lambda: optuna.get_all_study_summaries(url, include_best_trial=False))
        for summary in summaries:
            owner = summary.user_attrs.get("device_profile")
            owners[summary.study_name] = None if owner is None else str(owner)
    names = {}
    for profile in profiles:
        preferred = study_name(campaign, profile, len(profiles))
        forms = [preferred, campaign, f"{campaign}@{profile}"]
        mine = [name for name in forms if name in owners and owners[name] == profile]
        if mine:
            names[profile] = mine[0]
        elif preferred in owners and owners[preferred] not in (None, profile):
            names[profile] = f"{campaign}@{profile}"
        else:
            names[profile] = preferred
    return names


#: Study attribute holding :func:`device_peaks` of the study's device profile.
DEVICE_PEAKS_ATTR = "device_peaks"


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
    studies = open_studies(experiment.storage, experiment.name, experiment.space,
                           experiment.spec.sampler, [p.name for p in experiment.devices], plans)
    for profile in experiment.devices:
        # The report has only the study: it draws the roofline's ceilings from these. Written on
        # every open, so a profile whose peaks were corrected shows the corrected ceilings.
        studies[profile.name].set_user_attr(DEVICE_PEAKS_ATTR, device_peaks(profile))
        # Whether trials not measured cleanly may be on the front: read with the trials table.
        from dse.columns import NON_OK_ON_FRONT_ATTR

        studies[profile.name].set_user_attr(NON_OK_ON_FRONT_ATTR,
                                            experiment.spec.measurement.non_ok_on_front)
    if experiment.spec.search.warm_start.enabled:
        # Imported here: warm_start plans its seeds with this module's baseline machinery.
        from dse.search.warm_start import seed_new_studies

        seed_new_studies(experiment, studies, evaluated)
    return studies


def open_studies(where: Path | CampaignStorage, campaign: str, space: SearchSpace,
                 sampler: SamplerSpec, profiles: list[str],
                 baselines: Mapping[str, BaselinePlan] | None = None) -> dict[str, optuna.Study]:
    """One study per device profile (see :func:`study_name`), created or resumed in ``where``
    (a run folder's SQLite study, or a :class:`~dse.storage.CampaignStorage`); ``baselines``
    holds each profile's baseline (see :func:`open_study`). A profile that already has a study
    under the other form of the name (the campaign gained or lost a device since) resumes it."""
    names = resolve_study_names(where, campaign, profiles)
    studies = {}
    for profile in profiles:
        study = open_study(where, names[profile], space, sampler,
                           (baselines or {}).get(profile))
        study.set_user_attr("campaign", campaign)
        study.set_user_attr("device_profile", profile)
        studies[profile] = study
    return studies


def open_study(where: Path | CampaignStorage, name: str, space: SearchSpace,
                sampler: SamplerSpec, baseline: BaselinePlan | None = None) -> optuna.Study:
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
    storage = chosen.for_writing()
    existing = chosen.guarded(lambda: optuna.study.get_all_study_names(storage))
    resumed = 0
    if name in existing:
        previous = chosen.guarded(lambda: optuna.load_study(study_name=name, storage=storage))
        # A study written before a metric was renamed names it by its former name.
        raw = previous.user_attrs.get("objectives")
        stored_objectives = None if raw is None else [current_metric_name(str(n)) for n in raw]
        if stored_objectives != objectives:
            raise SpecError([
                f"{chosen.location}: objectives: the stored study optimises "
                f"{stored_objectives}, the experiment asks {objectives}; "
                f"rename the campaign or delete its run folder"])
        stored = previous.user_attrs.get("space_fingerprint", {})
        before = space_fingerprint(space, former_names=True)
        changed = [k for k, v in space_fingerprint(space).items()
                   if not _unchanged(k, v, stored, before[k])]
        if changed:
            raise SpecError([
                f"{chosen.location}: {', '.join(changed)}: the search space {space.name!r} "
                f"changed since this campaign's study was created; rename the campaign to start "
                f"a new study, or delete {_what_to_delete(chosen, name)} to start over"])
        resumed = len(previous.trials)
    study = chosen.guarded(lambda: optuna.create_study(
        storage=storage, study_name=name, load_if_exists=True,
        directions=[metric(m).direction.value for m in objectives],
        sampler=make_sampler(sampler, resumed),
    ))
    study.set_user_attr("campaign", name)
    study.set_user_attr("objectives", objectives)
    study.set_user_attr("constraints", constraints)
    study.set_user_attr("space_fingerprint", space_fingerprint(space))
    # Empty rather than just created: a driver that died between creating the study and
    # queueing the baseline still gets it queued on the rerun.
    if baseline is not None and resumed == 0:
        _queue_baseline(study, baseline)
    return study


def _what_to_delete(storage: CampaignStorage, name: str) -> str:
    if storage.kind == "postgresql":
        return f"its study {name!r} (optuna delete-study --storage URL --study-name {name})"
    return str(storage.run_dir)


def _queue_baseline(study: optuna.Study, baseline: BaselinePlan) -> None:
    if baseline.params is None:
        study.set_user_attr("baseline_skipped", baseline.note)
        return
    study.enqueue_trial(baseline.params, user_attrs={"baseline": True})
    study.set_user_attr("baseline_candidate_id", baseline.candidate_id)
