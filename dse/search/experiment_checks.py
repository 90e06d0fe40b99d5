"""What the YAML models cannot check on their own, before any study is touched: the sampler
against the search space (a grid needs steps), the baseline against the space, and the warm
start's source device against the experiment's devices."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.plugins import SAMPLERS
from dse.search.baseline_plan import baseline_problems
from dse.spec import ParamSpec, RangeParam, SearchSpace

if TYPE_CHECKING:
    from dse.spec import Experiment


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


def grid_problems(space: SearchSpace, space_file: str, experiment_file: str,
                  sampler: str = "grid") -> list[str]:
    """Parameters a sampler that enumerates the space (``grid``) cannot walk: continuous float
    ranges without a ``step``."""
    return [f"{space_file}: {field}: the {sampler} sampler (sampler.name in {experiment_file}) "
            f"needs a step on this continuous range [{spec.low}, {spec.high}]; add `step:` or "
            f"choose another sampler"
            for field, spec in _space_params(space)
            if isinstance(spec, RangeParam) and not spec.is_int and spec.step is None]


def search_problems(experiment: Experiment) -> list[str]:
    """What the YAML models cannot check on their own: the sampler and the baseline against the
    experiment's search space. One line per problem, naming file and field."""
    source = str(experiment.path)
    problems = []
    if SAMPLERS[experiment.spec.sampler.name].needs_steps:
        space_file = str(experiment.path.parent / experiment.spec.search_space)
        problems.extend(grid_problems(experiment.space, space_file, source,
                                      experiment.spec.sampler.name))
    if experiment.spec.baseline is not None:
        problems.extend(baseline_problems(experiment.spec.baseline, experiment.space, source))
    warm_source = experiment.spec.search.warm_start.source
    names = [p.name for p in experiment.devices]
    if warm_source is not None and warm_source not in names:
        problems.append(f"{source}: search.warm_start.from: unknown device profile "
                        f"{warm_source!r}; allowed: {', '.join(names)}")
    return problems
