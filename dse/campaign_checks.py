"""The cross-checks of spec files against the registries that load_experiment and validate_files run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dse.exceptions import SpecError
from dse.spec import Experiment, SearchSpace
from dse.spec.models import ParamSpec, checked_values

if TYPE_CHECKING:
    from dse.backends.base import Backend


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
