"""Candidate -> deployable artifact: ONNX export, int8 quantization, content-addressed cache.

Importing this package imports no torch or onnxruntime; they load when a build needs them.
"""

from dse.build.artifact import (
    BACKEND_FORMATS,
    Artifact,
    ArtifactFormat,
    build_artifact,
    build_file_artifact,
)
from dse.build.cache import ArtifactCache
from dse.build.export import export_onnx
from dse.build.quantize import quantize_int8

__all__ = [
    "BACKEND_FORMATS",
    "Artifact",
    "ArtifactCache",
    "ArtifactFormat",
    "build_artifact",
    "build_file_artifact",
    "export_onnx",
    "quantize_int8",
]
