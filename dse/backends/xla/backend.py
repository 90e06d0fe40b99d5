"""XLA through JAX: the candidate's ONNX artifact lowered to a jax function, compiled by XLA for the
CPU (or, with jax's CUDA plugin, a CUDA GPU).

Route: :mod:`dse.backends.xla.lowering` turns the ONNX graph into a jax function; ``jax.jit(...)
.lower(...)`` gives its HLO and ``.compile()`` has XLA compile it for the device. The optimised
HLO of the candidate's batch is written beside the artifact (``<artifact>.xla-<hash>.hlo.txt``,
named in describe() as ``hlo_file``) as proof of what XLA compiled. (torchax, the torch route,
does not import with torch 2.13.) jax is imported inside ``compile`` and ``start_runtime`` only.

Threads: XLA's CPU client sizes its intra-op thread pool once, when the client is created, from
``$NPROC`` (else the CPUs the process may run on); no compile or run option changes it
(``xla_cpu_multi_thread_eigen=false`` still runs on the pool: measured, jax 0.10.2). So each
thread count gets a CPU client of its own, created on first use with ``NPROC`` set, and a runner
compiles and runs on that client's device: ``num_threads`` is honoured per runner. describe()
reports the pool's size read back from the threads the client started (Linux).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.backend_registry import register_backend
from dse.backends.base import Backend, Runner, bound_batch, default_threads, thread_knob
from dse.backends.onnxruntime.backend import onnx_path
from dse.backends.op_profile import ProfilerMissing
from dse.backends.xla.bundle import XLA_STANDALONE
from dse.backends.xla.capability import xla_capability
from dse.backends.xla.device import xla_device
from dse.backends.xla.profiler import PROFILER as XLA_PROFILER
from dse.core import BuildError
from dse.plugins import BackendDeclaration
from dse.util import atomic_write_text

if TYPE_CHECKING:
    import jax

    from dse.artifacts import Artifact
    from dse.backends.bundle_extras import BundleExtras
    from dse.backends.op_profile import OpProfile, ProfileRequest
    from dse.backends.xla.lowering import LoweredGraph
    from dse.spec import HardwareProfile

# Knob -> its allowed values, for the knobs with a fixed set (num_threads and the autotune level
# are checked as integers).
CHOICES: dict[str, tuple[Any, ...]] = {
    # constants: the weights are baked into the executable (XLA lays them out at compile time);
    # arguments: passed on every call, which keeps the HLO small but costs per call (measured on
    # the default cnn, batch 4: 463 us against 346 us).
    "weights": ("constants", "arguments"),
    # taps: 2-D depthwise Conv as a fused sum of shifted slices (XLA's CPU grouped convolution
    # is a generic loop, 3.5x slower on the default cnn); grouped: lax's grouped convolution.
    "depthwise_conv": ("taps", "grouped"),
    # jax's precision for fp32 dots and convolutions: "highest" is true fp32; "high" and
    # "default" let a GPU use TF32 / bf16 passes (the CPU computes fp32 either way).
    "matmul_precision": ("highest", "high", "default"),
    "xla_cpu_enable_fast_math": (False, True),
}
AUTOTUNE_LEVELS = range(5)
KNOBS = frozenset({"num_threads", "xla_gpu_autotune_level", *CHOICES})
# XLA debug options passed per compile, and the device platform each applies to.
CPU_OPTIONS = ("xla_cpu_enable_fast_math",)
GPU_OPTIONS = ("xla_gpu_autotune_level",)
# Defaults where the device decides: the depthwise rewrite is for XLA's CPU backend only.
DEFAULT_DEPTHWISE = {"cpu": "taps", "cuda": "grouped"}


@dataclass(frozen=True)
class XlaSettings:
    """The knobs, checked; device-specific ones resolved against the profile's device kind."""

    threads: int
    weights: str
    depthwise_conv: str
    matmul_precision: str
    compiler_options: dict[str, Any]

    @classmethod
    def from_knobs(cls, knobs: Mapping[str, Any], profile: HardwareProfile) -> XlaSettings:
        platform = "cpu" if profile.kind == "cpu" else "cuda"
        wrong = CPU_OPTIONS if platform == "cuda" else GPU_OPTIONS
        for name in wrong:
            if name in knobs:
                raise BuildError(f"knob {name!r} sets XLA's {'GPU' if platform == 'cpu' else 'CPU'}"
                                 f" compiler; device {profile.name!r} is a {profile.kind} device, "
                                 f"which XLA compiles for its {platform} backend")
        options = {name: knobs[name] for name in (*CPU_OPTIONS, *GPU_OPTIONS) if name in knobs}
        return cls(thread_knob(knobs, "num_threads", default_threads(profile)),
                   knobs.get("weights", "constants"),
                   knobs.get("depthwise_conv", DEFAULT_DEPTHWISE[platform]),
                   knobs.get("matmul_precision", "highest"), options)

    def describe(self) -> dict[str, str]:
        return {"threads": str(self.threads), "num_threads": str(self.threads),
                "weights": self.weights, "depthwise_conv": self.depthwise_conv,
                "matmul_precision": self.matmul_precision,
                "compiler_options": json.dumps(self.compiler_options, sort_keys=True)}


def check_values(knobs: Mapping[str, Any]) -> None:
    """The value rules of every knob that needs no device (BuildError naming a bad value)."""
    thread_knob(knobs, "num_threads", 1)
    for name, allowed in CHOICES.items():
        if name in knobs and not any(knobs[name] is a or (isinstance(a, str) and knobs[name] == a)
                                     for a in allowed):
            raise BuildError(f"knob {name!r} must be one of {list(allowed)}, got {knobs[name]!r}")
    level = knobs.get("xla_gpu_autotune_level", 0)
    if isinstance(level, bool) or not isinstance(level, int) or level not in AUTOTUNE_LEVELS:
        raise BuildError(f"knob 'xla_gpu_autotune_level' must be an integer 0-4 (0: no "
                         f"autotuning, 4: all of it), got {level!r}")


# --- the runner ----------------------------------------------------------------------------------

class XlaRunner(Runner):
    """An XLA executable per batch size: the candidate's batch is compiled in ``compile`` (timed
    as ``compile_seconds``); a smaller batch (the accuracy pass's last) is compiled on its first
    ``run``, once, rather than padded, so every batch runs the code XLA made for its shape.

    The timed call (:meth:`bound_call`) on a CPU calls the executable on the batch placed on its
    device once (``jax.device_put``), as a jax deployment keeps its arrays on the device; on a
    GPU it is ``run``, whose copies to the device and back a deployment fed from host memory
    pays (see :mod:`dse.backends.onnxruntime.gpu`)."""

    def __init__(self, graph: LoweredGraph, device: jax.Device, settings: XlaSettings,
                 input_shape: tuple[int, ...], batch_size: int, provenance: dict[str, str]) -> None:
        import jax

        self._graph = graph
        self._device: jax.Device | None = device
        self._settings = settings
        self._input_shape = input_shape
        self._provenance = provenance
        self._executables: dict[int, Any] = {}
        self.batch_size = batch_size
        if settings.weights == "arguments":
            self._weights: Any = {name: jax.device_put(value, device)
                                  for name, value in graph.weights.items()}
        else:
            self._weights = None

    def executable(self, batch: int) -> tuple[Any, float]:
        """The compiled executable for ``batch``, and the seconds lowering and compiling took."""
        if batch in self._executables:
            return self._executables[batch], 0.0
        import functools

        import jax

        assert self._device is not None
        start = time.perf_counter()
        sharding = jax.sharding.SingleDeviceSharding(self._device)
        shape = (batch, *self._input_shape)
        sample = jax.ShapeDtypeStruct(shape, np.float32, sharding=sharding)  # type: ignore[no-untyped-call]
        with jax.default_matmul_precision(self._settings.matmul_precision):
            if self._weights is None:
                fn: Callable[..., Any] = functools.partial(self._graph.forward,
                                                           dict(self._graph.weights))
                lowered = jax.jit(fn).lower(sample)
            else:
                lowered = jax.jit(self._graph.forward).lower(self._weights, sample)
        try:
            compiled = lowered.compile(compiler_options=self._settings.compiler_options or None)
        except Exception as exc:  # XLA refuses an option or the module with its own error types
            raise BuildError(f"XLA could not compile the lowered graph: {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
        self._executables[batch] = compiled
        return compiled, time.perf_counter() - start

    def run(self, x: np.ndarray) -> np.ndarray:
        if self._device is None:
            raise RuntimeError("run() on a closed xla runner")
        # The host array goes straight to the executable, which copies it to its device: a
        # tenth of the cost of a jax.device_put first (docs/benchmarks.md, "Backends").
        feed = np.ascontiguousarray(x, dtype=np.float32)
        compiled, _ = self.executable(len(feed))
        out = compiled(feed) if self._weights is None else compiled(self._weights, feed)
        # Synchronous by contract: the timing must include the device's work and the copy back.
        out.block_until_ready()
        return np.array(out, dtype=np.float32)

    def bound_call(self, x: np.ndarray) -> Callable[[], np.ndarray]:
        import jax

        device = self._device
        if device is None:
            raise RuntimeError("bound_call() on a closed xla runner")
        if device.platform != "cpu":
            return super().bound_call(x)
        placed = jax.device_put(bound_batch(x, self.batch_size), device)
        compiled, _ = self.executable(self.batch_size)
        weights = self._weights

        def call() -> np.ndarray:
            if self._device is None:
                raise RuntimeError("a bound call on a closed xla runner")
            out = compiled(placed) if weights is None else compiled(weights, placed)
            out.block_until_ready()
            return np.asarray(out)

        return call

    def describe(self) -> dict[str, str]:
        return {**self._provenance, **self._settings.describe(),
                "compiled_batches": ",".join(str(b) for b in sorted(self._executables))}

    def close(self) -> None:
        self._device = None
        self._weights = None
        self._executables = {}


def _hlo_path(artifact_path: Path, key: Mapping[str, str]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return artifact_path.with_name(f"{artifact_path.name}.xla-{digest}.hlo.txt")


def _write_hlo(path: Path, text: str) -> str:
    """Write the optimised HLO; its path, or why it could not be written (the measurement does
    not depend on the file, so a read-only cache is no build error)."""
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        return f"not written ({type(exc).__name__}: {exc})"
    return str(path)


def _provenance(artifact: Artifact, device: jax.Device, pool: int,
                graph: LoweredGraph) -> dict[str, str]:
    import jax
    from jaxlib import version as jaxlib_version

    return {
        "backend": "xla", "backend_version": jax.__version__, "jax_version": jax.__version__,
        "jaxlib_version": jaxlib_version.__version__, "device": "cpu" if device.platform == "cpu" else "cuda",
        "precision": artifact.precision, "xla_platform": device.platform,
        "xla_device_kind": device.device_kind,
        "xla_platform_version": str(device.client.platform_version),
        "jax_default_backend": jax.default_backend(),
        "xla_cpu_pool_threads": str(pool) if device.platform == "cpu" else "",
        "onnx_ops": ",".join(f"{op}:{n}" for op, n in sorted(graph.op_counts.items())),
    }


@register_backend
class XlaBackend(Backend):
    """Lowers the ONNX artifact to jax and compiles it with XLA (see the module docstring).

    Knobs: ``num_threads`` (default: the profile's ``max_threads``, else every core; the size of
    the CPU client's intra-op pool), ``weights``, ``depthwise_conv``, ``matmul_precision`` (see
    :data:`CHOICES`), and XLA's own ``xla_cpu_enable_fast_math`` (cpu devices) and
    ``xla_gpu_autotune_level`` (0-4, cuda devices), passed to the compile as XLA debug options;
    one for the other kind of device is refused. ``compile_seconds``: lowering and compiling the
    candidate's batch.
    """

    declaration = BackendDeclaration(
        name="xla", artifact_format="onnx", capability=xla_capability, knobs=KNOBS,
        thread_knob="num_threads", libraries=("jax", "jaxlib"), extra="xla",
        summary="XLA via jax, from the ONNX graph (CPU, or CUDA with jax's plugin)",
        profiler=XLA_PROFILER, standalone=XLA_STANDALONE)

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        self.check_knobs(knobs)
        check_values(knobs)

    def start_runtime(self, profile: HardwareProfile) -> None:
        """Import jax and compile and run a one-op function on the profile's device, once:
        jax's import, its MLIR context and the client's pool are then resident before any
        candidate's footprint is read."""
        try:
            _start(profile.kind, default_threads(profile), profile)
        except Exception:  # the real compile reports a runtime that cannot start
            return

    def profile_ops(self, request: ProfileRequest) -> OpProfile:
        """The jax profiler's trace of the runner's own calls, per HLO instruction
        (:mod:`dse.backends.xla.profiler`); CPU devices only."""
        from dse.backends.xla.profiler import profile_executable

        runner = request.runner
        if not isinstance(runner, XlaRunner):
            raise BuildError(f"xla: profile_ops takes an XlaRunner, got {type(runner).__name__}")
        if request.profile.kind != "cpu":
            raise ProfilerMissing(f"xla: dse reads XLA's per-op trace events on CPU devices only; "
                                  f"on a {request.profile.kind} device they are GPU kernel events "
                                  f"that dse does not parse yet")
        compiled, _ = runner.executable(len(request.batch))
        return profile_executable(runner.run, request.batch, compiled.as_text(), request.runs,
                                  request.out_dir)

    def bundle_extras(self, runner: Runner, artifact: Artifact) -> BundleExtras:
        """The runner's function serialised by jax.export (:mod:`dse.backends.xla.bundle`)."""
        from dse.backends.xla.bundle import xla_bundle_extras

        if not isinstance(runner, XlaRunner) or runner._device is None:
            raise BuildError(f"xla exports the open runners it compiled, got {runner!r}")
        return xla_bundle_extras(runner._graph, runner._weights, runner._settings,
                                 (runner.batch_size, *runner._input_shape), runner._device.platform)

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        self.check_knob_values(knobs)
        path = onnx_path(artifact, self.name)
        try:
            import jax  # noqa: F401  # the runtime this backend needs, named if missing
        except ImportError as exc:
            raise BuildError(f"xla: jax cannot be imported ({exc}); install dse[xla]") from exc
        entry = xla_capability(artifact.precision, profile.kind)
        if not entry.supported:
            raise BuildError(f"xla does not run {artifact.precision} on a {profile.kind} device: "
                             f"{entry.reason}")
        settings = XlaSettings.from_knobs(knobs, profile)
        graph = _lower(path, settings.depthwise_conv == "taps")
        device, pool = xla_device(profile, settings.threads)
        runner = XlaRunner(graph, device, settings, artifact.input_shape, batch_size,
                           _provenance(artifact, device, pool, graph))
        compiled, seconds = runner.executable(batch_size)
        runner.compile_seconds = seconds
        key = {**runner.describe(), "batch": str(batch_size)}
        runner._provenance["hlo_file"] = _write_hlo(_hlo_path(path, key), compiled.as_text())
        return runner


def _lower(path: Path, depthwise_taps: bool) -> LoweredGraph:
    import onnx

    from dse.backends.xla.lowering import lower_model

    try:
        model = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError and others for an unreadable file
        raise BuildError(f"xla could not read {path.name}: {type(exc).__name__}: {exc}") from exc
    return lower_model(model, depthwise_taps=depthwise_taps)


_STARTED: set[tuple[str, int]] = set()


def _start(kind: str, threads: int, profile: HardwareProfile) -> None:
    if (kind, threads) in _STARTED:
        return
    import jax
    import jax.numpy as jnp

    device, _ = xla_device(profile, threads)
    x = jax.device_put(np.zeros(1, np.float32), device)
    jax.jit(jnp.negative).lower(x).compile()(x).block_until_ready()
    _STARTED.add((kind, threads))
