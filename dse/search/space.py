"""The search space as Optuna parameters, and the `Candidate` a trial's parameters describe.

Conditional parameters keep Optuna's distributions fixed per name: the precision and knobs of a
backend are named after it (``precision.onnxruntime``, ``onnxruntime.intra_op_threads``), so each
name always has the same choices. Only combinations the device supports (capability table ∩
profile ∩ space) are offered at all, so no budget goes to candidates that cannot exist.
"""

from __future__ import annotations

from typing import Any, Protocol

from dse.backends.capabilities import supports_device
from dse.candidate import Candidate
from dse.exceptions import SpecError
from dse.spec import HardwareProfile, RangeParam, SearchSpace
from dse.spec.models import ParamSpec


class Suggester(Protocol):
    """The part of ``optuna.Trial`` used here."""

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int: ...

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float: ...


def device_options(space: SearchSpace, profile: HardwareProfile) -> dict[str, list[str]]:
    """Backend -> precisions this device can run, from the space, the profile and the capabilities."""
    options: dict[str, list[str]] = {}
    for backend in space.deployment.backends:
        if backend not in profile.backends:
            continue
        precisions: list[str] = [p for p in space.deployment.precisions
                      if p in profile.precisions and supports_device(
                                 backend, p, profile.kind, profile.compute_capability)[0]]
        if precisions:
            options[backend] = precisions
    if not options:
        raise SpecError([f"space {space.name!r}: no backend/precision of the space runs on device "
                         f"{profile.name!r} (profile backends {profile.backends}, precisions "
                         f"{profile.precisions})"])
    return options


def _suggest(trial: Suggester, name: str, spec: ParamSpec) -> Any:
    if isinstance(spec, RangeParam):
        if spec.is_int:
            return trial.suggest_int(name, int(spec.low), int(spec.high),
                                     step=int(spec.step or 1), log=spec.log)
        return trial.suggest_float(name, float(spec.low), float(spec.high),
                                   step=None if spec.step is None else float(spec.step),
                                   log=spec.log)
    return trial.suggest_categorical(name, list(spec))


def suggest_candidate(trial: Suggester, space: SearchSpace, profile: HardwareProfile) -> Candidate:
    """Ask ``trial`` for every parameter and return the candidate they describe."""
    arch = {key: _suggest(trial, f"arch.{key}", spec) for key, spec in space.model.arch.items()}
    options = device_options(space, profile)
    backend = trial.suggest_categorical("backend", list(options))
    precision = trial.suggest_categorical(f"precision.{backend}", options[backend])
    batch_size = trial.suggest_categorical("batch_size", list(space.deployment.batch_sizes))
    knobs = {key: _suggest(trial, f"{backend}.{key}", spec)
             for key, spec in space.deployment.backends[backend].knobs.items()}
    return Candidate(family=space.model.family, arch=arch, precision=precision,
                     batch_size=int(batch_size), backend=backend, knobs=knobs,
                     device_profile=profile.name)
