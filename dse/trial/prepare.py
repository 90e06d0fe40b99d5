"""Candidate -> a compiled runner plus the metrics known before timing (accuracy, size, build cost).

The device worker calls :func:`prepare_candidate` for each trial, then times the runner. Everything
that can rule a candidate out is checked first, cheapest first: capability table, device profile,
knobs, arch; only then are weights trained (or loaded) and the artifact built
(:mod:`dse.trial.torch_model`, :mod:`dse.trial.onnx_model`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dse.accuracy import DeployedModel, fidelity_metrics, non_finite, predict_batches, run_user_evaluator
from dse.artifacts import Artifact, ArtifactCache
from dse.backends import Runner, get_backend, supports_device
from dse.core import BuildError
from dse.measure import rss_bytes, trim_heap
from dse.models import (
    ModelFamily,
    checked_arch,
    is_llm_source,
    is_onnx_source,
    load_function,
    model_source,
)
from dse.trial.candidate_model import (
    ArchFailure,
    CandidateModel,
    one_line,
    padded,
    precision_label,
)
from dse.trial.onnx_model import onnx_file_model
from dse.trial.torch_model import torch_model

if TYPE_CHECKING:
    from dse.backends import Backend
    from dse.core import Candidate
    from dse.spec import HardwareProfile, TrainingSpec


@dataclass
class PreparedCandidate:
    """A candidate ready to be timed.

    ``example`` is one input batch of the candidate's batch size, drawn from the evaluation
    inputs. ``metrics`` holds ``accuracy`` (of the deployed runner itself, on the held-out split:
    an int8 candidate reports what int8 computes), fidelity against fp32, ``params_m``,
    ``model_size_mb``, ``build_seconds``, ``train_seconds`` and what the user's evaluator returned;
    ``missing`` says why a metric the pipeline would give is absent (no dataset). ``provenance`` is
    the runner's description plus where its parts came from.
    """

    runner: Runner
    example: np.ndarray
    metrics: dict[str, float]
    provenance: dict[str, str]
    missing: dict[str, str] = field(default_factory=dict)
    rss_before_runner: int | None = None
    """The process's resident bytes just before the runner was built (freed heap handed back
    first), for ``memory_model_mb``."""
    artifact: Artifact | None = None
    """What the runner was compiled from (``dse profile`` builds profiled siblings of it)."""
    model: CandidateModel | None = None
    """The model before deployment: its inputs, labels and fp32 reference (``dse export``)."""
    outputs: np.ndarray | None = None
    """The runner's outputs on ``model.eval_x``, as scored."""


def prepare_candidate(candidate: Candidate, training: TrainingSpec, profile: HardwareProfile,
                      cache_dir: Path) -> PreparedCandidate:
    """Train or load, build, compile and score ``candidate`` for the device ``profile``.

    Weights are cached under ``cache_dir / "trained"``, artifacts under
    ``cache_dir / "artifacts"``. Raises BuildError, with the reason, for any candidate that
    cannot exist on this device or fails to build; the caller records it as infeasible. So is a
    model whose outputs on the evaluation inputs hold NaN or Inf, in its fp32 reference or as
    deployed: every metric scored from them would be meaningless. A failure of the model itself,
    before any backend (its arch refused, its build, proxies, training or fp32 reference), is an
    :class:`ArchFailure`: the architecture's, whatever the backend, precision or batch.
    """
    backend = check_deployable(candidate, profile)
    if is_llm_source(candidate.family):
        # A trial of one is measured by dse.trial.generation_timing and profiled by
        # dse.profiling.generation_session; export, verify and duels take fixed-shape models only
        # so far.
        raise BuildError("a generative language model is measured by its campaign's trials; "
                         "dse export, verify and duels do not take one yet")
    cache = ArtifactCache(cache_dir / "artifacts")
    if is_onnx_source(candidate.family):
        model = onnx_file_model(candidate, training, cache)
    else:
        model = torch_model(candidate, training, cache_dir, cache)
    return deploy_model(candidate, model, backend, profile)


def deploy_model(candidate: Candidate, model: CandidateModel, backend: Backend,
                 profile: HardwareProfile) -> PreparedCandidate:
    """Compile ``model``'s artifact for ``profile`` and score the runner on the model's inputs:
    a campaign's trial (:func:`prepare_candidate`) and an exported bundle's verification alike.
    BuildError when the runner fails on them or its outputs are not finite."""
    backend.start_runtime(profile)
    # The baseline of the model's footprint: what the process holds before the runner exists.
    trim_heap()
    rss_before = rss_bytes()
    runner = backend.compile(model.artifact, candidate.knobs, profile, candidate.batch_size)
    run = runner.run if model.fixed_batch is None else padded(runner.run, model.fixed_batch)
    try:
        # The runner's very first call (lazy initialisation, allocation), timed before anything
        # else touches it; a compile inside Backend.compile is compile_seconds, not this.
        start = time.perf_counter()
        runner.run(_example_batch(model.eval_x, candidate.batch_size))
        first_call_ms = (time.perf_counter() - start) * 1e3
        deployed = predict_batches(run, model.eval_x, candidate.batch_size)
    # The runner was built and loaded, yet fails on real inputs: the runtime rejects the model at
    # run time, which makes the candidate as infeasible as a failed build.
    except Exception as exc:
        runner.close()
        raise BuildError(f"the compiled {candidate.backend} runner failed on the test split: "
                         f"{type(exc).__name__}: {one_line(exc)}") from exc
    problem = non_finite(deployed)
    if problem is not None:
        runner.close()
        # The fp32 reference was finite (checked before the build): this lowering's doing.
        raise BuildError(f"{precision_label(candidate)}: the model's outputs contain {problem} on the "
                         f"validation batch at {candidate.precision} while its fp32 reference is "
                         f"finite: {candidate.precision} on {candidate.backend} overflows or breaks "
                         f"this model")
    metrics = {
        **model.metrics,
        **fidelity_metrics(model.reference, deployed),
        "model_size_mb": model.artifact.size_bytes / 1e6,
        "build_seconds": model.build_seconds,
        "first_call_ms": first_call_ms,
    }
    missing = dict(model.missing)
    provenance = runner.describe()
    metrics.update(_graph_metrics(model, candidate.batch_size, missing, provenance))
    if model.eval_y is not None:
        metrics["accuracy"] = float(np.mean(deployed.argmax(axis=1) == model.eval_y))
    else:
        missing["accuracy"] = ("the model has no dataset (model.dataset) to score it on; "
                               "fidelity is measured on standard-normal stand-in inputs")
    if runner.compile_seconds is not None:
        metrics["compile_seconds"] = runner.compile_seconds
    if runner.tuning_seconds is not None:
        metrics["tuning_seconds"] = runner.tuning_seconds
    evaluator = candidate.model.get("evaluator")
    if evaluator is not None:
        try:
            metrics.update(run_user_evaluator(
                load_function(evaluator), evaluator,
                DeployedModel(run, candidate.batch_size, model.artifact.input_shape,
                              candidate.to_dict())))
        except ValueError as exc:
            runner.close()
            raise BuildError(str(exc)) from exc
        missing = {k: v for k, v in missing.items() if k not in metrics}
    provenance.update(model.provenance)
    provenance.update({"arch_id": candidate.arch_id, "artifact_format": model.artifact.format,
                       "artifact_path": str(model.artifact.path or "")})
    return PreparedCandidate(runner, _example_batch(model.eval_x, candidate.batch_size), metrics,
                             provenance, missing, rss_before, model.artifact, model, deployed)


def _graph_metrics(model: CandidateModel, batch_size: int, missing: dict[str, str],
                   provenance: dict[str, str]) -> dict[str, float]:
    """MACs, FLOPs and bytes of the model's ONNX graph at the candidate's batch size (per sample
    where that is what compares across batch sizes); missing, with why, when the graph has none.
    ``params_m`` of an ONNX file comes from here too (a family's is its torch module's)."""
    from dse.models import graph_stats

    names = ("macs_m", "flops_m", "weight_mb", "activation_mb", "arithmetic_intensity")
    if model.graph is None:
        missing.update(dict.fromkeys(names, "the artifact has no ONNX graph to count"))
        return {}
    try:
        stats = graph_stats(model.graph, model.fixed_batch or batch_size)
    except ValueError as exc:
        missing.update(dict.fromkeys(names, f"graph statistics failed: {exc}"))
        return {}
    if stats.unknown_ops:
        # Their work is not in the FLOP count: say so beside it rather than guess.
        provenance["flops_uncounted_ops"] = ",".join(stats.unknown_ops)
    metrics = {"macs_m": stats.macs / stats.batch_size / 1e6,
               "flops_m": stats.flops / stats.batch_size / 1e6,
               "weight_mb": stats.weight_bytes / 1e6,
               "activation_mb": stats.activation_bytes / 1e6,
               "arithmetic_intensity": stats.arithmetic_intensity}
    if "params_m" not in model.metrics:
        metrics["params_m"] = stats.params / 1e6
    return metrics


def check_deployable(candidate: Candidate, profile: HardwareProfile) -> Backend:
    """Everything that rules the candidate out on ``profile`` without heavy work (capability
    table, the profile's backends and precisions, arch, knobs): BuildError saying what; the
    backend when nothing does. A trial's worker asks it before training, ``dse verify`` before
    starting anything."""
    generative = is_llm_source(candidate.family)
    ok, reason = supports_device(candidate.backend, candidate.precision, profile.kind,
                                 profile.compute_capability, generative=generative)
    if not ok:
        raise BuildError(reason)
    if candidate.backend not in profile.backends:
        raise BuildError(f"device {profile.name!r} has no backend {candidate.backend!r} "
                         f"(it has {profile.backends})")
    if candidate.precision not in profile.precisions:
        raise BuildError(f"device {profile.name!r} does not support precision "
                         f"{candidate.precision!r} (it supports {profile.precisions})")
    try:
        backend = get_backend(candidate.backend)
    except KeyError as exc:
        # str() of a KeyError is the repr of its message; the message itself reads better.
        raise BuildError(str(exc.args[0]) if exc.args else repr(exc)) from exc
    if generative:
        try:  # a config the model source refuses is the architecture's failure
            checked_arch(candidate.model.get("llm", {}), candidate.arch)
        except ValueError as exc:
            raise ArchFailure(str(exc)) from exc
    elif not is_onnx_source(candidate.family):
        # An arch the source refuses, or one this device kind cannot run, is the architecture's
        # failure on this device, whatever its backend, precision or batch.
        try:
            source = model_source(candidate.family, candidate.model)
            source.validate(candidate.arch)
        except (KeyError, ValueError) as exc:
            raise ArchFailure(str(exc.args[0]) if exc.args else repr(exc)) from exc
        # Only a family declares kernels a device kind lacks; a factory says so when it runs.
        problem = (source.device_problem(candidate.arch, profile.kind)
                   if isinstance(source, ModelFamily) else None)
        if problem is not None:
            raise ArchFailure(problem)
    backend.check_knobs(candidate.knobs)
    backend.check_knob_device(candidate.knobs, profile.kind)
    return backend


def _example_batch(images: np.ndarray, batch_size: int) -> np.ndarray:
    """The first ``batch_size`` test images, cycling when the split is smaller than a batch."""
    return np.ascontiguousarray(np.take(images, np.arange(batch_size) % len(images), axis=0))
