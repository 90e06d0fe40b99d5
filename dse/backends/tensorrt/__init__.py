"""TensorRT: the backend, engine building and caching, the runner, the decisions that need no
TensorRT (settings, version), the layer profiler and the bundle's run script.

Importing this package registers its backend(s); the runtime itself is imported on first use.
"""

from dse.backends.tensorrt.backend import TensorRTBackend

__all__ = ["TensorRTBackend"]
