"""LiteRT (formerly TensorFlow Lite): the trained module converted to a ``.tflite`` file by
litert_torch (:mod:`dse.backends.litert.converter`), run by the LiteRT interpreter on the CPU with
its XNNPACK delegate, or on its builtin kernels alone (knob ``xnnpack: false``).

Shapes are static: the file is exported at the candidate's batch size; a smaller batch (the
accuracy pass's last) is zero-padded to it and cut back.

Where the ops ran is read back from the interpreter, never assumed: XNNPACK is applied as the
interpreter's default delegate when its tensors are allocated, and it replaces each run of ops it
takes by one DELEGATE node whose inputs and outputs are that partition's boundary tensors. The ops
of the file that no partition covers run on builtin kernels; describe() counts both, names the
latter, and says whether delegation was full, partial or none — a silent fallback is recorded.

fp16 weights run as fp32 (XNNPACK turns them into fp32 at load). Full-integer int8 is offered:
its requantization costs more than it saves on layers as small as the test cnn's, and pays on
wider convolutions. Dynamic-range int8 (int8 weights, float activations; ai-edge-quantizer's
dynamic_wi8_afp32 or PT2E dynamic) is not offered: XNNPACK leaves its hybrid depthwise
convolutions on builtin kernels, so it runs partially delegated, slower than fp32 at lower
agreement — dominated on dse's depthwise-separable cnn family. Figures: docs/benchmarks.md,
"Backends".
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.backend_registry import register_backend
from dse.backends.base import (
    Backend,
    Runner,
    artifact_file,
    bound_batch,
    default_threads,
    delegation_entries,
    first_error_line,
    flag_knob,
    padded_batch,
    thread_knob,
)
from dse.backends.litert.converter import CONVERTER_DISTRIBUTIONS, SCHEMES, convert_to_tflite
from dse.backends.litert.profiler import PROFILER as LITERT_PROFILER
from dse.core import BuildError
from dse.plugins import BackendDeclaration, Capability, Conversion, Standalone

if TYPE_CHECKING:
    from dse.artifacts import Artifact
    from dse.backends.op_profile import OpProfile, ProfileRequest
    from dse.spec import HardwareProfile

RUNTIME = "ai-edge-litert"
_CUDA_REASON = ("LiteRT's GPU delegate targets mobile GPUs (OpenCL/OpenGL); a CUDA server's host "
                "CPU is measured with a cpu profile")
_RUNS_ON = {"cpu": "the host CPU", "jetson": "the Jetson's Arm CPU cores (LiteRT's GPU delegate is "
                                            "not used: it targets OpenCL/OpenGL mobile GPUs)"}
_RUNS_WITH = {
    "fp32": "fp32 kernels",
    "fp16": "fp16 weights, computed in fp32: XNNPACK turns them into fp32 when it loads them, as "
            "any CPU without fp16 arithmetic must (LiteRT's default delegate does not switch on "
            "XNNPACK's fp16 inference)",
    "int8": "full-integer int8 kernels, calibrated post-training quantization",
}


def _capability(precision: str, kind: str) -> Capability:
    if precision == "bf16":
        return Capability(False, "LiteRT has no bf16 kernels: neither its builtin kernels nor "
                                 "XNNPACK's delegate run bf16 tensors; use torch for bf16",
                          "bf16 kernels in LiteRT")
    if precision == "fp8":
        return Capability(False, "LiteRT has no fp8 tensor type or kernels; fp8 runs on TensorRT",
                          "fp8 kernels in LiteRT")
    if kind == "cuda":
        return Capability(False, _CUDA_REASON, "a cpu device profile")
    return Capability(True, f"LiteRT interpreter with the XNNPACK delegate on {_RUNS_ON[kind]}: "
                            f"{_RUNS_WITH[precision]}",
                      f"{RUNTIME} and litert-torch (dse[litert])")


def check_xnnpack(knobs: Mapping[str, Any]) -> bool:
    """The ``xnnpack`` knob (default true); BuildError for a value that is not true or false."""
    value = flag_knob(knobs, "xnnpack", True)
    assert value is not None  # a default was given
    return value


@dataclass(frozen=True)
class Delegation:
    """Where the ops of a .tflite file run in an interpreter.

    Attributes:
        model_ops: the ops of the file.
        delegated: ops a delegate partition took.
        outside: names of the ops that run on builtin kernels, one per op.
        partitions: DELEGATE nodes (one per contiguous run of delegated ops).
    """

    model_ops: int
    delegated: int
    outside: tuple[str, ...]
    partitions: int

    def settings(self) -> dict[str, str]:
        """The describe() entries."""
        return {**delegation_entries(self.delegated, Counter(self.outside)),
                "model_ops": str(self.model_ops), "delegated_ops": str(self.delegated),
                "delegate_partitions": str(self.partitions)}


def delegation(interpreter: Any, model_ops: int) -> Delegation:
    """Count which of the file's ``model_ops`` ops a delegate took, after ``allocate_tensors()``.

    The interpreter keeps the file's ops as nodes ``0 .. model_ops-1`` and appends one DELEGATE node
    per partition; a partition's ops are found by walking back from the DELEGATE node's outputs
    through their producers until its inputs (the partition's boundary) are reached.
    """
    ops = interpreter._get_ops_details()  # the one per-node view the Python API offers
    producer = {int(tensor): op["index"] for op in ops[:model_ops] for tensor in op["outputs"]}
    covered: set[int] = set()
    for node in ops[model_ops:]:
        boundary = {int(tensor) for tensor in node["inputs"]}
        pending = [producer[int(t)] for t in node["outputs"] if int(t) in producer]
        while pending:
            index = pending.pop()
            if index in covered:
                continue
            covered.add(index)
            pending.extend(producer[int(t)] for t in ops[index]["inputs"]
                           if int(t) not in boundary and int(t) in producer)
    outside = tuple(str(op["op_name"]) for op in ops[:model_ops] if op["index"] not in covered)
    return Delegation(model_ops, len(covered), outside, len(ops) - model_ops)


@functools.cache
def _start_litert() -> None:
    """Import the interpreter's native library once per process (failures are left to compile)."""
    try:
        importlib.import_module("ai_edge_litert.interpreter")
    except Exception:
        return


@register_backend
class LiteRtBackend(Backend):
    """Loads the converted .tflite file into a LiteRT interpreter on the CPU.

    Knobs: ``num_threads`` (the interpreter's and XNNPACK's thread pool; default the profile's
    ``max_threads``, else every core — always set, since Ray workers export OMP_NUM_THREADS=1) and
    ``xnnpack`` (default true: the XNNPACK default delegate; false: builtin kernels only, the op
    resolver without default delegates). Neither changes the file, so the conversion has no build
    knobs. Creating the interpreter (XNNPACK packs the weights then) is not reported as
    ``compile_seconds``, as for ONNX Runtime's session.
    """

    declaration = BackendDeclaration(
        name="litert", artifact_format="tflite", capability=_capability,
        knobs=frozenset({"num_threads", "xnnpack"}), thread_knob="num_threads",
        conversion=Conversion(suffix=".tflite", version=1, libraries=CONVERTER_DISTRIBUTIONS,
                              build_knobs=frozenset(), convert=convert_to_tflite),
        libraries=CONVERTER_DISTRIBUTIONS, fingerprint={"litert": (RUNTIME,)}, extra="litert",
        summary="LiteRT interpreter (XNNPACK delegate), converted by litert-torch",
        profiler=LITERT_PROFILER, standalone=Standalone("dse.backends.litert.run_script", (RUNTIME, "numpy")))

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        self.check_knobs(knobs)
        thread_knob(knobs, "num_threads", 1)
        check_xnnpack(knobs)

    def start_runtime(self, profile: HardwareProfile) -> None:
        _start_litert()

    def profile_ops(self, request: ProfileRequest) -> OpProfile:
        """LiteRT's profiler over a profiled sibling of the runner: the same file compiled by
        LiteRT's CompiledModel with the runner's threads and kernels
        (:mod:`dse.backends.litert.profiler`)."""
        from dse.backends.litert.profiler import Settings, profile_tflite

        runner = request.runner
        if not isinstance(runner, LiteRtRunner):
            raise BuildError(f"litert: profile_ops takes a LiteRtRunner, got "
                             f"{type(runner).__name__}")
        path = artifact_file(request.artifact, "tflite", self.name)
        settings = Settings(thread_knob(request.knobs, "num_threads",
                                        default_threads(request.profile)),
                            check_xnnpack(request.knobs))
        return profile_tflite(path, runner.feed(request.batch), runner.output_shape,
                              runner.output_dtype, settings, request.runs, request.out_dir)

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        self.check_knob_values(knobs)
        path = artifact_file(artifact, "tflite", self.name)
        threads = thread_knob(knobs, "num_threads", default_threads(profile))
        xnnpack = check_xnnpack(knobs)
        if profile.kind == "cuda":
            raise BuildError(_CUDA_REASON)
        try:
            module = importlib.import_module("ai_edge_litert.interpreter")
        except ImportError as exc:
            raise BuildError(f"litert: ai-edge-litert cannot be imported ({exc}); install "
                             f"dse[litert]") from exc
        resolver = (module.OpResolverType.BUILTIN if xnnpack
                    else module.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        try:
            interpreter = module.Interpreter(model_path=str(path), num_threads=threads,
                                             experimental_op_resolver_type=resolver)
            model_ops = int(interpreter._interpreter.NumNodes())  # before the delegate is applied
            interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            raise BuildError(f"litert: the LiteRT interpreter could not load {path.name}: "
                             f"{type(exc).__name__}: {first_error_line(exc)}") from exc
        placed = delegation(interpreter, model_ops)
        runner = LiteRtRunner(interpreter, batch_size, {
            "backend": self.name, "backend_version": _version(RUNTIME),
            "device": "cpu", "device_kind": profile.kind, "precision": artifact.precision,
            "threads": str(threads), "delegate": "XNNPACK" if xnnpack else "none",
            "op_resolver": resolver.name, "quantization": SCHEMES.get(artifact.precision, "unknown"),
            "ai_edge_litert_version": _version(RUNTIME),
            "litert_torch_version": _version("litert-torch"),
            **placed.settings()})
        expected = (batch_size, *artifact.input_shape)
        if runner.input_shape != expected:
            raise BuildError(f"litert: {path.name} takes input {runner.input_shape}; the candidate "
                             f"runs {expected} (the file is converted at the batch size)")
        try:
            runner.run(np.zeros(expected, dtype=np.float32))
        except RuntimeError as exc:
            raise BuildError(f"litert: the first run of {path.name} failed: {first_error_line(exc)}") from exc
        return runner


class LiteRtRunner(Runner):
    """One LiteRT interpreter: ``run`` sets its input tensor, invokes it and copies the logits out.

    Thread safety: ``run`` may be called from several threads at once (the offline scenario does);
    a lock lets one call at a time use the interpreter, whose input and output tensors are shared
    state. A lock rather than an interpreter per thread: the deployment measured is one
    interpreter with ``num_threads`` threads — its memory, its XNNPACK thread pool — while an
    interpreter per calling thread would multiply both (N copies of the packed weights, N x
    ``num_threads`` threads against the profile's budget) and measure another deployment.
    ``invoke`` releases the GIL (checked with 2.3), so the waiting threads and telemetry still run.

    A file with int8 input and output (full-integer int8) is fed the batch quantized with the input
    tensor's scale and zero point, and its logits are dequantized with the output's.

    The timed call (:meth:`bound_call`) is how a deployment and LiteRT's benchmark tool drive an
    interpreter: the batch (quantized once for an int8 file) written into the input tensor once,
    then ``invoke()`` per call. The input tensor is the interpreter's, which ``run`` also writes:
    the runner remembers which call wrote it last, and a bound call writes it again only after
    another call did. The logits are copied out (``get_tensor``; a few hundred bytes): LiteRT
    refuses to invoke while a numpy view of its buffers is alive.
    """

    def __init__(self, interpreter: Any, batch_size: int, settings: dict[str, str]) -> None:
        self._interpreter: Any = interpreter
        self._lock = threading.Lock()
        # The bound call whose batch the input tensor holds (None: run's, or none yet).
        self._fed: object | None = None
        source, result = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
        self._input, self._output = source["index"], result["index"]
        self._input_dtype = np.dtype(source["dtype"])
        self._input_scale = _scale(source)
        self._output_scale = _scale(result)
        self.input_shape = tuple(int(size) for size in source["shape"])
        self.output_shape = tuple(int(size) for size in result["shape"])
        self.output_dtype = np.dtype(result["dtype"])
        self._settings = {**settings, "input_dtype": self._input_dtype.name,
                          "output_dtype": np.dtype(result["dtype"]).name}
        self.batch_size = batch_size

    def feed(self, x: np.ndarray) -> np.ndarray:
        """``x`` as the interpreter's input tensor takes it: padded to the batch size, quantized
        for an integer input."""
        feed = padded_batch(x, self.batch_size, "this litert runner (converted for one batch size)")
        if self._input_scale is not None:
            scale, zero = self._input_scale
            info = np.iinfo(self._input_dtype)
            feed = np.clip(np.rint(feed / scale) + zero, info.min, info.max).astype(self._input_dtype)
        return feed

    def run(self, x: np.ndarray) -> np.ndarray:
        if self._interpreter is None:
            raise RuntimeError("run() on a closed litert runner")
        count = x.shape[0]
        feed = self.feed(x)
        with self._lock:
            interpreter = self._interpreter
            if interpreter is None:
                raise RuntimeError("run() on a closed litert runner")
            interpreter.set_tensor(self._input, feed)
            self._fed = None
            interpreter.invoke()
            logits: np.ndarray = interpreter.get_tensor(self._output)  # a copy
        return self._logits(logits)[:count]

    def bound_call(self, x: np.ndarray) -> Callable[[], np.ndarray]:
        feed = self.feed(bound_batch(x, self.batch_size))
        token = object()

        def call() -> np.ndarray:
            with self._lock:
                interpreter = self._interpreter
                if interpreter is None:
                    raise RuntimeError("a bound call on a closed litert runner")
                if self._fed is not token:
                    interpreter.set_tensor(self._input, feed)
                    self._fed = token
                interpreter.invoke()
                logits: np.ndarray = interpreter.get_tensor(self._output)  # a copy
            return self._logits(logits)

        return call

    def _logits(self, raw: np.ndarray) -> np.ndarray:
        """The output tensor's values as float logits (dequantized for an int8 file)."""
        if self._output_scale is None:
            return raw
        scale, zero = self._output_scale
        return (raw.astype(np.float32) - np.float32(zero)) * np.float32(scale)

    def describe(self) -> dict[str, str]:
        return dict(self._settings)

    def close(self) -> None:
        with self._lock:
            self._interpreter = None


def _scale(details: Mapping[str, Any]) -> tuple[float, int] | None:
    """(scale, zero point) of a quantized integer input or output tensor; None for a float one."""
    if not np.issubdtype(np.dtype(details["dtype"]), np.integer):
        return None
    scale, zero = details["quantization"]
    if not scale:
        raise BuildError(f"litert: integer tensor {details.get('name')!r} has no quantization scale")
    return float(scale), int(zero)


def _version(distribution: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"
