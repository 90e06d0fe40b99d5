"""Compilers/runtimes that turn an artifact into a runner, and the table of what each supports.

Each backend is one module here that declares and registers itself (``register_backend``); the
registry imports them on first use (and the modules named in ``$DSE_PLUGINS``), so importing this
package imports no backend, torch or onnxruntime.
"""

from dse.backends.backend_registry import BACKENDS, get_backend, register_backend
from dse.backends.base import PROVENANCE_KEYS, Backend, Runner, default_threads, first_error_line, thread_knob
from dse.backends.bundle_extras import BundleExtras
from dse.backends.capabilities import CAPABILITIES, Capability, supports, supports_device
from dse.backends.generation_runner import GenerationRunner
from dse.backends.op_profile import (
    DECODE,
    PHASES,
    PREFILL,
    GenerationProfileRequest,
    OpProfile,
    OpRecord,
    ProfileRequest,
    ProfilerMissing,
    timed_runs,
)
from dse.plugins import BackendDeclaration

__all__ = [
    "BACKENDS",
    "CAPABILITIES",
    "DECODE",
    "PHASES",
    "PREFILL",
    "PROVENANCE_KEYS",
    "Backend",
    "BackendDeclaration",
    "BundleExtras",
    "Capability",
    "GenerationProfileRequest",
    "GenerationRunner",
    "OpProfile",
    "OpRecord",
    "ProfileRequest",
    "ProfilerMissing",
    "Runner",
    "default_threads",
    "first_error_line",
    "get_backend",
    "register_backend",
    "supports",
    "supports_device",
    "thread_knob",
    "timed_runs",
]
