"""The device side of ``dse export`` and ``dse verify``: a trial's deployed model taken apart
into a bundle's parts, and a bundle's model put back together, deployed and measured.

Both run on the device worker (:class:`dse.farm.worker.DeviceWorker`), which holds the node lock
and the device's probes; files travel back and forth as bytes.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dse.accuracy import non_finite
from dse.artifacts import Artifact, device_fingerprint
from dse.backends import default_threads, get_backend, thread_knob
from dse.core import BuildError, Candidate
from dse.deploy import MAX_SAMPLES, CarriedData, ExportedModel, VerifyRequest
from dse.models import model_source
from dse.trial.candidate_model import CandidateModel
from dse.trial.prepare import PreparedCandidate, deploy_model

if TYPE_CHECKING:
    from dse.measure import RunToRun
    from dse.spec import HardwareProfile


def export_prepared(candidate: Candidate, prepared: PreparedCandidate, profile: HardwareProfile,
                    run_to_run: RunToRun | None) -> ExportedModel:
    """The bundle's parts of a prepared (built, compiled and scored) candidate, with the
    device's run-to-run calibration."""
    model, artifact, outputs = prepared.model, prepared.artifact, prepared.outputs
    assert model is not None and artifact is not None and outputs is not None
    backend = get_backend(candidate.backend)
    extras = backend.bundle_extras(prepared.runner, artifact)
    count = min(MAX_SAMPLES, len(model.eval_x))
    data = CarriedData(
        np.ascontiguousarray(model.eval_x[:count], dtype=np.float32),
        None if model.eval_y is None else np.asarray(model.eval_y[:count]),
        np.asarray(model.reference[:count]), np.asarray(outputs[:count]))
    if artifact.path is not None:
        name, payload, cache_file = (f"model{artifact.path.suffix}", artifact.path.read_bytes(),
                                     artifact.path.name)
    else:
        name, payload, cache_file = "weights.pt", _state_dict_bytes(artifact), ""
    declared = backend.declaration
    wanted = declared.libraries + (declared.standalone.requirements
                                   if declared.standalone is not None else ())
    return ExportedModel(
        artifact_format=artifact.format, artifact_file=name, artifact=payload,
        cache_file=cache_file, extras=extras,
        threads=thread_knob(candidate.knobs, backend.thread_knob, default_threads(profile)),
        runtime=plain_strings(prepared.runner.describe()), input_shape=tuple(artifact.input_shape),
        fixed_batch=model.fixed_batch, data=data, fingerprint=plain_strings(device_fingerprint()),
        versions=versions_of(wanted),
        output_dtype=str(np.asarray(prepared.runner.run(prepared.example)).dtype),
        run_to_run=run_to_run)


def verify_prepared_model(request: VerifyRequest, profile: HardwareProfile,
                          scratch_root: Path) -> tuple[PreparedCandidate, Path]:
    """The bundle's model deployed on this device: its artifact written under ``scratch_root``
    (the folder returned, for the caller to remove), compiled, scored on the carried inputs.
    BuildError when it cannot be."""
    candidate = request.candidate
    backend = get_backend(candidate.backend)
    scratch_root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="verify-", dir=scratch_root))
    try:
        artifact = _artifact(request, folder)
        data = request.data
        model = CandidateModel(
            artifact, 0.0, data.inputs, data.labels, data.reference, request.fixed_batch,
            artifact.path if artifact.format == "onnx" else None, {}, {})
        return deploy_model(candidate, model, backend, profile), folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def compare_outputs(request: VerifyRequest, prepared: PreparedCandidate) -> tuple[float, float]:
    """How far the outputs now are from those recorded at export: the largest absolute
    difference, and the share of inputs with the same top output."""
    now, then = prepared.outputs, request.data.outputs
    assert now is not None
    if now.shape != then.shape or non_finite(now) is not None:
        raise BuildError(f"the deployed model gives outputs of shape {now.shape}; the bundle "
                         f"recorded {then.shape}")
    diff = float(np.max(np.abs(now.astype(np.float64) - then.astype(np.float64)))) \
        if now.size else 0.0
    agree = float(np.mean(now.argmax(axis=1) == then.argmax(axis=1))) if now.ndim == 2 else 1.0
    return diff, agree


def _artifact(request: VerifyRequest, folder: Path) -> Artifact:
    """The bundle's artifact as the backend compiles it: its file, or the torch module."""
    size = len(request.artifact)
    if request.artifact_format != "torch":
        path = folder / request.artifact_file
        path.write_bytes(request.artifact)
        return Artifact(request.artifact_format, path,
                        request.candidate.precision, request.input_shape, size)
    import torch

    candidate = request.candidate
    try:
        source = model_source(candidate.family, candidate.model)
        module = source.build(source.validate(candidate.arch))
        state = torch.load(io.BytesIO(request.artifact), map_location="cpu", weights_only=True)
        module.load_state_dict(state)
    except (KeyError, ValueError, RuntimeError, TypeError, ImportError) as exc:
        raise BuildError(f"cannot rebuild the torch module of {candidate.family!r} arch "
                         f"{candidate.arch} from the bundle's weights: "
                         f"{exc.args[0] if exc.args else exc}") from exc
    module.eval()
    return Artifact("torch", None, candidate.precision, request.input_shape, size, module)


def _state_dict_bytes(artifact: Artifact) -> bytes:
    import torch

    assert artifact.module is not None
    buffer = io.BytesIO()
    torch.save(artifact.module.state_dict(), buffer)
    return buffer.getvalue()


def plain_strings(values: dict[str, str]) -> dict[str, str]:
    """Plain ``str`` keys and values: a runtime may report versions as ``str`` subclasses (torch's
    ``TorchVersion``), which a YAML writer refuses."""
    return {str(key): str(value) for key, value in values.items()}


def versions_of(names: tuple[str, ...]) -> dict[str, str]:
    """The installed version of each distribution of ``names`` that is installed."""
    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found
