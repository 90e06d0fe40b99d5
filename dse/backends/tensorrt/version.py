"""Which TensorRT is installed, and what its major version means for building an engine.

TensorRT 10 still has weak typing (builder precision flags FP16, BF16, INT8, FP8); TensorRT 11
removed every weak-typing API: each network is strongly typed, so a precision comes from the graph
itself (fp16/bf16 casts, Q/DQ nodes) and the builder has no precision flags. dse knows these two
majors; an older or newer one is refused with a BuildError rather than half-supported.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

from dse.core import BuildError

SUPPORTED_MAJORS = (10, 11)
INSTALL_HINT = ("install TensorRT's Python bindings: on Jetson, JetPack's python3-libnvinfer "
                "(`apt install python3-libnvinfer`; a virtualenv needs --system-site-packages to "
                "see it); on x86, `pip install tensorrt-cu12` (or `pip install tensorrt`)")
_VERSION = re.compile(r"^(\d+)\.(\d+)")


@dataclass(frozen=True)
class TensorRTVersion:
    """A TensorRT version string (``tensorrt.__version__``, e.g. "10.3.0" or "11.0.0.1")."""

    text: str
    major: int
    minor: int

    @property
    def strongly_typed_only(self) -> bool:
        """Whether this TensorRT builds strongly typed networks only (no precision flags)."""
        return self.major >= 11

    def api_label(self, strongly_typed: bool) -> str:
        """How the engine is built, for provenance: "weakly typed 10", "strongly typed 11"..."""
        return f"{'strongly' if strongly_typed else 'weakly'} typed {self.major}"


def parse_version(text: str) -> TensorRTVersion:
    """The version ``text`` names; BuildError when it is unreadable or not a supported major."""
    match = _VERSION.match(text.strip())
    if match is None:
        raise BuildError(f"cannot read the TensorRT version {text!r}; expected 'MAJOR.MINOR...'")
    version = TensorRTVersion(text.strip(), int(match[1]), int(match[2]))
    if version.major not in SUPPORTED_MAJORS:
        newer = version.major > max(SUPPORTED_MAJORS)
        raise BuildError(
            f"TensorRT {version.text} is {'newer than' if newer else 'older than'} what dse "
            f"supports (majors {list(SUPPORTED_MAJORS)}); "
            + ("its API is unknown to dse: use TensorRT 10 or 11" if newer else
               "TensorRT < 10 has the binding-index API dse does not use: upgrade to 10 or 11"))
    return version


def import_tensorrt() -> Any:
    """The ``tensorrt`` module; BuildError saying what to install when it cannot be imported.

    Typed ``Any``: TensorRT ships no type stubs, and a module-level import would make importing
    dse depend on it.
    """
    try:
        return importlib.import_module("tensorrt")
    # OSError: the bindings import, but libnvinfer (or a CUDA library it needs) does not load.
    except (ImportError, OSError) as exc:
        raise BuildError(f"the tensorrt backend cannot import tensorrt ({type(exc).__name__}: "
                         f"{exc}); {INSTALL_HINT}") from exc
