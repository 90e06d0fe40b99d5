"""ONNX Runtime: the session and runner every execution provider shares, and the backend of the CPU
execution provider. The CUDA and TensorRT providers' backends are in :mod:`dse.backends.onnxruntime.gpu`.

Every ORT backend compiles the same way (:func:`compile_session`): the session is created with
profiling on, run once on a batch of zeros, and where its nodes ran is read back from the profile
and checked (:mod:`dse.backends.onnxruntime.placement`), so a node that silently fell back to another
provider is a build error rather than part of a measurement.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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
    thread_knob,
)
from dse.backends.capabilities import FP8_CC
from dse.backends.onnxruntime.placement import CPU_PROVIDER, Placement, check_placement, profile_first_run
from dse.backends.onnxruntime.profiler import PROFILER as ORT_PROFILER
from dse.backends.onnxruntime.profiler import profile_ort_runner
from dse.core import BuildError
from dse.plugins import BackendDeclaration, Capability, Standalone

if TYPE_CHECKING:
    from dse.artifacts import Artifact
    from dse.backends.bundle_extras import BundleExtras
    from dse.backends.op_profile import OpProfile, ProfileRequest
    from dse.spec import HardwareProfile

# Knobs every ORT backend has.
SESSION_KNOBS = frozenset({"intra_op_threads", "inter_op_threads", "graph_optimization_level"})
# Knob value -> the member of onnxruntime.GraphOptimizationLevel it selects.
GRAPH_OPTIMIZATION_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                             "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}

# A provider as InferenceSession takes it: its name and its options (all strings).
ProviderSpec = tuple[str, dict[str, str]]


def choice_knob(knobs: Mapping[str, Any], name: str, allowed: Sequence[str], default: str) -> str:
    """Knob ``name`` as one of ``allowed`` (``default`` when absent); BuildError otherwise."""
    value = knobs.get(name, default)
    if not isinstance(value, str) or value not in allowed:
        raise BuildError(f"knob {name!r} must be one of {list(allowed)}, got {value!r}")
    return value


@dataclass(frozen=True)
class SessionSettings:
    """The session-level knobs, checked.

    ``intra_op_threads`` defaults to the profile's ``max_threads`` (else every core) and
    ``inter_op_threads`` to 1 (with sequential execution only one operator runs at a time). Both
    are always set on the session: the process environment is no guide, since Ray workers export
    ``OMP_NUM_THREADS=1``. ``graph_optimization_level`` is a key of
    :data:`GRAPH_OPTIMIZATION_LEVELS` (default "all").
    """

    intra_op_threads: int
    inter_op_threads: int
    graph_optimization_level: str

    @classmethod
    def from_knobs(cls, knobs: Mapping[str, Any], profile: HardwareProfile) -> SessionSettings:
        return cls.checked(knobs, default_threads(profile))

    @classmethod
    def checked(cls, knobs: Mapping[str, Any], default_intra_op: int = 1) -> SessionSettings:
        """The settings, BuildError naming a bad value (no profile needed: validation uses it)."""
        return cls(thread_knob(knobs, "intra_op_threads", default_intra_op),
                   thread_knob(knobs, "inter_op_threads", 1),
                   choice_knob(knobs, "graph_optimization_level",
                               list(GRAPH_OPTIMIZATION_LEVELS), "all"))


@dataclass(frozen=True)
class SessionPlan:
    """What a backend asks of ONNX Runtime.

    Attributes:
        backend: the backend's name, for messages and describe().
        providers: the providers in priority order, with their options; the first is the one the
            backend measures. ORT appends the CPU provider by itself.
        fallbacks: providers whose nodes are an acceptable part of the result (TensorRT's CUDA
            fallback); shape-only nodes may always run on the CPU.
        pinned_ops: operators that must run on the first provider itself, fallbacks or not.
        timed: whether the session's creation and first run are device compile work (engine
            builds, cuDNN algorithm search) reported as ``compile_seconds``.
        requires: what the first provider needs to initialise, named when ORT drops it.
    """

    backend: str
    providers: tuple[ProviderSpec, ...]
    fallbacks: tuple[str, ...] = ()
    pinned_ops: frozenset[str] = frozenset()
    timed: bool = False
    requires: str = ""

    @property
    def provider(self) -> str:
        return self.providers[0][0]


def onnx_path(artifact: Artifact, backend: str) -> Path:
    """The artifact's ONNX file; BuildError for any other kind of artifact."""
    return artifact_file(artifact, "onnx", backend)


class OrtRunner(Runner):
    """One ``InferenceSession``: ``run`` feeds its single input and returns its first output.

    The timed call (:meth:`bound_call`) runs the session through I/O binding, input and output
    buffers bound once, as a deployment does (:mod:`dse.backends.onnxruntime.binding`).

    Inputs and outputs are host memory on every provider: a GPU provider copies the input to the
    device and the logits back inside ``run`` and inside the bound call, which return when they
    are on the host (see :mod:`dse.backends.onnxruntime.gpu`).
    """

    def __init__(self, session: Any, batch_size: int, settings: dict[str, str]) -> None:
        self._session: Any = session
        self._input = session.get_inputs()[0].name
        self._output = session.get_outputs()[0].name
        self._settings = settings
        self.batch_size = batch_size
        # The session's plan, model file and settings, for a profiled sibling session.
        self.sibling: tuple[SessionPlan, Path, SessionSettings] | None = None

    @property
    def session(self) -> Any:
        """The ``InferenceSession`` (None once closed), for a runner that drives it otherwise."""
        return self._session

    def run(self, x: np.ndarray) -> np.ndarray:
        if self._session is None:
            raise RuntimeError("run() on a closed onnxruntime runner")
        feed = np.ascontiguousarray(x, dtype=np.float32)
        # Host arrays in and out, no I/O binding, on a GPU too: the copies to and from the device
        # belong in the timed call (see dse.backends.onnxruntime.gpu).
        result: np.ndarray = self._session.run([self._output], {self._input: feed})[0]
        return result

    def bound_call(self, x: np.ndarray) -> Callable[[], np.ndarray]:
        from dse.backends.onnxruntime.binding import io_bound_call

        if self._session is None:
            raise RuntimeError("bound_call() on a closed onnxruntime runner")
        return io_bound_call(lambda: self._session, self._input, self._output,
                             bound_batch(x, self.batch_size))

    def describe(self) -> dict[str, str]:
        if self._session is None:
            return dict(self._settings)
        # Read back from the session rather than echoed from the knobs: this is what ORT uses.
        options = self._session.get_session_options()
        threads = str(options.intra_op_num_threads)
        return {**self._settings, "threads": threads, "intra_op_threads": threads,
                "inter_op_threads": str(options.inter_op_num_threads),
                "graph_optimization_level": options.graph_optimization_level.name,
                "providers": ",".join(self._session.get_providers())}

    def close(self) -> None:
        self._session = None

    def profiled_sibling(self, profile_prefix: Path) -> Any:
        """A second session of the same model, plan and settings with profiling on, writing
        under ``profile_prefix`` (ONNX Runtime profiles only from a session's creation; this
        runner's own profile ended after its placement check)."""
        import onnxruntime as ort

        if self.sibling is None:
            raise BuildError("this ONNX Runtime runner was not made by compile_session: no "
                             "session plan to profile a sibling of")
        plan, path, settings = self.sibling
        options = _session_options(ort, settings, profile_prefix)
        return ort.InferenceSession(str(path), sess_options=options, providers=list(plan.providers))


def ort_bundle_extras(runner: Runner) -> BundleExtras:
    """The providers (with their options) an ONNX Runtime runner's session was made with, for a
    bundle's ``run.py``: the rest of the session's settings are its knobs."""
    from dse.backends.bundle_extras import BundleExtras

    sibling = getattr(runner, "sibling", None)
    if sibling is None:
        raise BuildError("this ONNX Runtime runner was not made by compile_session: its "
                         "providers are unknown")
    plan: SessionPlan = sibling[0]
    return BundleExtras(settings={"providers": [[name, dict(options)]
                                                for name, options in plan.providers]})


# ONNX Runtime as a bundle's run.py uses it: the CPU build serves the CPU provider.
ORT_STANDALONE = Standalone("dse.backends.onnxruntime.run_script", ("onnxruntime", "numpy"))


def compile_session(plan: SessionPlan, artifact: Artifact, settings: SessionSettings,
                    batch_size: int, device: str, extra: Mapping[str, str]) -> OrtRunner:
    """A runner for ``artifact`` on ``plan``'s providers, its placement checked.

    ``device`` and ``extra`` go into describe(). Raises BuildError when ORT cannot load the model,
    drops the requested provider, fails on the first run, or runs compute nodes elsewhere.
    """
    path = onnx_path(artifact, plan.backend)
    import onnxruntime as ort

    feed = np.zeros((batch_size, *artifact.input_shape), dtype=np.float32)
    # The trace lands in a private folder, deleted with whatever ORT wrote there.
    with tempfile.TemporaryDirectory(prefix="dse-ort-profile-") as scratch:
        options = _session_options(ort, settings, Path(scratch) / "profile")
        start = time.perf_counter()
        try:
            session = ort.InferenceSession(str(path), sess_options=options,
                                           providers=list(plan.providers))
        # ORT reports an unloadable model with its own exception types (Fail, InvalidGraph,
        # NotImplemented...), which share no base class below Exception.
        except Exception as exc:
            raise BuildError(f"onnxruntime could not load {path.name}: "
                             f"{type(exc).__name__}: {exc}") from exc
        providers = session.get_providers()
        if plan.provider not in providers:
            # ORT drops a provider that fails to initialise (missing CUDA/cuDNN/TensorRT
            # libraries, no device) with a log line, and runs on the rest.
            needs = f"; {plan.provider} needs {plan.requires}" if plan.requires else ""
            raise BuildError(f"{plan.backend}: onnxruntime dropped {plan.provider} when it created "
                             f"the session (it runs on {providers}){needs}; ORT's log says why")
        input_name = session.get_inputs()[0].name
        placement = profile_first_run(session, {input_name: feed})
        seconds = time.perf_counter() - start
    check_placement(placement, plan.backend, plan.provider, plan.fallbacks, plan.pinned_ops)
    runner = OrtRunner(session, batch_size, {
        "backend": plan.backend,
        "backend_version": ort.__version__,
        "device": device,
        "execution_provider": plan.provider,
        "precision": artifact.precision,
        "threads": str(settings.intra_op_threads),
        "providers": ",".join(providers),
        "intra_op_threads": str(settings.intra_op_threads),
        "inter_op_threads": str(settings.inter_op_threads),
        "execution_mode": "sequential",
        "graph_optimization_level": GRAPH_OPTIMIZATION_LEVELS[settings.graph_optimization_level],
        "onnxruntime_build_device": ort.get_device(),
        **placement_settings(placement),
        **extra,
    })
    if plan.timed:
        runner.compile_seconds = seconds
    runner.sibling = (plan, path, settings)
    return runner


def placement_settings(placement: Placement) -> dict[str, str]:
    """The describe() entries of a checked placement."""
    return {"nodes_by_provider": placement.summary(),
            "cpu_shape_nodes": str(sum(node.provider == CPU_PROVIDER and node.shape_only
                                       for node in placement.nodes)),
            "fused_subgraphs": str(sum(node.fused for node in placement.nodes))}


def _session_options(ort: Any, settings: SessionSettings, profile_prefix: Path) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = settings.intra_op_threads
    options.inter_op_num_threads = settings.inter_op_threads
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = getattr(
        ort.GraphOptimizationLevel, GRAPH_OPTIMIZATION_LEVELS[settings.graph_optimization_level])
    # Profiling switches itself off after the first run's trace is written (see ort_placement).
    options.enable_profiling = True
    options.profile_file_prefix = str(profile_prefix)
    return options


@functools.cache
def start_onnxruntime(provider: str) -> None:
    """Import ONNX Runtime and run one session of a one-node graph on ``provider``, once per
    process: its libraries and global environment (33 MB on the CPU here, before any model) are
    then resident before a candidate's footprint is read. Failures are left to the real
    compile, which reports them."""
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])], "start",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = min(model.ir_version, onnx.IR_VERSION, 10)
        session = ort.InferenceSession(model.SerializeToString(), providers=[provider])
        session.run(None, {"x": np.zeros(1, dtype=np.float32)})
    except Exception:  # the real compile reports a runtime that cannot start
        return


# The device-fingerprint entry of every ONNX Runtime backend: the installed build's version.
ORT_FINGERPRINT = {"onnxruntime": ("onnxruntime-gpu", "onnxruntime")}


def _capability(precision: str, kind: str) -> Capability:
    if kind != "cpu":
        return Capability(False, "the onnxruntime backend is ONNX Runtime's CPU execution provider: "
                                 "on a GPU device it would measure the host CPU; use "
                                 "onnxruntime_cuda or onnxruntime_tensorrt",
                          "a cpu device profile")
    if precision == "fp32":
        return Capability(True, "ONNX Runtime CPU execution provider", "onnxruntime")
    if precision == "int8":
        return Capability(
            True, "ONNX Runtime static int8 quantization (QDQ) on the CPU execution provider",
            "onnxruntime (with its quantization tools)")
    if precision == "fp8":
        return Capability(False, "CPUs have no fp8 arithmetic: ONNX Runtime's CPU provider would run "
                                 "fp8 Q/DQ as fp32; fp8 runs on TensorRT (tensorrt backend, compute "
                                 f"capability >= {FP8_CC})", "a GPU with fp8 tensor cores")
    if precision == "fp16":
        # Measured (onnxruntime 1.32, x86): the fp16 graph loads, but ORT inserts casts and runs
        # every Conv/Gemm in fp32 — 1.9x slower than the fp32 graph, and not an fp16 result.
        return Capability(False, "ONNX Runtime's CPU execution provider has no fp16 Conv/Gemm "
                                 "kernels on x86: it inserts casts and computes in fp32; use torch "
                                 "for fp16 on a CPU", "an execution provider with fp16 kernels")
    return Capability(False, "ONNX Runtime's CPU execution provider has no bf16 Conv kernel (the "
                             "bf16 graph does not load); use torch for bf16 on a CPU",
                      "an execution provider with bf16 kernels")


@register_backend
class OrtBackend(Backend):
    """Loads an ONNX artifact (fp32 or QDQ int8) into a CPU session.

    Knobs: those of :class:`SessionSettings`. The placement check runs here too (it costs ~1-4 ms
    per compile for the quickstart CNNs and cannot fail on the CPU provider): it puts the node
    count into describe() like the GPU backends do. The session's creation is not device compile
    work, so ``compile_seconds`` stays None.
    """

    declaration = BackendDeclaration(
        name="onnxruntime", artifact_format="onnx", capability=_capability, knobs=SESSION_KNOBS,
        thread_knob="intra_op_threads", libraries=("onnxruntime", "onnx"),
        fingerprint=ORT_FINGERPRINT, extra="onnxruntime",
        summary="ONNX Runtime, CPU execution provider",
        profiler=ORT_PROFILER, standalone=ORT_STANDALONE)

    def profile_ops(self, request: ProfileRequest) -> OpProfile:
        return profile_ort_runner(request)

    def bundle_extras(self, runner: Runner, artifact: Artifact) -> BundleExtras:
        return ort_bundle_extras(runner)

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        self.check_knobs(knobs)
        SessionSettings.checked(knobs)

    def start_runtime(self, profile: HardwareProfile) -> None:
        start_onnxruntime(CPU_PROVIDER)

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        self.check_knob_values(knobs)
        settings = SessionSettings.from_knobs(knobs, profile)
        onnx_path(artifact, self.name)
        plan = SessionPlan(self.name, ((CPU_PROVIDER, {}),))
        return compile_session(plan, artifact, settings, batch_size, CPU_PROVIDER, {})
