"""Candidate + trained weights -> the deployable artifact its backend loads."""

from __future__ import annotations

import hashlib
import io
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.artifacts.cache import ArtifactCache
from dse.artifacts.onnx_export import export_onnx
from dse.artifacts.quantize import quantize_int8
from dse.core import BuildError
from dse.plugins import (
    ArtifactFormat,
    BackendDeclaration,
    ConversionRequest,
    backends_loading,
    declaration,
    is_converted,
)

if TYPE_CHECKING:
    import torch

    from dse.accuracy import TrainedModel
    from dse.core import Candidate


# The precisions a torch artifact can be deployed at, and the torch dtype (by name) of each.
TORCH_DTYPES: dict[str, str] = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}

# Bump when export or quantization settings change, so cached files from before are not reused.
_EXPORT_VERSION = 1
_QUANTIZE_VERSION = 1


@dataclass(frozen=True)
class Artifact:
    """What a backend compiles: an ONNX file, (for the torch backends) the fp32 module itself, or
    a file of the backend's own format (``.tflite``, ``.pte``) converted from the module at the
    candidate's precision and batch size, with ``precision`` saying what the backend is to run.

    ``size_bytes`` is the size of the deployed weights: the file for ONNX and the converted
    formats, the serialised state_dict for torch.
    """

    format: ArtifactFormat
    path: Path | None
    precision: str
    input_shape: tuple[int, ...]
    size_bytes: int
    module: torch.nn.Module | None = None


def build_artifact(candidate: Candidate, trained: TrainedModel, cache: ArtifactCache,
                   calibration: np.ndarray) -> tuple[Artifact, float]:
    """The candidate's artifact and the seconds spent building it (cache hits cost 0).

    Raises BuildError when the backend or precision has no artifact, or a build step fails.
    """
    # Which artifact each backend loads, and its int8 style, are in its declaration: backends
    # build on this package, so it reads them from the registry below both.
    try:
        declared = declaration(candidate.backend)
    except KeyError as exc:
        raise BuildError(str(exc.args[0])) from None
    if declared.artifact_format == "torch":
        return _torch_artifact(candidate, trained), 0.0
    if is_converted(declared.artifact_format):
        return _converted(candidate, declared, trained, cache, calibration)
    fp32_path, seconds = _onnx_fp32(trained, cache)
    return _lowered(candidate, fp32_path, seconds, trained.input_shape, cache, calibration)


def build_file_artifact(candidate: Candidate, source: Path, sha256: str,
                        input_shape: tuple[int, ...], cache: ArtifactCache,
                        calibration: np.ndarray) -> tuple[Artifact, float]:
    """The artifact of a candidate whose model is the user's ONNX file ``source`` (content hash
    ``sha256``): the file itself at fp32, lowered like an exported model otherwise.

    The file is copied into the cache under its hash first, so every lowering of it is keyed by
    its content, not its name. Raises BuildError when the file changed since the campaign hashed
    it, or for a torch backend.
    """
    if candidate.backend not in backends_loading("onnx"):
        raise BuildError(f"an ONNX model file runs on the ONNX backends only, not "
                         f"{candidate.backend!r}")
    from dse.models import file_sha256

    try:
        found = file_sha256(source)
    except ValueError as exc:
        raise BuildError(str(exc)) from None
    if found != sha256:
        raise BuildError(f"the ONNX model {source} changed since the campaign read it (sha256 "
                         f"{found[:12]}, expected {sha256[:12]}); rerun the campaign")
    def copy(path: Path) -> None:
        shutil.copyfile(source, path)

    fp32_path, seconds = _timed(cache, {"stage": "onnx-file", "sha256": sha256}, ".onnx", copy)
    return _lowered(candidate, fp32_path, seconds, input_shape, cache, calibration)


def _lowered(candidate: Candidate, fp32_path: Path, seconds: float, input_shape: tuple[int, ...],
             cache: ArtifactCache, calibration: np.ndarray) -> tuple[Artifact, float]:
    """The fp32 ONNX file at the candidate's precision, and the total build seconds."""
    if candidate.precision == "fp32":
        return _onnx_artifact(fp32_path, "fp32", input_shape), seconds
    if candidate.precision == "int8":
        int8_path, int8_seconds = _onnx_int8(fp32_path, cache, calibration,
                                             symmetric=declaration(candidate.backend).int8_symmetric)
        return _onnx_artifact(int8_path, "int8", input_shape), seconds + int8_seconds
    if candidate.precision in ("fp16", "bf16"):
        if declaration(candidate.backend).float_at_runtime:  # the backend lowers fp32 itself
            return _onnx_artifact(fp32_path, candidate.precision, input_shape), seconds
        low_path, low_seconds = _onnx_float(fp32_path, cache, candidate.precision)
        return _onnx_artifact(low_path, candidate.precision, input_shape), seconds + low_seconds
    if candidate.precision == "fp8":
        fp8_path, fp8_seconds = _onnx_fp8(fp32_path, cache, calibration)
        return _onnx_artifact(fp8_path, "fp8", input_shape), seconds + fp8_seconds
    raise BuildError(f"no ONNX build for precision {candidate.precision!r}; known: fp32, fp16, "
                     f"bf16, int8, fp8")


def _torch_artifact(candidate: Candidate, trained: TrainedModel) -> Artifact:
    """The trained fp32 module itself: the torch backends apply the precision when they compile,
    so one module serves every precision. Nothing is built, so no build time.

    ``size_bytes`` is what a deployment at that precision would ship: the state_dict serialised
    with its floating-point tensors cast to the precision's dtype.
    """
    import torch

    if candidate.precision not in TORCH_DTYPES:
        raise BuildError(f"the torch artifact deploys precisions {sorted(TORCH_DTYPES)}; "
                         f"precision {candidate.precision!r} would need a quantized torch module")
    dtype = getattr(torch, TORCH_DTYPES[candidate.precision])
    # Cast in the state_dict itself (a fresh mapping) so its metadata is saved as for fp32.
    weights = trained.module.state_dict()
    for name, tensor in weights.items():
        if tensor.is_floating_point():
            weights[name] = tensor.to(dtype)
    buffer = io.BytesIO()
    torch.save(weights, buffer)
    return Artifact("torch", None, candidate.precision, trained.input_shape,
                    buffer.getbuffer().nbytes, trained.module)


def _converted(candidate: Candidate, declared: BackendDeclaration, trained: TrainedModel,
               cache: ArtifactCache, calibration: np.ndarray) -> tuple[Artifact, float]:
    """The backend's own file, converted from the trained module by its declared conversion and
    cached under everything the file depends on — on the device worker, with its fingerprint."""
    import torch

    from dse.artifacts.fingerprint import device_fingerprint, fingerprint_id, installed_version

    conversion = declared.conversion
    assert conversion is not None  # the declaration checks it for converted formats
    knobs = {name: candidate.knobs[name] for name in sorted(conversion.build_knobs)
             if name in candidate.knobs}
    # A missing library is "absent" here; the conversion itself names what to install.
    versions = [installed_version((library,)) for library in conversion.libraries]
    images = np.ascontiguousarray(calibration, dtype=np.float32)
    key: dict[str, Any] = {"stage": f"{declared.name}-convert", "version": conversion.version,
                           "weights": trained.key, "precision": candidate.precision,
                           "batch_size": candidate.batch_size, "knobs": knobs,
                           "libraries": versions, "torch": torch.__version__,
                           "device": fingerprint_id(device_fingerprint())}
    if candidate.precision == "int8":  # only then do the samples change the file
        key["calibration"] = _array_id(images)
    request = ConversionRequest(trained.module, trained.input_shape, candidate.batch_size,
                                candidate.precision, images, dict(candidate.knobs))
    path, seconds = _timed(cache, key, conversion.suffix,
                           lambda out: conversion.convert(request, out))
    return Artifact(declared.artifact_format, path, candidate.precision, trained.input_shape,
                    path.stat().st_size), seconds


def _onnx_artifact(path: Path, precision: str, input_shape: tuple[int, ...]) -> Artifact:
    return Artifact("onnx", path, precision, input_shape, path.stat().st_size)


def fp32_onnx(trained: TrainedModel, cache: ArtifactCache) -> tuple[Path, float]:
    """The trained module's fp32 ONNX export (cached) and the seconds it took (0 on a hit): the
    graph whose statistics describe the architecture whatever runtime deploys it."""
    return _onnx_fp32(trained, cache)


def _onnx_fp32(trained: TrainedModel, cache: ArtifactCache) -> tuple[Path, float]:
    import torch

    key = {"stage": "onnx-export", "version": _EXPORT_VERSION, "weights": trained.key,
           "torch": torch.__version__}
    return _timed(cache, key, ".onnx",
                  lambda path: export_onnx(trained.module, trained.input_shape, path))


def _onnx_int8(fp32_path: Path, cache: ArtifactCache, calibration: np.ndarray, *,
               symmetric: bool) -> tuple[Path, float]:
    import onnxruntime

    images = np.ascontiguousarray(calibration, dtype=np.float32)
    key: dict[str, Any] = {"stage": "int8-qdq", "version": _QUANTIZE_VERSION,
                           "input": fp32_path.stem, "calibration": _array_id(images),
                           "onnxruntime": onnxruntime.__version__}
    if symmetric:  # only then, so the keys of existing asymmetric entries stay valid
        key["symmetric"] = True
    return _timed(cache, key, ".onnx",
                  lambda path: quantize_int8(fp32_path, path, images, symmetric=symmetric))


def _onnx_float(fp32_path: Path, cache: ArtifactCache, precision: str) -> tuple[Path, float]:
    import onnx

    from dse.artifacts.onnx_precision import FLOAT_VERSION, convert_float

    # The result depends on onnx's opset converter and shape inference, hence its version.
    key = {"stage": f"{precision}-graph", "version": FLOAT_VERSION, "input": fp32_path.stem,
           "onnx": onnx.__version__}
    return _timed(cache, key, ".onnx", lambda path: convert_float(fp32_path, path, precision))


def _onnx_fp8(fp32_path: Path, cache: ArtifactCache,
              calibration: np.ndarray) -> tuple[Path, float]:
    import onnx
    import onnxruntime

    from dse.artifacts.onnx_precision import FP8_VERSION, quantize_fp8

    images = np.ascontiguousarray(calibration, dtype=np.float32)
    key = {"stage": "fp8-qdq", "version": FP8_VERSION, "input": fp32_path.stem,
           "calibration": _array_id(images), "onnxruntime": onnxruntime.__version__,
           "onnx": onnx.__version__}
    return _timed(cache, key, ".onnx", lambda path: quantize_fp8(fp32_path, path, images))


def _timed(cache: ArtifactCache, key: dict[str, Any], suffix: str,
           builder: Callable[[Path], None]) -> tuple[Path, float]:
    start = time.perf_counter()
    path, built = cache.get_or_build(key, suffix, builder)
    return path, (time.perf_counter() - start) if built else 0.0


def _array_id(array: np.ndarray) -> str:
    digest = hashlib.sha256(array.tobytes())
    digest.update(str(array.shape).encode())
    return digest.hexdigest()[:16]
