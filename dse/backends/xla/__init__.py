"""XLA through JAX: the backend, its capability entries, the ONNX-to-jax lowering and its ops, the
device clients, the jax profiler, the exported function of a bundle and its run script.

Importing this package registers its backend(s); the runtime itself is imported on first use.
"""

from dse.backends.xla.backend import XlaBackend

__all__ = ["XlaBackend"]
