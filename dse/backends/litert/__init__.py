"""LiteRT: the backend, the ``.tflite`` conversion, the C API profiler and the bundle's run
script.

Importing this package registers its backend(s); the runtime itself is imported on first use.
"""

from dse.backends.litert.backend import LiteRtBackend

__all__ = ["LiteRtBackend"]
