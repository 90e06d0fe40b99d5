"""The cross-checks of spec files against the registries that load_experiment and validate_files run."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from dse.core import SpecError
from dse.spec import Experiment, ParamSpec, SearchSpace, allowed_hint, cap_per_file, checked_values

if TYPE_CHECKING:
    from dse.backends import Backend
    from dse.spec import HardwareProfile


def space_problems(path: Path, space: SearchSpace) -> list[str]:
    """Checks that need the registries: the model source, arch parameters, backend knob names."""
    from dse.backends import get_backend
    from dse.models import model_problems

    backends = {} if space.deployment is None else space.deployment.backends
    problems = [] if space.model is None else model_problems(
        path, space.model, backends=list(backends),
        batch_sizes=[] if space.deployment is None else space.deployment.batch_sizes,
        metrics=[o.metric for o in space.objectives] + [c.metric for c in space.constraints])
    for name, backend_spec in backends.items():
        backend = get_backend(name)
        for knob, values in backend_spec.knobs.items():
            field = f"{path}: deployment.backends.{name}.knobs.{knob}"
            if knob not in backend.knobs:
                problems.append(f"{field}: unknown knob of {name}; "
                                f"{allowed_hint(knob, sorted(backend.knobs))}")
                continue
            refused = backend.declaration.kind_refusal([knob], space.generative)
            if refused:
                problems.append(f"{field}: {refused}")
                continue
            problems.extend(f"{field}: {problem}" for problem in knob_value_problems(
                backend, knob, values))
    return problems


def model_output_problems(path: Path, space: SearchSpace, *, recheck: bool = False) -> list[str]:
    """A factory's or ONNX file's output, from one candidate built here and one forward, against
    what dse scores (``dse.models.output_check``); for ``dse validate``, once the space has no
    other problem. Built-in families are not checked. A pass of unchanged sources is reused
    unless ``recheck``."""
    from dse.models import space_output_problems

    return space_output_problems(path, space, recheck=recheck)


def experiment_output_problems(experiment: Experiment, *, recheck: bool = False) -> list[str]:
    """:func:`model_output_problems` of the experiment's space, when a device of it builds models
    (not when an evaluator or replay tables measure every device)."""
    from dse.models import CHECK_SECONDS, space_output_problems

    if experiment.evaluator is not None or all(p.kind == "replay" for p in experiment.devices):
        return []
    return space_output_problems(experiment.path.parent / experiment.spec.search_space,
                                 experiment.space,
                                 min(CHECK_SECONDS, experiment.spec.budget.trial_timeout_s),
                                 recheck=recheck)


def knob_value_problems(backend: Backend, knob: str, values: ParamSpec) -> list[str]:
    """What ``compile`` would say of each value a knob may take (a range: its two ends)."""
    from dse.core import BuildError

    problems = []
    for value in dict.fromkeys(checked_values(values)):  # each value once, in order
        try:
            backend.check_knob_values({knob: value})
        except BuildError as exc:
            problems.append(str(exc))
    return problems


def device_problems(experiment: Experiment) -> list[str]:
    """Arch and knob values of the space that cannot run on a device of the experiment (a
    CUDA-only kernel or CUDA-graph capture on a cpu device): one line each, naming the space's
    field and the profile. Replay profiles and a custom evaluator measure no device: not checked.
    Every device is checked alike, so a value one profile cannot run is refused for the whole
    experiment rather than searched on some devices only."""
    if experiment.evaluator is not None:
        return []
    space_file = experiment.path.parent / experiment.spec.search_space
    problems: list[str] = []
    for index, profile in enumerate(experiment.devices):
        if profile.kind == "replay":
            continue
        where = (f"cannot run on devices[{index}] of {experiment.path} ({profile.name!r}, a "
                 f"{profile.kind} device)")
        problems.extend(f"{space_file}: {field}: {reason}; it {where}"
                        for field, reason in _kind_problems(experiment.space, profile))
    return problems


def _kind_problems(space: SearchSpace, profile: HardwareProfile) -> list[tuple[str, str]]:
    """(field, reason) for each arch or knob value of ``space`` that ``profile``'s kind refuses."""
    from dse.backends import get_backend
    from dse.core import BuildError
    from dse.models import get_family

    found: list[tuple[str, str]] = []
    if space.model is not None and space.model.family is not None:
        family = get_family(space.model.family)
        for key, spec in space.model.arch.items():
            for value in dict.fromkeys(checked_values(spec)):
                try:
                    reason = family.device_problem({key: value}, profile.kind)
                except ValueError:  # a value the family refuses anywhere: space_problems says so
                    continue
                if reason is not None:
                    found.append((f"model.arch.{key}", reason))
    backends = {} if space.deployment is None else space.deployment.backends
    for name in [b for b in backends if b in profile.backends]:
        backend = get_backend(name)
        for knob, values in backends[name].knobs.items():
            for value in dict.fromkeys(checked_values(values)):
                try:
                    backend.check_knob_device({knob: value}, profile.kind)
                except BuildError as exc:
                    found.append((f"deployment.backends.{name}.knobs.{knob}", str(exc)))
    return found


def replay_table_problems(experiment: Experiment) -> list[str]:
    """Each replay table has a column for every parameter of the space and one metric column."""
    tables = [profile.table for profile in experiment.devices if profile.table is not None]
    if not tables:
        return []
    # From its own module: dse.search.evaluators.dispatchers brings the farm's dispatcher and scipy along.
    from dse.search import ReplayEvaluator

    problems = []
    for table in tables:
        try:
            ReplayEvaluator(table, experiment.space)
        except SpecError as exc:
            problems.extend(exc.problems)
    return problems


def check_experiment(path: Path) -> tuple[Experiment | None, list[str]]:
    """Every problem of the experiment at ``path`` and the files it names, in one pass: each
    file's own, the space against the registries (on the sections of it that are valid, where
    others are not), and — once every file loaded — the replay tables, the devices' kinds and
    capabilities, the sampler and baseline against the space. Returns the experiment when every
    file loaded (even where those later checks found problems), and the problems, at most
    ``MAX_PROBLEMS`` a file."""
    from dse.search import search_problems
    from dse.spec import read_experiment_files

    found = read_experiment_files(path, space_checks=space_problems)
    problems = list(found.problems)
    experiment = found.experiment
    if experiment is not None:
        problems.extend(replay_table_problems(experiment))
        problems.extend(device_problems(experiment))
        problems.extend(capability_problems(experiment))
        problems.extend(search_problems(experiment))
    return experiment, cap_per_file(problems)


def _evaluated(experiment: Experiment, evaluated: Collection[str] | None) -> frozenset[str]:
    """The profiles an evaluator or a replay table measures (the capability table does not
    narrow what they are offered); by default as ``run_campaign`` decides without an evaluator
    argument: every profile when the experiment names an evaluator, else the replay ones."""
    if evaluated is not None:
        return frozenset(evaluated)
    return frozenset(p.name for p in experiment.devices
                     if experiment.evaluator is not None or p.kind == "replay")


def capability_problems(experiment: Experiment,
                        evaluated: Collection[str] | None = None) -> list[str]:
    """A device on which no backend/precision combination of the space runs: one line per
    device, naming each combination and why it does not run there (the profile's lists, the
    capability table's reason). A device that shares no backend with the space is left to the
    line that already says so (``spec.cross_checks``)."""
    from dse.search import device_combinations

    deployment = experiment.space.deployment
    if deployment is None:
        return []
    measured_here = _evaluated(experiment, evaluated)
    problems = []
    for index, profile in enumerate(experiment.devices):
        if profile.backends and not set(profile.backends) & set(deployment.backends):
            continue
        options, dropped = device_combinations(
            experiment.space, profile, capabilities=profile.name not in measured_here)
        if not options:
            reasons = "; ".join(f"{what}: {why}" for what, why in dropped)
            problems.append(f"{experiment.path}: devices[{index}]: no backend/precision of the "
                            f"search space runs on {profile.name!r} (a {profile.kind} device): "
                            f"{reasons}")
    return problems


def dropped_combinations(experiment: Experiment,
                         evaluated: Collection[str] | None = None) -> list[str]:
    """A notice for each backend, precision or combination of the space that a device of the
    experiment is not offered, with the reason: exactly what the search leaves out
    (``dse.search.space.device_combinations``), said by ``dse validate`` and at the start of
    ``dse run``; e.g. ``local-cpu: onnxruntime/fp16 dropped: <the capability table's reason>``.
    Empty for a device offered nothing (an error: :func:`capability_problems`).

    ``evaluated``: the profiles an evaluator or replay table measures (as ``run_campaign`` tells
    its search); by default those :func:`capability_problems` assumes."""
    from dse.search import device_combinations

    measured_here = _evaluated(experiment, evaluated)
    notices: list[str] = []
    for profile in experiment.devices:
        options, dropped = device_combinations(
            experiment.space, profile, capabilities=profile.name not in measured_here)
        if options:
            notices.extend(f"{profile.name}: {what} dropped: {why}" for what, why in dropped)
    return notices
