"""ExecuTorch: the trained module exported with ``torch.export``, lowered to the XNNPACK delegate
and serialised to a ``.pte`` program (:mod:`dse.backends.executorch.converter`, run and cached by
dse.artifacts), then executed by ExecuTorch's Python runtime (``executorch.runtime``) on the CPU.

On a Jetson the same program runs on the Arm CPU cores with XNNPACK; ExecuTorch's CUDA backend is
not used. What the program delegates is read back from the ``.pte`` at compile time
(:mod:`dse.backends.executorch.plan`) and recorded in describe(): operators that fell back to
ExecuTorch's portable kernels are counted and named, never passed off as a delegated result.

Shapes are static: the program is exported at the candidate's batch size; a smaller batch (the
accuracy pass's last) is zero-padded to it and cut back.
"""

from __future__ import annotations

import functools
import importlib.metadata
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.backend_registry import register_backend
from dse.backends.base import (
    Backend,
    Runner,
    artifact_file,
    bound_batch,
    default_threads,
    first_error_line,
    flag_knob,
    padded_batch,
    thread_knob,
)
from dse.backends.executorch.converter import INT8_SCHEME, convert
from dse.backends.executorch.plan import read_delegation
from dse.backends.executorch.profiler import PROFILER as EXECUTORCH_PROFILER
from dse.core import BuildError
from dse.plugins import BackendDeclaration, Capability, Conversion, Standalone

if TYPE_CHECKING:
    from dse.artifacts import Artifact
    from dse.backends.op_profile import OpProfile, ProfileRequest
    from dse.spec import HardwareProfile

_CUDA_REASON = ("a CUDA server's host CPU is measured with a cpu profile: the executorch backend "
                "runs XNNPACK on CPU cores (ExecuTorch's CUDA backend is not used)")
_BF16_REASON = ("ExecuTorch's XNNPACK partitioner takes no bf16 operator: the bf16 graph falls back "
                "whole to the portable kernels (measured 50x slower than fp32 XNNPACK on the test "
                "cnn): not an XNNPACK bf16 deployment")
_FP8_REASON = "ExecuTorch's XNNPACK delegate has no fp8 kernels, and CPUs have no fp8 arithmetic"
# ScalarType codes of the program's input (c10's numbering) -> the numpy dtype fed to it.
_INPUT_DTYPES: dict[int, np.dtype[Any]] = {6: np.dtype(np.float32), 5: np.dtype(np.float16)}


def _capability(precision: str, kind: str) -> Capability:
    if kind == "cuda":
        return Capability(False, _CUDA_REASON, "a cpu or jetson device profile")
    if precision in ("bf16", "fp8"):
        return Capability(False, _BF16_REASON if precision == "bf16" else _FP8_REASON,
                          f"{precision} kernels in ExecuTorch's XNNPACK delegate")
    where = ("the host CPU" if kind == "cpu" else
             "the Jetson's Arm CPU cores (ExecuTorch's CUDA backend is not used)")
    what = {"fp32": "fp32", "fp16": "fp16 (the module cast to half)", "int8": INT8_SCHEME}[precision]
    return Capability(True, f"ExecuTorch with the XNNPACK delegate on {where}: {what}",
                      "executorch and torchao" if precision == "int8" else "executorch")


@functools.cache
def _start() -> None:
    """Import ExecuTorch's runtime and make its thread pool, once per process."""
    try:
        from executorch.extension.pybindings import portable_lib
        from executorch.runtime import Runtime

        Runtime.get()
        portable_lib._threadpool_get_thread_count()
    except Exception:  # the real compile reports a runtime that cannot start
        return


class _ThreadPool:
    """ExecuTorch's one, process-wide thread pool, which XNNPACK runs every delegate call on.

    ``_unsafe_reset_threadpool(n)`` destroys the pool and makes a new one of ``n`` threads; each
    XNNPACK runtime keeps the pool it was created with (at ``load_method``), so after a resize
    every method loaded before it must be loaded again (measured: one run after a resize aborts
    the process with heap corruption). ``generation`` counts the resizes, so a runner knows when
    its method is stale. ``lock`` guards the pool, and every execution on it: a resize must not
    free the pool under a run, and pthreadpool's pool is driven by one caller at a time.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generation = 0

    def use(self, threads: int) -> None:
        """Size the pool to ``threads``; the caller holds :attr:`lock`."""
        from executorch.extension.pybindings import portable_lib

        if portable_lib._threadpool_get_thread_count() != threads:
            portable_lib._unsafe_reset_threadpool(threads)
            self.generation += 1
        in_effect = portable_lib._threadpool_get_thread_count()
        if in_effect != threads:
            raise BuildError(f"executorch: asked for {threads} threads, its thread pool runs "
                             f"{in_effect}")


_POOL = _ThreadPool()


@register_backend
class ExecutorchBackend(Backend):
    """Loads a ``.pte`` program into ExecuTorch's Python runtime on the CPU.

    Knobs: ``num_threads`` (ExecuTorch's thread pool, which XNNPACK runs on; default the profile's
    ``max_threads``, else every core; set on every compile, since Ray workers' OMP_NUM_THREADS=1
    does not reach it) and ``delegate`` (a build knob, default true: false converts without the
    XNNPACK partitioner, so ExecuTorch's portable kernels run everything, single-threaded). Loading
    the program is not device compile work (XNNPACK packs the weights), so ``compile_seconds``
    stays None.
    """

    declaration = BackendDeclaration(
        name="executorch", artifact_format="pte", capability=_capability,
        knobs=frozenset({"num_threads", "delegate"}), thread_knob="num_threads",
        conversion=Conversion(suffix=".pte", version=1, libraries=("executorch", "torchao"),
                              build_knobs=frozenset({"delegate"}), convert=convert),
        libraries=("executorch", "torchao"), fingerprint={"executorch": ("executorch",)},
        extra="executorch",
        summary="ExecuTorch (.pte), XNNPACK delegate on CPU cores, PT2E int8",
        profiler=EXECUTORCH_PROFILER,
        # executorch's runtime imports torch (its tensors are torch's) without declaring it.
        standalone=Standalone("dse.backends.executorch.run_script", ("executorch", "torch", "numpy")))

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        self.check_knobs(knobs)
        thread_knob(knobs, "num_threads", 1)
        flag_knob(knobs, "delegate", True)

    def start_runtime(self, profile: HardwareProfile) -> None:
        _start()

    def profile_ops(self, request: ProfileRequest) -> OpProfile:
        """ETDump over a sibling of the runner's program, loaded with the tracer on
        (:mod:`dse.backends.executorch.profiler`); the process's thread pool is held at the
        runner's size throughout, as a run holds it."""
        from dse.backends.executorch.profiler import profile_program

        runner = request.runner
        if not isinstance(runner, ExecutorchRunner):
            raise BuildError(f"executorch: profile_ops takes an ExecutorchRunner, got "
                             f"{type(runner).__name__}")
        path = artifact_file(request.artifact, "pte", self.name)
        threads = thread_knob(request.knobs, "num_threads", default_threads(request.profile))
        delegates = sorted(read_delegation(path).delegated)
        tensor = runner.input_tensor(request.batch)
        with _POOL.lock:
            _POOL.use(threads)
            return profile_program(path, tensor, delegates, request.runs, request.out_dir)

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        self.check_knob_values(knobs)
        path = artifact_file(artifact, "pte", self.name)
        if profile.kind == "cuda":
            raise BuildError(_CUDA_REASON)
        threads = thread_knob(knobs, "num_threads", default_threads(profile))
        try:
            import torch
            from executorch.runtime import Runtime
        except ImportError as exc:
            raise BuildError(f"executorch: the runtime cannot be imported ({exc}); install "
                             f"dse[executorch]") from exc
        Runtime.get()  # the process's runtime: made once, then returned
        delegation = read_delegation(path)
        runner = ExecutorchRunner(torch, path, batch_size, threads)
        runner.load(artifact.input_shape)
        runner.settings.update({
            "backend": self.name, "backend_version": importlib.metadata.version("executorch"),
            "device": "cpu", "precision": artifact.precision, "threads": str(threads),
            "delegate_knob": str(flag_knob(knobs, "delegate", True)).lower(),
            "quantization": {"int8": INT8_SCHEME, "fp16": "fp16 weights and activations (the module "
                             "cast with half())"}.get(artifact.precision, "none"),
            "runtime": "executorch.runtime (Python bindings, portable kernels + XNNPACK)",
            **delegation.settings()})
        return runner


class ExecutorchRunner(Runner):
    """One loaded ``forward`` method of a ``.pte`` program.

    Thread safety: ``run`` may be called from several threads at once (the offline throughput
    scenario does); calls take turns under the process-wide pool lock (:class:`_ThreadPool`) rather
    than each thread loading a method of its own. A method owns one set of memory-planned buffers
    and is not re-entrant, XNNPACK drives the one process-wide pool from one caller at a time
    anyway, and the lock is what makes a pool resize (another runner's thread count) safe: per-
    thread methods would only overlap the input and output copies, at a method's memory each.

    The timed call (:meth:`bound_call`) is ``executor_runner``'s loop: the inputs set once
    (``set_inputs``), then ``execute()`` per call, the logits read from the method's planned
    output memory (``get_outputs(clone_outputs=False)``) and copied out, a few hundred bytes,
    while the lock is held. ``Method.execute`` of ``executorch.runtime`` does all of it per call
    (outputs cloned as torch tensors); the binding's ``ExecuTorchMethod`` under it splits the
    steps. ``run`` sets the method's inputs too, and a reload (after a pool resize) drops them:
    the runner remembers which call set them last, and a bound call sets them again only then.
    """

    def __init__(self, torch: Any, path: Path, batch_size: int, threads: int) -> None:
        self._torch = torch
        self._path = path
        self._threads = threads
        self._program: Any = None
        self._method: Any = None
        self._generation = -1
        self._input_dtype: np.dtype[Any] = np.dtype(np.float32)
        self._closed = False
        # The bound call whose batch the loaded method's inputs hold (None: run's, or none).
        self._fed: object | None = None
        self.batch_size = batch_size
        self.settings: dict[str, str] = {}

    def load(self, input_shape: tuple[int, ...]) -> None:
        """Load the method on a pool of this runner's size, check its input against the candidate
        and run it once on zeros; BuildError when the runtime refuses the program."""
        with _POOL.lock:
            _POOL.use(self._threads)
            method = self._loaded()
            meta = self._program.metadata("forward")
            if meta.num_inputs() != 1 or meta.num_outputs() != 1:
                raise BuildError(f"executorch: {self._path.name}'s forward takes "
                                 f"{meta.num_inputs()} inputs and gives {meta.num_outputs()} "
                                 f"outputs; dse runs one image batch to one logits tensor")
            tensor = meta.input_tensor_meta(0)
            want = (self.batch_size, *input_shape)
            if tuple(tensor.sizes()) != want:
                raise BuildError(f"executorch: {self._path.name} was exported for input "
                                 f"{tuple(tensor.sizes())}, the candidate runs {want}")
            if tensor.dtype() not in _INPUT_DTYPES:
                raise BuildError(f"executorch: {self._path.name} takes input of ScalarType "
                                 f"{tensor.dtype()}; dse feeds float32 or float16")
            self._input_dtype = _INPUT_DTYPES[tensor.dtype()]
            try:
                method.execute([self._torch.from_numpy(np.zeros(want, self._input_dtype))])
            except Exception as exc:
                raise BuildError(f"executorch: the first run of {self._path.name} failed: "
                                 f"{type(exc).__name__}: {first_error_line(exc)}") from exc
        self.settings["input_dtype"] = str(self._input_dtype)

    def _loaded(self) -> Any:
        """The method, loaded afresh when the pool was resized since; the caller holds the lock."""
        if self._method is not None and self._generation == _POOL.generation:
            return self._method
        from executorch.runtime import Runtime

        # The stale method goes first; a new Program, since Program.load_method caches the method.
        self._method = self._program = None
        try:
            self._program = Runtime.get().load_program(self._path)
            self._method = self._program.load_method("forward")
        except Exception as exc:  # the runtime raises RuntimeError, ValueError... for a bad program
            raise BuildError(f"executorch: the runtime could not load {self._path.name}: "
                             f"{type(exc).__name__}: {first_error_line(exc)}") from exc
        self._generation = _POOL.generation
        self._fed = None
        return self._method

    def input_tensor(self, x: np.ndarray) -> Any:
        """``x`` as the method takes it: padded to the batch size, in its input dtype, a torch
        tensor."""
        feed = padded_batch(x, self.batch_size, "this executorch runner (exported for one batch size)")
        feed = feed.astype(self._input_dtype, copy=not feed.flags.writeable)
        return self._torch.from_numpy(feed)

    def run(self, x: np.ndarray) -> np.ndarray:
        if self._closed:
            raise RuntimeError("run() on a closed executorch runner")
        count = len(x)
        tensor = self.input_tensor(x)
        with _POOL.lock:
            if self._closed:
                raise RuntimeError("run() on a closed executorch runner")
            _POOL.use(self._threads)
            output = self._loaded().execute([tensor])[0]
            self._fed = None
        result: np.ndarray = output.float().numpy()
        return result[:count]

    def bound_call(self, x: np.ndarray) -> Callable[[], np.ndarray]:
        tensor = self.input_tensor(bound_batch(x, self.batch_size))
        token = object()

        def call() -> np.ndarray:
            with _POOL.lock:
                if self._closed:
                    raise RuntimeError("a bound call on a closed executorch runner")
                _POOL.use(self._threads)
                method = self._loaded()._method  # the binding's ExecuTorchMethod
                if self._fed is not token:
                    method.set_inputs([tensor])
                    self._fed = token
                method.execute()
                # Copied before the lock is let go: the next call, from any thread, writes
                # the same planned memory.
                output = method.get_outputs(clone_outputs=False)[0]
                result: np.ndarray = output.numpy().astype(np.float32, copy=True)
            return result

        return call

    def describe(self) -> dict[str, str]:
        return dict(self.settings)

    def close(self) -> None:
        with _POOL.lock:
            self._closed = True
            self._method = self._program = None
