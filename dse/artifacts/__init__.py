"""Candidate -> deployable artifact: ONNX export, int8 quantization, content-addressed cache.

Importing this package imports no torch or onnxruntime; they load when a build needs them.
"""

from dse.artifacts.artifact import Artifact, build_artifact, build_file_artifact
from dse.artifacts.cache import ArtifactCache
from dse.artifacts.onnx_export import export_onnx
from dse.artifacts.quantize import quantize_int8
from dse.plugins.backends import ArtifactFormat

__all__ = [
    "Artifact",
    "ArtifactCache",
    "ArtifactFormat",
    "build_artifact",
    "build_file_artifact",
    "export_onnx",
    "quantize_int8",
]
