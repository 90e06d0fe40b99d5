"""ExecuTorch: the backend, the ``.pte`` conversion, what a program runs (its plan), the ETDump
profiler and the bundle's run script.

Importing this package registers its backend(s); the runtime itself is imported on first use.
"""

from dse.backends.executorch.backend import ExecutorchBackend

__all__ = ["ExecutorchBackend"]
