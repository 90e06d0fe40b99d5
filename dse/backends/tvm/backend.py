"""Apache TVM: the candidate's ONNX artifact imported into Relax, compiled for the device's target
(LLVM for the host CPU, CUDA on NVIDIA GPUs) and run by the Relax VM, with MetaSchedule
auto-tuning as a knob.

Imported from ONNX rather than from ``torch.export``: every candidate already has its ONNX file
(fp32, and the fp16 graph dse converts), the file is what ONNX Runtime measures too, so the two
compile the same graph; and the ONNX importer is TVM's most complete front end, while its
``torch.export`` importer follows torch's operator set release by release.

Shapes are static: the module is imported at the candidate's batch size (MetaSchedule tunes
concrete shapes); a smaller batch (the accuracy pass's last) is zero-padded to it and cut back.
"""

from __future__ import annotations

import numbers
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.backend_registry import register_backend
from dse.backends.base import (
    Backend,
    Runner,
    bound_batch,
    default_threads,
    padded_batch,
    thread_knob,
)
from dse.backends.capabilities import NO_GPU, gpu_runtime
from dse.backends.onnxruntime.backend import onnx_path
from dse.backends.tvm.threads import POOL_LOCK, allow_threads, set_threads, threads_in_effect
from dse.backends.tvm.tuning import TuningKey, apply_database, tuned_database
from dse.core import BuildError
from dse.models import file_sha256
from dse.plugins import BackendDeclaration, Capability, Standalone

if TYPE_CHECKING:
    from dse.artifacts import Artifact
    from dse.backends.bundle_extras import BundleExtras
    from dse.backends.op_profile import OpProfile, ProfileRequest
    from dse.spec import HardwareProfile

TVM_DISTRIBUTIONS = ("apache-tvm",)
# What profile_ops runs, named in the declaration and in each profile.
PROFILER = "TVM Relax VM instrument (per-call timing)"
# The largest tuning budget accepted: at MetaSchedule's cost of about a second per trial on a
# small CPU (docs/benchmarks.md, "Backends"), hours of tuning.
MAX_TUNING_TRIALS = 20_000
_INT8_REASON = ("TVM's Relax ONNX importer reads the QDQ graph but lowers QuantizeLinear/"
                "DequantizeLinear to float arithmetic (0.27 has no pass fusing them into int8 "
                "kernels): it would measure an fp32 model with extra work, not an int8 deployment")
# The name a bound call's closure is saved under in the runner's VM.
_BOUND_NAME = "dse_bound_main"


def _capability(precision: str, kind: str) -> Capability:
    if precision == "int8":
        return Capability(False, _INT8_REASON, "a Relax int8 lowering")
    if precision == "fp8":
        return Capability(False, "TVM's Relax ONNX importer has no fp8 lowering", "fp8 kernels")
    if kind == "jetson":
        return Capability(False, "PyPI's apache-tvm is built for x86-64 and CUDA servers; on a "
                                 "Jetson TVM must be built from source against JetPack's CUDA",
                          gpu_runtime(kind, "apache-tvm built with CUDA"))
    if kind == "cpu":
        if precision == "fp32":
            return Capability(True, "TVM Relax, LLVM code generation for the host CPU "
                                    "(MetaSchedule tuning with the tuning_trials knob)",
                              "apache-tvm")
        return Capability(False, f"LLVM emulates {precision} arithmetic on CPUs without native "
                                 f"{precision} vector units (TVM casts element by element): not a "
                                 f"{precision} deployment; use torch for {precision} on a CPU",
                          f"a CPU with native {precision} arithmetic")
    if precision in ("fp32", "fp16"):
        return Capability(True, f"TVM Relax, CUDA code generation ({precision}; DLight default "
                                f"schedules, MetaSchedule tuning with the tuning_trials knob)",
                          gpu_runtime(kind, "apache-tvm built with CUDA, and NVRTC"))
    return Capability(False, "TVM's bf16 CUDA lowering covers too few operators for dse's models",
                      "bf16 CUDA kernels in TVM")


def tuning_trials(knobs: Mapping[str, Any]) -> int:
    """The ``tuning_trials`` knob: 0 (default schedules) up to :data:`MAX_TUNING_TRIALS`."""
    value = knobs.get("tuning_trials", 0)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
            or not 0 <= int(value) <= MAX_TUNING_TRIALS:
        raise BuildError(f"knob 'tuning_trials' must be an integer from 0 (TVM's default "
                         f"schedules) to {MAX_TUNING_TRIALS}, got {value!r}")
    return int(value)


@register_backend
class TvmBackend(Backend):
    """Compiles the ONNX artifact with TVM for the profile's device and runs it on the Relax VM.

    Knobs: ``num_threads`` (TVM's runtime thread pool; default the profile's ``max_threads``,
    else every core; also the target's ``num-cores``, which MetaSchedule tunes parallel loops
    for) and ``tuning_trials`` (MetaSchedule trials in all, shared evenly over the model's
    operators; 0, the default, compiles TVM's default schedules). The tuning database is cached
    per device fingerprint, model, precision, batch size, target and budget
    (:mod:`dse.backends.tvm.tuning`); its cost is ``tuning_seconds``, the compile after it
    ``compile_seconds``.
    """

    declaration = BackendDeclaration(
        name="tvm", artifact_format="onnx", capability=_capability,
        knobs=frozenset({"num_threads", "tuning_trials"}), thread_knob="num_threads",
        libraries=(*TVM_DISTRIBUTIONS, "onnx"), fingerprint={"tvm": TVM_DISTRIBUTIONS},
        extra="tvm", summary="Apache TVM (Relax VM), MetaSchedule auto-tuning",
        profiler=PROFILER,
        # run.py loads the runner's executable, exported as a library (dse.backends.tvm.bundle).
        standalone=Standalone("dse.backends.tvm.run_script", (*TVM_DISTRIBUTIONS, "numpy")))

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        self.check_knobs(knobs)
        thread_knob(knobs, "num_threads", 1)
        tuning_trials(knobs)

    def start_runtime(self, profile: HardwareProfile) -> None:
        allow_threads()
        try:
            import tvm  # noqa: F401  # its libraries load once per process
        except ImportError:
            return

    def profile_ops(self, request: ProfileRequest) -> OpProfile:
        """The runner's executable in a second VM with an instrument timing every call it makes,
        run ``request.runs`` times (see :mod:`dse.backends.tvm.profiler`); FLOPs per kernel
        from its TIR, lowered again from the artifact."""
        from dse.backends.tvm.profiler import profile_vm

        runner = request.runner
        if not isinstance(runner, TvmRunner):
            raise BuildError(f"tvm profiles the runners it compiled, got a "
                             f"{type(runner).__name__}")
        import tvm
        from tvm import relax

        compiled, call = runner.profiled()
        flops = _kernel_flops(tvm, relax, request.artifact, runner.batch_size, compiled)
        on_cpu = compiled.device.dlpack_device_type() == tvm.cpu().dlpack_device_type()
        feed = np.ascontiguousarray(request.batch, dtype=np.float32)
        return profile_vm(compiled.machine, call, feed, request.runs, request.out_dir,
                          profiler=f"{PROFILER}, apache-tvm {tvm.__version__}",
                          where=str(compiled.target.kind.name),
                          sync=None if on_cpu else compiled.device.sync, flops=flops)

    def bundle_extras(self, runner: Runner, artifact: Artifact) -> BundleExtras:
        """The runner's compiled executable as a shared library (:mod:`dse.backends.tvm.bundle`)."""
        from dse.backends.tvm.bundle import tvm_bundle_extras

        if not isinstance(runner, TvmRunner) or runner._compiled is None:
            raise BuildError(f"tvm exports the open runners it compiled, got {runner!r}")
        return tvm_bundle_extras(runner._compiled.library, "cpu" if runner._on_cpu else "cuda")

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        self.check_knob_values(knobs)
        path = onnx_path(artifact, self.name)
        threads = thread_knob(knobs, "num_threads", default_threads(profile))
        trials = tuning_trials(knobs)
        allow_threads()
        try:
            import tvm
            from tvm import relax
        except ImportError as exc:
            raise BuildError(f"tvm: apache-tvm cannot be imported ({exc}); install dse[tvm]") from exc
        device, target, target_text = _device_and_target(tvm, profile, threads)
        start = time.perf_counter()
        module = _import_onnx(path, batch_size, artifact.input_shape)
        tuning: dict[str, str] = {"tuning_trials": str(trials)}
        tuning_seconds: float | None = None
        with tempfile.TemporaryDirectory(prefix="dse-tvm-") as scratch:
            try:
                if trials:
                    prepared = _pre_tuning(tvm, relax, module, target)
                    key = TuningKey(file_sha256(path), artifact.precision, batch_size, target_text,
                                    trials, _host_cpu(tvm, profile))
                    tune_start = time.perf_counter()
                    database = tuned_database(prepared, target, key, Path(scratch))
                    start += time.perf_counter() - tune_start  # tuning is not compile time
                    module = apply_database(prepared, target, database.folder)
                    tuning_seconds = database.tuning_seconds
                    tuning.update(tuned_tasks=str(database.tasks), tuning_reused=str(database.reused),
                                  tuning_database=str(database.entry))
                executable = tvm.compile(module, target=target)
            except BuildError:
                raise
            except Exception as exc:
                raise BuildError(f"tvm: compiling for {target_text} failed: "
                                 f"{type(exc).__name__}: {_first_line(exc)}") from exc
        with POOL_LOCK:
            set_threads(tvm, threads)
            # The executable's library, compiled and loaded: a runner keeps it (not the
            # executable, whose in-memory modules and constants would stay resident too) so a
            # profile can load a second VM from it.
            library = executable.jit()
            machine = relax.VirtualMachine(library, device)
        runner = TvmRunner(tvm, _Compiled(library, machine, device, target, bool(trials)),
                           batch_size, threads, {
            "backend": self.name, "backend_version": tvm.__version__,
            "device": str(device), "precision": artifact.precision,
            "threads": str(threads_in_effect(tvm)),
            "target": target_text, "importer": "relax.frontend.onnx", "executor": "relax VM",
            **tuning})
        runner.compile_seconds = time.perf_counter() - start
        runner.tuning_seconds = tuning_seconds
        return runner


@dataclass(frozen=True)
class _Compiled:
    """What a TVM runner runs, and what a profile rebuilds from it: the loaded library (a second
    VM loads from it without compiling), the VM, device and target, and whether MetaSchedule
    tuned it (its kernels then come from the tuning pipeline's fusion)."""

    library: Any
    machine: Any
    device: Any
    target: Any
    tuned: bool


class TvmRunner(Runner):
    """A Relax VM over the compiled module: host numpy in, the copy to the device and the logits'
    copy back inside ``run`` (which returns when they are on the host).

    TVM's thread pool is process-wide: a runner whose count another runner changed since sets
    its own back before it runs (a check costs well under a microsecond; the reset is rare).
    Calls from several threads take turns: a VM runs one call at a time.

    The timed call (:meth:`bound_call`) on a CPU is TVM's own timing path: the batch placed in
    a device tensor once and saved with ``main`` as a closure of the VM (``save_function``,
    which TVM provides for timing: no argument conversion or function lookup per call). On a
    GPU it is ``run``, whose copies to the device and back a deployment fed from host memory
    pays (see :mod:`dse.backends.onnxruntime.gpu`)."""

    def __init__(self, tvm: Any, compiled: _Compiled, batch_size: int, threads: int,
                 settings: dict[str, str]) -> None:
        self._tvm = tvm
        self._compiled: _Compiled | None = compiled
        self._lock = threading.Lock()
        self._threads = threads
        self._on_cpu = settings["device"].startswith("cpu")
        self._settings = settings
        self.batch_size = batch_size

    def run(self, x: np.ndarray) -> np.ndarray:
        compiled = self._compiled
        if compiled is None:
            raise RuntimeError("run() on a closed tvm runner")
        # A Relax VM keeps one frame stack: two calls at once corrupt it ("Check failed: reg <
        # frame->register_file.size()", seen in the conformance suite's concurrent calls).
        with self._lock:
            return self._invoke(compiled.machine, compiled.device, x)

    def bound_call(self, x: np.ndarray) -> Callable[[], np.ndarray]:
        compiled = self._compiled
        if compiled is None:
            raise RuntimeError("bound_call() on a closed tvm runner")
        if not self._on_cpu:
            return super().bound_call(x)
        tensor = self._tvm.runtime.tensor(bound_batch(x, self.batch_size), compiled.device)
        with self._lock:
            # One saved name: a later binding replaces the VM's closure, never adds one.
            compiled.machine.save_function("main", _BOUND_NAME, tensor)
            function = compiled.machine[_BOUND_NAME]

        def call() -> np.ndarray:
            with self._lock:
                if self._compiled is None:
                    raise RuntimeError("a bound call on a closed tvm runner")
                if threads_in_effect(self._tvm) != self._threads:
                    with POOL_LOCK:
                        set_threads(self._tvm, self._threads)
                output = function()
            result: np.ndarray = output.numpy()
            return result

        return call

    def _invoke(self, machine: Any, device: Any, x: np.ndarray) -> np.ndarray:
        count = x.shape[0]
        feed = padded_batch(x, self.batch_size, "this tvm runner (compiled for one batch size)")
        if self._on_cpu and threads_in_effect(self._tvm) != self._threads:
            with POOL_LOCK:
                set_threads(self._tvm, self._threads)
        output = machine["main"](self._tvm.runtime.tensor(feed, device))
        result: np.ndarray = output.numpy()
        return result[:count]

    def profiled(self) -> tuple[_Compiled, Callable[[np.ndarray], np.ndarray]]:
        """A fresh VM of this runner's executable (an instrument is set per VM, so the measured
        one stays as it is) and a call that runs it as ``run`` runs the measured one."""
        if self._compiled is None:
            raise RuntimeError("profiled() on a closed tvm runner")
        from tvm import relax

        with POOL_LOCK:
            set_threads(self._tvm, self._threads)
            machine = relax.VirtualMachine(self._compiled.library, self._compiled.device)
        sibling = replace(self._compiled, machine=machine)
        return sibling, lambda x: self._invoke(machine, sibling.device, x)

    def describe(self) -> dict[str, str]:
        return dict(self._settings)

    def close(self) -> None:
        self._compiled = None


def _import_onnx(path: Path, batch_size: int, input_shape: tuple[int, ...]) -> Any:
    """The ONNX file as a Relax module at the static shape (batch_size, *input_shape)."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    model = onnx.load(str(path))
    input_name = model.graph.input[0].name
    try:
        return from_onnx(model, shape_dict={input_name: [batch_size, *input_shape]},
                         keep_params_in_input=False)
    except Exception as exc:  # the importer raises many types for an operator it lacks
        raise BuildError(f"tvm: the Relax ONNX importer could not import {path.name}: "
                         f"{type(exc).__name__}: {_first_line(exc)}") from exc


def _kernel_flops(tvm: Any, relax: Any, artifact: Artifact, batch_size: int,
                  compiled: _Compiled) -> dict[str, float]:
    """Kernel name -> TVM's FLOP estimate per call, from the module lowered again the way
    ``tvm.compile`` lowered it for the runner (its kernels' names and TIR; MetaSchedule's
    schedules change loops, not the arithmetic counted)."""
    from dse.backends.tvm.profiler import lowered_flops

    module = _import_onnx(onnx_path(artifact, "tvm"), batch_size, artifact.input_shape)
    if compiled.tuned:
        module = _pre_tuning(tvm, relax, module, compiled.target)
    with compiled.target:
        return lowered_flops(_build_pipeline(relax, compiled.target), module)


def _build_pipeline(relax: Any, target: Any) -> Any:
    """The Relax pipeline ``tvm.compile`` runs for ``target`` (``relax.build``'s choice in
    ``tvm/relax/vm_build.py``, 0.27: a GPU target's own pipeline, else the generic one)."""
    if "gpu" in target.keys:
        try:
            return relax.get_default_pipeline(target)
        except (ValueError, AttributeError):
            pass
    return relax.get_pipeline("default")


def _device_and_target(tvm: Any, profile: HardwareProfile, threads: int) -> tuple[Any, Any, str]:
    """The TVM device and target for ``profile``, and the target in words (for provenance)."""
    if profile.kind == "cpu":
        from tvm.target import codegen

        # The host's CPU as LLVM names it: code generation and tuning for its vector units.
        spec: dict[str, Any] = {"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(),
                                "num-cores": threads}
        device = tvm.cpu(0)
    else:
        device = tvm.cuda(0)
        if not device.exist:
            raise BuildError(f"tvm: no CUDA device visible to TVM ({NO_GPU}, or apache-tvm was "
                             f"built without CUDA)")
        spec = {"kind": "cuda", "arch": f"sm_{device.compute_version.replace('.', '')}"}
    target = tvm.target.Target(spec)
    return device, target, str(target)


def _host_cpu(tvm: Any, profile: HardwareProfile) -> str:
    """The processor the tuning ran for, named in the tuning cache key."""
    from tvm.target import codegen

    return codegen.llvm_get_system_cpu() if profile.kind == "cpu" else "cuda"


def _pre_tuning(tvm: Any, relax: Any, module: Any, target: Any) -> Any:
    """The passes MetaSchedule's static-shape tuning pipeline runs before it extracts tasks:
    operators legalized to TIR and fused, so tasks are the fused kernels the VM will run."""
    with target:
        passes = tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                           relax.transform.CanonicalizeBindings(),
                                           relax.get_pipeline("zero")])
        return passes(module)


def _first_line(exc: BaseException) -> str:
    """The last non-empty line of a TVM error (its message; the lines above are its stack)."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(exc).__name__
