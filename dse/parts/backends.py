"""What every part of dse may ask about a backend, declared once by the backend's own module
(:class:`BackendDeclaration`, registered with :func:`dse.backends.register_backend`): its artifact
format, int8 style, capability per (precision, device kind) with the reason, knobs, the libraries
whose versions go into provenance and device fingerprints, and its pip extra. The name lists,
schema enums and tables of the other layers are derived from here; nothing else names backends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from dse.parts.registry import Registry

ArtifactFormat = Literal["onnx", "torch"]
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "fp8")
DEVICE_KINDS = ("cpu", "cuda", "jetson")


@dataclass(frozen=True)
class Capability:
    """Whether a backend runs a (precision, device kind), and why (not).

    Attributes:
        supported: whether dse can build and run the combination.
        reason: what runs it, or why nothing does; shown to the user as a trial's reason.
        requires: what the combination needs on the device (libraries, hardware features).
        min_compute_capability: the lowest CUDA compute capability it runs on; None where no
            GPU is involved or any CUDA GPU will do.
    """

    supported: bool
    reason: str
    requires: str = ""
    min_compute_capability: float | None = None


@dataclass(frozen=True)
class BackendDeclaration:
    """Everything about a backend that is known without its runtime.

    Attributes:
        name: the name search spaces, profiles and capability entries use.
        artifact_format: what the build layer hands it: an ONNX file or the torch module.
        capability: ``(precision, device_kind) -> Capability``, for every precision of
            :data:`PRECISIONS` and kind of :data:`DEVICE_KINDS`.
        knobs: the runtime knobs its ``compile`` accepts.
        thread_knob: the knob (one of ``knobs``) that sets the runner's CPU threads.
        int8_symmetric: takes int8 only with symmetric activation ranges (zero points 0).
        libraries: distributions whose versions are recorded with each measurement.
        fingerprint: device-fingerprint entries: key -> distributions providing it, the first
            installed one recorded (a device-bound artifact is rebuilt when one changes).
        extra: the pip extra of dse that installs its runtime ("" when none does).
        summary: one line for listings.
    """

    name: str
    artifact_format: ArtifactFormat
    capability: Callable[[str, str], Capability]
    knobs: frozenset[str]
    thread_knob: str
    int8_symmetric: bool = False
    libraries: tuple[str, ...] = ()
    fingerprint: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    extra: str = ""
    summary: str = ""

    def __post_init__(self) -> None:
        if self.thread_knob not in self.knobs:
            raise ValueError(f"backend {self.name!r}: thread_knob {self.thread_knob!r} is not "
                             f"one of its knobs {sorted(self.knobs)}")


BACKEND_DECLARATIONS: Registry[BackendDeclaration] = Registry(
    "backend", ("dse.backends",), lambda declared: f"the declaration of {declared.name!r}")


def backend_names() -> tuple[str, ...]:
    """Every registered backend's name, sorted."""
    return BACKEND_DECLARATIONS.names()


def declaration(name: str) -> BackendDeclaration:
    """The declaration of backend ``name``; KeyError listing the known backends."""
    return BACKEND_DECLARATIONS[name]


def capability(backend: str, precision: str, device_kind: str) -> Capability | None:
    """The capability entry, or None for a backend, precision or device kind dse does not know."""
    if backend not in BACKEND_DECLARATIONS or precision not in PRECISIONS \
            or device_kind not in DEVICE_KINDS:
        return None
    return BACKEND_DECLARATIONS[backend].capability(precision, device_kind)


def backends_loading(artifact_format: ArtifactFormat) -> frozenset[str]:
    """The backends that load artifacts of ``artifact_format``."""
    return frozenset(name for name, declared in BACKEND_DECLARATIONS.items()
                     if declared.artifact_format == artifact_format)
