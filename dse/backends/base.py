"""The two interfaces every compiler/runtime implements: `Backend` (compile) and `Runner` (run)."""

from __future__ import annotations

import functools
import numbers
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

from dse.core import BuildError

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from dse.artifacts import Artifact
    from dse.backends.bundle_extras import BundleExtras
    from dse.backends.generation_runner import GenerationRunner
    from dse.backends.op_profile import GenerationProfileRequest, OpProfile, ProfileRequest
    from dse.models import LanguageModel
    from dse.plugins import BackendDeclaration
    from dse.spec import HardwareProfile

# Keys every runner's describe() has, so results can be compared across backends.
PROVENANCE_KEYS = ("backend", "backend_version", "device", "precision", "threads")


class Runner(ABC):
    """A compiled candidate, ready to run batches on its device.

    Life cycle: made by :meth:`Backend.compile`; then, in any order and any number of times,
    :meth:`run` (the compile's check, the accuracy pass, any batch up to ``batch_size``),
    :meth:`bound_call` (once per timed window: the call the harness times, bound to that
    window's fixed batch, then called for warm-up and timed iterations alike) and
    :meth:`describe`; :meth:`close` is called once, last, and frees the session. ``run`` or a
    bound call after ``close`` raises RuntimeError. A runner is also a context manager that
    closes itself.

    Thread safety: ``run`` and a bound call may be called from several threads at once — the
    offline scenario (``dse.measure.measure_offline``) keeps that many calls in flight — and
    must then give each call its own correct result: a runtime that runs requests concurrently
    gets one request per thread (OpenVINO, ONNX Runtime's I/O bindings, TensorRT's execution
    slots); one that cannot serialises the calls with a lock (LiteRT, ExecuTorch, TVM's VM).
    Compiling, ``bound_call`` itself, ``describe`` and ``close`` come from one thread; the farm
    runs one runner at a time per device.

    Attributes:
        batch_size: the batch size the candidate is measured at. ``run`` also accepts smaller
            batches (the accuracy pass ends on a partial one).
        compile_seconds: time the runtime spent compiling on the device inside
            :meth:`Backend.compile` (torch.compile, engine builds), or None for a runtime that
            compiles nothing there.
        tuning_seconds: time an auto-tuner spent searching schedules for the candidate on its
            device (TVM's MetaSchedule) when the tuning was made — also when this build reused
            its cached result — or None for a backend that tunes nothing.
        borrowed_bytes: bytes of host memory the runner runs from that were resident before it
            was built (a torch module on the CPU used as is, not copied): part of the model's
            footprint that the process's RSS already held (see ``dse.measure.footprint``).
    """

    batch_size: int
    compile_seconds: float | None = None
    tuning_seconds: float | None = None
    borrowed_bytes: int = 0

    @abstractmethod
    def run(self, x: np.ndarray) -> np.ndarray:
        """Logits for the batch ``x`` (N, C, H, W float32). Synchronous: returns when done."""

    def bound_call(self, x: np.ndarray) -> Callable[[], np.ndarray]:
        """The timed call: the logits of the fixed batch ``x``, with ``x`` bound to the runtime
        once, as a deployment binds its input and output tensors once and then only runs.

        Called once per timed window (``dse.trial.timing``, the plain window of
        ``dse.profiling``), before its warm-up; the function it returns is then called any
        number of times, each call synchronous like :meth:`run`, and is what the harness times.

        Input: ``x`` (exactly ``batch_size`` rows; ValueError otherwise) is copied once, here
        (:func:`bound_batch`), into memory the binding owns or the runtime's own input tensor: a
        later change to the caller's array is not seen. Writing fresh data into the input
        tensor, which a deployment does per request, is left out of the timed call; so is any
        conversion the runtime's input needs (an int8 file's quantization, a cast to fp16).
        On a GPU the copy from host memory to the device stays in the call (and the logits'
        copy back), as in :meth:`run`: a deployment fed from host memory pays it, and a kernel
        time alone would flatter the GPU against the CPU runners.

        Output: the ``(batch_size, classes)`` float32 logits, read as a deployment reads them:
        where the runtime has an output buffer it writes in place for the calling thread, a
        view of it, valid until that thread calls again (copy it to keep it).

        Thread safety: as :meth:`run`'s (see the class): each call, from whichever thread,
        returns the bound batch's logits. After :meth:`close` the function raises RuntimeError.

        This default calls :meth:`run` on the copy: right where ``run`` already is the
        deployment's path (a runner overriding nothing here says why in its docstring).
        """
        return functools.partial(self.run, bound_batch(x, self.batch_size))

    def runtime_clock(self, call: Callable[[], np.ndarray]) -> Callable[[], float] | None:
        """Where the runtime times its own inference: a function giving its duration, in ms, of
        the last call of ``call`` (a function :meth:`bound_call` returned) on the calling thread;
        None where it keeps no such clock (this default).

        It is what the runtime's own benchmark tool reports (OpenVINO's ``benchmark_app``
        reports ``InferRequest.latency``), so comparing the two is like with like; the harness
        reads it after each timed call (``runtime_p50_ms``, ``runtime_overhead_us``) and still
        times the call on the host clock.
        """
        return None

    @abstractmethod
    def describe(self) -> dict[str, str]:
        """Provenance: at least :data:`PROVENANCE_KEYS` (library version, device or provider
        actually used, threads), plus any backend-specific settings."""

    @abstractmethod
    def close(self) -> None:
        """Release the session and its memory. Idempotent."""

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class Backend(ABC):
    """A compiler/runtime: turns an :class:`~dse.artifacts.Artifact` into a :class:`Runner`.

    Life cycle: a subclass is registered at import with
    :func:`~dse.backends.backend_registry.register_backend`, which keeps one instance; :meth:`compile` is
    called once per candidate, on the device worker, after the artifact is built. Implementations
    import their runtime inside ``compile`` so that importing the backend costs nothing.

    Class attributes:
        declaration: everything about the backend that is known without its runtime (artifact
            format, capability entries, knobs, libraries, extra): the one place a backend is
            described; ``name``, ``knobs`` and ``thread_knob`` are read from it.
        name: the name search spaces and capability entries use.
        knobs: the runtime knobs ``compile`` accepts; any other raises BuildError.
        thread_knob: the knob (one of ``knobs``) that sets the runner's CPU threads; the runner's
            ``describe()["threads"]`` reports the count in effect.
    """

    declaration: ClassVar[BackendDeclaration]
    name: ClassVar[str]
    knobs: ClassVar[frozenset[str]]
    thread_knob: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = cls.__dict__.get("declaration")
        if declared is not None:
            cls.name, cls.knobs, cls.thread_knob = (declared.name, declared.knobs,
                                                    declared.thread_knob)

    @abstractmethod
    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        """A runner for ``artifact`` on the device ``profile`` describes.

        Raises BuildError for an artifact this backend cannot load, an unknown or invalid knob,
        or a runtime that refuses the model.
        """

    def compile_generator(self, model: LanguageModel, precision: str, knobs: Mapping[str, Any],
                          profile: HardwareProfile, batch_size: int, *,
                          cache_dir: Path | None = None) -> GenerationRunner:
        """A runner of the generative ``model`` (fp32, on the CPU, shared: copy before
        changing it) at ``precision`` on the device ``profile`` describes, for requests of
        ``batch_size`` sequences; ``cache_dir`` is where a runtime that converts the model may
        keep what it made (None: dse's user cache). Backends that declare a ``generation``
        capability override it; this default raises BuildError saying the backend runs none."""
        raise BuildError(f"backend {self.name!r} runs no generative language model")

    def start_runtime(self, profile: HardwareProfile) -> None:  # noqa: B027 - optional hook
        """Load the runtime's libraries and global state in this process, once, before any
        runner's memory footprint is read: that one-off cost belongs to the process, and would
        otherwise land on whichever candidate came first. Idempotent and cheap after the first
        call; backends whose runtime has such a cost override it. Never raises: a runtime that
        cannot start says so when a runner is compiled."""

    def check_knobs(self, knobs: Mapping[str, Any]) -> None:
        """Raise BuildError naming any knob this backend does not have, and the allowed ones."""
        unknown = sorted(set(knobs) - self.knobs)
        if unknown:
            raise BuildError(f"backend {self.name!r} has no knob(s) {unknown}; allowed: "
                             f"{sorted(self.knobs)}")

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        """Raise BuildError for an unknown knob or a value ``compile`` would refuse, decided
        without the runtime or a device, so ``dse validate`` can check a space's knob values
        before anything is trained. Backends with value rules override it."""
        self.check_knobs(knobs)

    def profile_ops(self, request: ProfileRequest) -> OpProfile:
        """Run the request's runner (or a profiled sibling of it) ``request.runs`` times under
        this backend's own per-operator profiler, writing its raw files into ``request.out_dir``;
        the time per operator. Backends with a profiler override it and name it in their
        declaration's ``profiler``; this default raises ProfilerMissing saying there is none."""
        from dse.backends.op_profile import ProfilerMissing

        raise ProfilerMissing(f"backend {self.name!r} has no per-operator profiler in dse")

    def generation_bundle(self, runner: GenerationRunner, model: LanguageModel,
                          out: Path) -> dict[str, Any]:
        """Write the language model as ``runner`` runs it into the folder ``out`` (an exported
        bundle's ``model/``: what the backend's ``generation_standalone`` script loads) and
        return the runtime's settings that script needs besides the knobs (``dse export``).
        This default raises BuildError: the backend exports no language model."""
        raise BuildError(f"backend {self.name!r} cannot export a language model in dse")

    def bundled_generator(self, folder: Path, settings: Mapping[str, Any], precision: str,
                          knobs: Mapping[str, Any], profile: HardwareProfile,
                          batch_size: int) -> GenerationRunner:
        """The language model of an exported bundle deployed on this device (``dse verify``):
        ``folder`` holds the model as :meth:`generation_bundle` wrote it, ``settings`` what it
        returned. This default raises BuildError: the backend exports no language model."""
        raise BuildError(f"backend {self.name!r} cannot deploy a language model's bundle in dse")

    def profile_generation(self, request: GenerationProfileRequest) -> dict[str, OpProfile]:
        """Run ``request.requests`` requests of a language model under this backend's own
        per-operator profiler, writing its raw files into ``request.out_dir``; the time per
        operator of each phase (``prefill``, ``decode``), one profiled call being one request's
        prefill or one decode step. This default raises ProfilerMissing saying there is none."""
        from dse.backends.op_profile import ProfilerMissing

        raise ProfilerMissing(f"backend {self.name!r} has no per-operator profiler of a "
                              f"language model's requests in dse")

    def bundle_extras(self, runner: Runner, artifact: Artifact) -> BundleExtras:
        """What an exported bundle's standalone ``run.py`` needs beyond the artifact file and
        the knobs (``dse export``, on the device worker, from the runner as compiled): settings
        it cannot read from the knobs, files it loads instead of the artifact. Backends whose
        ``run.py`` needs some override it; the default adds nothing."""
        from dse.backends.bundle_extras import BundleExtras

        return BundleExtras()

    def check_knob_device(self, knobs: Mapping[str, Any], device_kind: str) -> None:  # noqa: B027
        """Raise BuildError, in one line, for a knob value that cannot run on any device of
        ``device_kind`` (a CUDA-graph capture on a cpu device). Torch-free and device-free like
        :meth:`check_knob_values`: ``dse validate`` asks it per knob value and device of an
        experiment, the worker again before training. Backends with such knobs override it."""


# How a backend's messages name the files it loads, by artifact format (any other: ".<format>").
_FILE_KINDS = {"onnx": "ONNX"}


def artifact_file(artifact: Artifact, artifact_format: str, backend: str) -> Path:
    """The artifact's file, when it is one of ``artifact_format``; BuildError naming what
    ``backend`` was given instead (a torch module, another runtime's file)."""
    if artifact.format != artifact_format or artifact.path is None:
        raise BuildError(f"{backend} loads {_FILE_KINDS.get(artifact_format, '.' + artifact_format)} "
                         f"files, got a {artifact.format!r} artifact")
    return artifact.path


def delegation_entries(delegated: int, outside: Mapping[str, int]) -> dict[str, str]:
    """describe()'s account of a delegate (XNNPACK in LiteRT or ExecuTorch), the same keys for
    every backend that has one: ``delegation`` (``none`` when the delegate took nothing,
    ``partial`` when operators were left outside it, else ``full``), how many operators were left
    outside and which (``ops_outside_delegate_names``: ``NAME=count``, sorted). A fallback is
    thereby recorded, never passed off as a delegated result."""
    left = sum(outside.values())
    state = "none" if delegated == 0 else "partial" if left else "full"
    return {"delegation": state, "ops_outside_delegate": str(left),
            "ops_outside_delegate_names": ",".join(f"{name}={count}"
                                                   for name, count in sorted(outside.items()))}


def first_error_line(exc: BaseException) -> str:
    """The first line of an error that says something, at most 300 characters: torch.export,
    inductor and the converters built on them put the message first and a graph dump, stack or
    hints below it."""
    for line in str(exc).splitlines():
        text = line.strip()
        if text and not text.startswith(("Traceback", "Set TORCH", "File ")):
            return text[:300]
    return type(exc).__name__


def default_threads(profile: HardwareProfile) -> int:
    """The profile's thread budget, or every core when it sets none."""
    return profile.max_threads or os.cpu_count() or 1


def flag_knob(knobs: Mapping[str, Any], name: str, default: bool | None) -> bool | None:
    """Knob ``name`` as true or false (``default``, which may be None, when absent); BuildError
    for any other value."""
    value = knobs.get(name, default)
    if value is not None and not isinstance(value, bool):
        raise BuildError(f"knob {name!r} must be true or false, got {value!r}")
    return value


def bound_batch(x: np.ndarray, batch_size: int) -> np.ndarray:
    """``x`` as a bound call holds it (:meth:`Runner.bound_call`): a float32, C-order copy in
    memory of its own. ValueError unless ``x`` is a batch of ``batch_size`` rows: a binding is
    made for the batch the runner was compiled for."""
    import numpy as np

    if x.ndim < 2 or len(x) != batch_size:
        raise ValueError(f"a bound call takes one batch of {batch_size} (the runner's batch "
                         f"size), got an array of shape {x.shape}")
    return np.array(x, dtype=np.float32, order="C", copy=True)


def padded_batch(x: np.ndarray, batch_size: int, what: str) -> np.ndarray:
    """``x`` as contiguous float32, zero-padded to ``batch_size`` rows when it has fewer: for a
    runner built for one batch size (static shapes, a captured CUDA graph) fed the accuracy pass's
    last, partial batch. Eval-mode rows are independent, so the padding changes no real row; the
    caller slices the first ``len(x)`` rows of the result. ValueError for an empty or larger
    batch, naming ``what`` runs."""
    import numpy as np

    rows = len(x)
    if not 1 <= rows <= batch_size:
        raise ValueError(f"batch of {rows}; {what} runs 1 to {batch_size}")
    feed = np.ascontiguousarray(x, dtype=np.float32)
    if rows == batch_size:
        return feed
    return np.concatenate([feed, np.zeros((batch_size - rows, *feed.shape[1:]), np.float32)])


def thread_knob(knobs: Mapping[str, Any], name: str, default: int) -> int:
    """Knob ``name`` as a thread count >= 1 (``default`` when absent); BuildError otherwise."""
    value = knobs.get(name, default)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise BuildError(f"knob {name!r} must be an integer >= 1, got {value!r}")
    return int(value)
