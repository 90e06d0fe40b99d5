"""Compilers/runtimes that turn an artifact into a runner, and the table of what each supports.

Each backend is one module here that declares and registers itself (``register_backend``); the
registry imports them on first use (and the modules named in ``$DSE_PLUGINS``), so importing this
package imports no backend, torch or onnxruntime.
"""

from dse.backends.backend_registry import BACKENDS, get_backend, register_backend
from dse.backends.base import PROVENANCE_KEYS, Backend, Runner, default_threads
from dse.backends.capabilities import CAPABILITIES, Capability, supports, supports_device
from dse.plugins.backends import BackendDeclaration

__all__ = [
    "BACKENDS",
    "CAPABILITIES",
    "PROVENANCE_KEYS",
    "Backend",
    "BackendDeclaration",
    "Capability",
    "Runner",
    "default_threads",
    "get_backend",
    "register_backend",
    "supports",
    "supports_device",
]
