"""Candidate -> a compiled runner plus the metrics known before timing (accuracy, size, build cost).

The device worker calls :func:`prepare_candidate` for each trial, then times the runner. Everything
that can rule a candidate out is checked first, cheapest first: capability table, device profile,
knobs, arch; only then are weights trained (or loaded) and the artifact built.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dse.backends import Runner, get_backend, supports_device
from dse.build import ArtifactCache, build_artifact
from dse.exceptions import BuildError
from dse.models import get_family
from dse.quality import (
    fidelity_metrics,
    load_digits_split,
    predict_batches,
    reference_logits,
    train_or_load,
)

if TYPE_CHECKING:
    from dse.backends import Backend
    from dse.candidate import Candidate
    from dse.spec import HardwareProfile, TrainingSpec

CALIBRATION_IMAGES = 256


@dataclass
class PreparedCandidate:
    """A candidate ready to be timed.

    ``example`` is one input batch of the candidate's batch size, drawn from the test split.
    ``metrics`` holds ``accuracy`` (of the deployed runner itself, on the held-out split: an int8
    candidate reports what int8 computes), ``params_m``, ``model_size_mb``, ``build_seconds`` and
    ``train_seconds``. ``provenance`` is the runner's description plus where its parts came from.
    """

    runner: Runner
    example: np.ndarray
    metrics: dict[str, float]
    provenance: dict[str, str]


def prepare_candidate(candidate: Candidate, training: TrainingSpec, profile: HardwareProfile,
                      cache_dir: Path) -> PreparedCandidate:
    """Train or load, build, compile and score ``candidate`` for the device ``profile``.

    Weights are cached under ``cache_dir / "trained"``, artifacts under
    ``cache_dir / "artifacts"``. Raises BuildError, with the reason, for any candidate that
    cannot exist on this device or fails to build; the caller records it as infeasible.
    """
    backend = _check(candidate, profile)
    try:
        trained = train_or_load(candidate.family, candidate.arch, training, cache_dir / "trained")
    except ValueError as exc:
        raise BuildError(f"cannot train {candidate.family!r} arch {candidate.arch}: {exc}") from exc
    split = load_digits_split(training.seed)
    artifact, build_seconds = build_artifact(
        candidate, trained, ArtifactCache(cache_dir / "artifacts"),
        split.x_train[:CALIBRATION_IMAGES])
    # Taken before compiling: a backend may cast or rewrite the module it is handed.
    reference = reference_logits(trained.module, split.x_test)
    runner = backend.compile(artifact, candidate.knobs, profile, candidate.batch_size)
    try:
        # The runner's very first call (lazy initialisation, allocation), timed before anything
        # else touches it; a compile inside Backend.compile is compile_seconds, not this.
        start = time.perf_counter()
        runner.run(_example_batch(split.x_test, candidate.batch_size))
        first_call_ms = (time.perf_counter() - start) * 1e3
        deployed = predict_batches(runner.run, split.x_test, candidate.batch_size)
    # The runner was built and loaded, yet fails on real inputs: the runtime rejects the model at
    # run time, which makes the candidate as infeasible as a failed build.
    except Exception as exc:
        runner.close()
        raise BuildError(f"the compiled {candidate.backend} runner failed on the test split: "
                         f"{type(exc).__name__}: {exc}") from exc
    metrics = {
        "accuracy": float(np.mean(deployed.argmax(axis=1) == split.y_test)),
        **fidelity_metrics(reference, deployed),
        "params_m": sum(p.numel() for p in trained.module.parameters()) / 1e6,
        "model_size_mb": artifact.size_bytes / 1e6,
        "build_seconds": build_seconds,
        "train_seconds": trained.train_seconds,
        "first_call_ms": first_call_ms,
    }
    if runner.compile_seconds is not None:
        metrics["compile_seconds"] = runner.compile_seconds
    provenance = runner.describe()
    provenance.update({
        "arch_id": candidate.arch_id,
        "weights_key": trained.key,
        "weights_cached": str(trained.cached),
        "fp32_accuracy": f"{trained.fp32_accuracy:.6f}",
        "artifact_format": artifact.format,
        "artifact_path": str(artifact.path) if artifact.path is not None else "",
        "calibration_images": str(min(CALIBRATION_IMAGES, len(split.x_train))),
    })
    return PreparedCandidate(runner, _example_batch(split.x_test, candidate.batch_size), metrics,
                             provenance)


def _check(candidate: Candidate, profile: HardwareProfile) -> Backend:
    """Everything that rules the candidate out without heavy work; the backend when none does."""
    ok, reason = supports_device(candidate.backend, candidate.precision, profile.kind,
                                 profile.compute_capability)
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
        get_family(candidate.family).validate(candidate.arch)
    except (KeyError, ValueError) as exc:
        # str() of a KeyError is the repr of its message; the message itself reads better.
        raise BuildError(str(exc.args[0]) if exc.args else repr(exc)) from exc
    backend.check_knobs(candidate.knobs)
    return backend


def _example_batch(images: np.ndarray, batch_size: int) -> np.ndarray:
    """The first ``batch_size`` test images, cycling when the split is smaller than a batch."""
    return np.ascontiguousarray(np.take(images, np.arange(batch_size) % len(images), axis=0))
