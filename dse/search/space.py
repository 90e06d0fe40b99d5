"""The search space as Optuna parameters, and the `Candidate` a trial's parameters describe.

Conditional parameters keep Optuna's distributions fixed per name: the precision and knobs of a
backend are named after it (``precision.onnxruntime``, ``onnxruntime.intra_op_threads``), so each
name always has the same choices. Only combinations the device supports (capability table ∩
profile ∩ space) are offered at all, so no budget goes to candidates that cannot exist. Where a
replay table or a custom evaluator measures instead of a device, the capability table does not
apply: the table or the function says what exists. Free parameters keep their own names.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from dse.backends import supports_device
from dse.core import Candidate, SpecError
from dse.models import candidate_source
from dse.spec import HardwareProfile, ParamSpec, RangeParam, SearchSpace


class Suggester(Protocol):
    """The part of ``optuna.Trial`` used here."""

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int: ...

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float: ...


class DeviceCombinations(NamedTuple):
    """What a device is offered of a space's deployment, and what it is not, with why."""

    options: dict[str, list[str]]
    """Backend -> the precisions offered with it."""
    dropped: list[tuple[str, str]]
    """(what, why) for each thing left out: a backend the profile does not list (``tensorrt``:
    every precision of it) or one combination (``onnxruntime/fp16``)."""


def device_combinations(space: SearchSpace, profile: HardwareProfile, *,
                        capabilities: bool = True) -> DeviceCombinations:
    """The backend/precision combinations of ``space`` that ``profile`` is offered (as
    :func:`device_options`), and each one left out with every reason that holds: a backend or
    precision the profile does not list, the capability table's reason for the combination on
    the device (asked even where the profile's list already leaves it out, so that adding a
    precision to the profile never meets a second refusal unannounced)."""
    deployment = space.deployment
    if deployment is None:
        return DeviceCombinations({}, [])
    replay = profile.kind == "replay"
    backends: list[str] = list(profile.backends or (deployment.backends if replay else []))
    allowed: list[str] = list(profile.precisions or (deployment.precisions if replay else []))
    checked = capabilities and not replay
    options: dict[str, list[str]] = {}
    dropped: list[tuple[str, str]] = []
    for backend in deployment.backends:
        if backend not in backends:
            dropped.append((backend, f"not among the profile's backends ({', '.join(backends)})"))
            continue
        for precision in deployment.precisions:
            reasons = [] if precision in allowed else [
                f"not among the profile's precisions ({', '.join(allowed)})"]
            if checked:
                ok, reason = supports_device(backend, precision, profile.kind,
                                             profile.compute_capability,
                                             generative=space.generative)
                reasons += [] if ok else [reason]
            if reasons:
                dropped.append((f"{backend}/{precision}", ", and ".join(reasons)))
            else:
                options.setdefault(backend, []).append(precision)
    return DeviceCombinations(options, dropped)


def device_options(space: SearchSpace, profile: HardwareProfile, *,
                   capabilities: bool = True) -> dict[str, list[str]]:
    """Backend -> precisions this device can run, from the space, the profile and (unless
    ``capabilities`` is false, or the profile is a replay one) the capability table. A replay
    profile that lists no backends or precisions does not narrow the space's. SpecError, with
    each combination's reason, when none is left."""
    options, dropped = device_combinations(space, profile, capabilities=capabilities)
    if space.deployment is not None and not options:
        reasons = "; ".join(f"{what}: {why}" for what, why in dropped)
        raise SpecError([f"space {space.name!r}: no backend/precision of the space runs on device "
                         f"{profile.name!r} (a {profile.kind} device): {reasons}"])
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


def suggest_candidate(trial: Suggester, space: SearchSpace, profile: HardwareProfile, *,
                      capabilities: bool = True,
                      options: dict[str, list[str]] | None = None) -> Candidate:
    """Ask ``trial`` for every parameter and return the candidate they describe.

    ``capabilities=False`` (candidates measured by a custom evaluator) offers every backend and
    precision the space and profile list. Free parameters are asked last, under their own names,
    so a space without them asks exactly what it always asked. ``options``: the
    :func:`device_options` of these arguments, when the caller has them already (a caller that
    draws thousands of candidates).
    """
    model, deployment = space.model, space.deployment
    arch = {} if model is None else {key: _suggest(trial, f"arch.{key}", spec)
                                     for key, spec in model.arch.items()}
    deployed: dict[str, Any] = {}
    if deployment is not None:
        if options is None:
            options = device_options(space, profile, capabilities=capabilities)
        backend = trial.suggest_categorical("backend", list(options))
        deployed = {
            "backend": backend,
            "precision": trial.suggest_categorical(f"precision.{backend}", options[backend]),
            "batch_size": int(trial.suggest_categorical("batch_size",
                                                        list(deployment.batch_sizes))),
            "knobs": {key: _suggest(trial, f"{backend}.{key}", spec)
                      for key, spec in deployment.backends[backend].knobs.items()},
        }
    params = {key: _suggest(trial, key, spec) for key, spec in space.parameters.items()}
    family, settings = ("", {}) if model is None else candidate_source(model)
    if space.generative:
        settings["workload"] = space.llm_workload.settings()
    proxy_filter = [[c.metric, c.op, c.value] for c in space.constraints
                    if c.metric.startswith("proxy_")]
    if proxy_filter:  # checked on the device before training: see dse.trial.prepare
        settings["proxy_filter"] = proxy_filter
    return Candidate(family=family, arch=arch, model=settings, device_profile=profile.name,
                     params=params, **deployed)
