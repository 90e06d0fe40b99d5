"""Compilers/runtimes that turn an artifact into a runner, and the table of what each supports.

Importing this package registers every backend and imports no torch or onnxruntime.
"""

from dse.backends import ort as _ort  # noqa: F401 - registers "onnxruntime"
from dse.backends import ort_gpu as _ort_gpu  # noqa: F401 - registers the two ORT GPU backends
from dse.backends import tensorrt as _tensorrt  # noqa: F401 - registers "tensorrt"
from dse.backends import torch_compile as _torch_compile  # noqa: F401 - registers "torch_compile"
from dse.backends import torch_eager as _torch_eager  # noqa: F401 - registers "torch"
from dse.backends.base import PROVENANCE_KEYS, Backend, Runner, default_threads
from dse.backends.capabilities import CAPABILITIES, Capability, supports, supports_device
from dse.backends.registry import BACKENDS, get_backend, register_backend
from dse.backends.torch_compile import TorchCompileRunner

__all__ = [
    "BACKENDS",
    "CAPABILITIES",
    "PROVENANCE_KEYS",
    "Backend",
    "Capability",
    "Runner",
    "TorchCompileRunner",
    "default_threads",
    "get_backend",
    "register_backend",
    "supports",
    "supports_device",
]
