"""What every part of dse may ask about a backend, declared once by the backend's own module
(:class:`BackendDeclaration`, registered with :func:`dse.backends.register_backend`): its artifact
format, int8 style, capability per (precision, device kind) with the reason, knobs, the libraries
whose versions go into provenance and device fingerprints, and its pip extra. The name lists,
schema enums and tables of the other layers are derived from here; nothing else names backends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from dse.plugins.registry import Registry

# An artifact's format is open: "onnx" and "torch" are built by dse.artifacts itself; any other
# (LiteRT's "tflite", ExecuTorch's "pte", a plugin runtime's own) by the backend's conversion (its
# declaration's ``conversion``), which dse.artifacts calls and caches.
ArtifactFormat = str
BUILT_FORMATS: frozenset[str] = frozenset({"onnx", "torch"})


def is_converted(artifact_format: str) -> bool:
    """Whether artifacts of ``artifact_format`` are made by a backend's own conversion rather
    than built by dse (ONNX export, the torch module itself)."""
    return artifact_format not in BUILT_FORMATS


# The precisions and the kinds of device a backend may run on, written once: the YAML's types
# (dse.spec) are these Literals, the name lists below are read from them.
Precision = Literal["fp32", "fp16", "bf16", "int8", "fp8"]
BackendDeviceKind = Literal["cpu", "cuda", "jetson"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
DEVICE_KINDS: tuple[str, ...] = get_args(BackendDeviceKind)


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
class ConversionRequest:
    """What a backend's conversion is given to write its artifact file.

    Attributes:
        module: the trained fp32 ``torch.nn.Module``, in eval mode, on the CPU. A conversion may
            not change it (copy it first: the fp32 reference and other candidates share it).
        input_shape: one sample's shape, without the batch dimension.
        batch_size: the candidate's batch size; converted files have static shapes, exported at
            this batch size (a runner pads a smaller batch to it).
        precision: the candidate's precision.
        calibration: training samples, (N, *input_shape) float32 numpy, for post-training
            quantization (int8); the same samples the ONNX int8 build calibrates on.
        knobs: the candidate's knobs; only those named in the conversion's ``build_knobs`` may
            change the file (they are part of its cache key).
    """

    module: Any
    input_shape: tuple[int, ...]
    batch_size: int
    precision: str
    calibration: Any
    knobs: Mapping[str, Any]


@dataclass(frozen=True)
class Conversion:
    """How a backend with a file format of its own (``.tflite``, ``.pte``) makes that file from
    the trained torch module. dse.artifacts calls ``convert`` on the device worker and caches the file
    (content-addressed, keyed by the weights, precision, batch size, ``build_knobs``, the
    calibration samples for int8, ``version``, the versions of ``libraries`` and the device
    fingerprint), so a file is converted once per device and configuration.

    Attributes:
        suffix: the file's extension, with its dot.
        version: bump when the conversion's settings change, so older cached files are not reused.
        libraries: distributions whose versions the file depends on (its converter).
        build_knobs: knobs that change the converted file (ExecuTorch's delegate choice).
        convert: ``(request, out_path) -> None``; writes the file at ``out_path``, raising
            BuildError (with the converter's message) when the model cannot be converted.
    """

    suffix: str
    version: int
    libraries: tuple[str, ...]
    build_knobs: frozenset[str]
    convert: Callable[[ConversionRequest, Path], None]


@dataclass(frozen=True)
class Standalone:
    """How an exported bundle's ``run.py`` runs the backend's model with only its runtime
    installed (``dse export``).

    Attributes:
        script: the dotted name of the module (e.g. ``dse.backends.tvm.run_script``) whose
            ``load(settings, folder)`` returns a function of one batch. It imports no dse, and
            dse never imports it: ``dse export`` copies its text into the bundle's ``run.py``.
        requirements: the distributions ``run.py`` needs, as ``requirements.txt`` lists them
            (pinned to the versions the bundle was exported with where installed).
    """

    script: str
    requirements: tuple[str, ...]


@dataclass(frozen=True)
class BackendDeclaration:
    """Everything about a backend that is known without its runtime.

    Attributes:
        name: the name search spaces, profiles and capability entries use.
        artifact_format: what the artifacts layer hands it: ``onnx`` (an ONNX file), ``torch``
            (the trained module), or any other short name: a file of the backend's own format,
            made by its ``conversion``.
        capability: ``(precision, device_kind) -> Capability``, for every precision of
            :data:`PRECISIONS` and kind of :data:`DEVICE_KINDS`.
        knobs: the runtime knobs its ``compile`` accepts.
        thread_knob: the knob (one of ``knobs``) that sets the runner's CPU threads.
        int8_symmetric: takes int8 only with symmetric activation ranges (zero points 0).
        float_at_runtime: an ONNX backend that takes the fp32 graph for fp16 and bf16 and lowers
            it itself (OpenVINO's inference-precision hint) instead of dse's fp16/bf16 graphs.
        conversion: how its artifact is made, for every format but those of
            :data:`BUILT_FORMATS`.
        libraries: distributions whose versions are recorded with each measurement.
        fingerprint: device-fingerprint entries: key -> distributions providing it, the first
            installed one recorded (a device-bound artifact is rebuilt when one changes).
        extra: the pip extra of dse that installs its runtime ("" when none does).
        summary: one line for listings.
        profiler: the per-operator profiler its ``Backend.profile_ops`` runs (``dse profile``),
            or "" when it has none.
        standalone: how an exported bundle's ``run.py`` runs it without dse (``dse export``), or
            None when it cannot.
        generation: ``(precision, device_kind) -> Capability`` for generative language models
            (``model: {llm: ...}``: prefill and decode over a KV cache, ``Backend.
            compile_generator``), or None for a backend that runs none.
        generation_knobs: the knobs a language model takes (None: every knob); ``dse validate``
            refuses the others in a language model's space.
        language_only_knobs: the knobs only a language model takes (a language model's weight
            or KV-cache format); ``dse validate`` refuses them in a fixed-shape model's space.
        generation_standalone: how an exported language model's ``run.py`` runs it without dse
            (its ``script``'s ``load_generator(settings, folder)`` returns a function of
            ``(prompt_ids, output_tokens)`` yielding each step's tokens), or None when it cannot.
    """

    name: str
    artifact_format: ArtifactFormat
    capability: Callable[[str, str], Capability]
    knobs: frozenset[str]
    thread_knob: str
    int8_symmetric: bool = False
    float_at_runtime: bool = False
    conversion: Conversion | None = None
    libraries: tuple[str, ...] = ()
    fingerprint: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    extra: str = ""
    summary: str = ""
    profiler: str = ""
    standalone: Standalone | None = None
    generation: Callable[[str, str], Capability] | None = None
    generation_knobs: frozenset[str] | None = None
    language_only_knobs: frozenset[str] = frozenset()
    generation_standalone: Standalone | None = None

    def __post_init__(self) -> None:
        if self.thread_knob not in self.knobs:
            raise ValueError(f"backend {self.name!r}: thread_knob {self.thread_knob!r} is not "
                             f"one of its knobs {sorted(self.knobs)}")
        if not self.artifact_format.isidentifier():
            raise ValueError(f"backend {self.name!r}: artifact_format {self.artifact_format!r} "
                             f"is not a short name (letters, digits, underscores)")
        if is_converted(self.artifact_format) != (self.conversion is not None):
            raise ValueError(f"backend {self.name!r}: a {self.artifact_format!r} artifact "
                             f"{'needs' if self.conversion is None else 'takes no'} conversion")
        for kind, named in (("generation_knobs", self.generation_knobs or frozenset()),
                            ("language_only_knobs", self.language_only_knobs)):
            if not named <= self.knobs:
                raise ValueError(f"backend {self.name!r}: {kind} "
                                 f"{sorted(named - self.knobs)} are not knobs")
        if self.conversion is not None and not self.conversion.build_knobs <= self.knobs:
            raise ValueError(f"backend {self.name!r}: build_knobs "
                             f"{sorted(self.conversion.build_knobs - self.knobs)} are not knobs")


    def kind_refusal(self, knobs: Iterable[str], generative: bool) -> str:
        """Why ``knobs`` do not apply to a language model (``generative``) or to a fixed-shape
        model on this backend, or "": the one rule of ``dse validate`` and of every compile."""
        if generative and self.generation_knobs is not None:
            refused = sorted(set(knobs) - self.generation_knobs)
            if refused:
                return (f"knob(s) {refused} of backend {self.name!r} are not for a generative "
                        f"model (model.llm); it takes {', '.join(sorted(self.generation_knobs))}")
        if not generative:
            refused = sorted(set(knobs) & self.language_only_knobs)
            if refused:
                return (f"knob(s) {refused} of backend {self.name!r} are for generative language "
                        f"models (model.llm) only; a fixed-shape model takes "
                        f"{', '.join(sorted(self.knobs - self.language_only_knobs))}")
        return ""

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


def generation_capability(backend: str, precision: str, device_kind: str) -> Capability | None:
    """The entry of ``backend`` for generative models at (precision, device kind): a refusal
    naming the backends that do generate when it runs none; None for a backend, precision or
    device kind dse does not know."""
    if backend not in BACKEND_DECLARATIONS or precision not in PRECISIONS \
            or device_kind not in DEVICE_KINDS:
        return None
    declared = BACKEND_DECLARATIONS[backend].generation
    if declared is None:
        able = [name for name, d in BACKEND_DECLARATIONS.items() if d.generation is not None]
        return Capability(False, f"{backend} runs no generative language model in dse; those "
                                 f"that do: {', '.join(able) or 'none'}")
    return declared(precision, device_kind)


def backends_loading(artifact_format: ArtifactFormat) -> frozenset[str]:
    """The backends that load artifacts of ``artifact_format``."""
    return frozenset(name for name, declared in BACKEND_DECLARATIONS.items()
                     if declared.artifact_format == artifact_format)
