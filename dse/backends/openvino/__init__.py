"""OpenVINO: the backend (ONNX front end, CPU plugin), its runner, the kernels it ran, its
performance-counter profiler, a bundle's extras and run script.

Importing this package registers its backend(s); the runtime itself is imported on first use.
"""

from dse.backends.openvino.backend import OpenVinoBackend

__all__ = ["OpenVinoBackend"]
