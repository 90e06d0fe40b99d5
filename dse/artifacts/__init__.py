"""Candidate -> deployable artifact: ONNX export, int8 quantization, content-addressed cache.

Importing this package imports no torch or onnxruntime; they load when a build needs them.
"""

from dse.artifacts.artifact import TORCH_DTYPES, Artifact, build_artifact, build_file_artifact, fp32_onnx
from dse.artifacts.cache import ArtifactCache
from dse.artifacts.fingerprint import (
    DEVICE_CACHE_ENV,
    TENSORRT_DISTRIBUTIONS,
    device_cache_root,
    device_fingerprint,
    fingerprint_id,
)
from dse.artifacts.onnx_export import export_onnx, warm_up_exporter
from dse.artifacts.quantize import quantize_int8
from dse.plugins import ArtifactFormat

__all__ = [
    "DEVICE_CACHE_ENV",
    "TENSORRT_DISTRIBUTIONS",
    "TORCH_DTYPES",
    "Artifact",
    "ArtifactCache",
    "ArtifactFormat",
    "build_artifact",
    "build_file_artifact",
    "device_cache_root",
    "device_fingerprint",
    "export_onnx",
    "fingerprint_id",
    "fp32_onnx",
    "quantize_int8",
    "warm_up_exporter",
]
