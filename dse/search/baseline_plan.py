"""The baseline candidate of an experiment: where it is not a point of the search space, and
how it becomes the Optuna parameters a device's new study queues first. A warm start plans its
seeds (other devices' front configurations) the same way (:mod:`dse.search.warm_start`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.search.space import device_options, suggest_candidate
from dse.spec import BaselineSpec, DeploymentSpec, HardwareProfile, ParamSpec, RangeParam, Scalar, SearchSpace

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


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
