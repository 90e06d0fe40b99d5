"""ONNX Runtime: the CPU backend, the CUDA and TensorRT execution providers, I/O binding, CUDA
graphs, where each node ran, the per-node profiler and the bundle's run script.

Importing this package registers its backend(s); the runtime itself is imported on first use.
"""

from dse.backends.onnxruntime.backend import OrtBackend
from dse.backends.onnxruntime.gpu import OrtCudaBackend, OrtTensorrtBackend

__all__ = ["OrtBackend", "OrtCudaBackend", "OrtTensorrtBackend"]
