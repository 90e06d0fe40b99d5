"""The cross-checks of spec files against the registries that load_experiment and validate_files run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dse.exceptions import SpecError
from dse.spec import Experiment, SearchSpace
from dse.spec.models import ParamSpec, checked_values

if TYPE_CHECKING:
    from dse.backends.base import Backend
    from dse.spec import HardwareProfile


def space_problems(path: Path, space: SearchSpace) -> list[str]:
    """Checks that need the registries: the model source, arch parameters, backend knob names."""
    from dse.backends import get_backend
    from dse.models.checks import model_problems

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
                                f"allowed: {', '.join(sorted(backend.knobs))}")
                continue
            problems.extend(f"{field}: {problem}" for problem in knob_value_problems(
                backend, knob, values))
    return problems


def knob_value_problems(backend: Backend, knob: str, values: ParamSpec) -> list[str]:
    """What ``compile`` would say of each value a knob may take (a range: its two ends)."""
    from dse.exceptions import BuildError

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
    from dse.exceptions import BuildError
    from dse.models import get_family

    found: list[tuple[str, str]] = []
    if space.model is not None and space.model.family is not None:
        family = get_family(space.model.family)
        for key, spec in space.model.arch.items():
            for value in dict.fromkeys(checked_values(spec)):
                reason = family.device_problem({key: value}, profile.kind)
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
    from dse.search.evaluators import ReplayEvaluator

    problems = []
    for profile in experiment.devices:
        if profile.table is not None:
            try:
                ReplayEvaluator(profile.table, experiment.space)
            except SpecError as exc:
                problems.extend(exc.problems)
    return problems
