"""TensorRT: an engine built from the ONNX artifact, for one CUDA GPU, TensorRT 10 or 11.

Engines are cached (a build takes seconds to minutes) under ``$DSE_DEVICE_CACHE/trt-engines``,
keyed by the ONNX content, precision, knobs, batch size, TensorRT version and the device
fingerprint, so a cached engine is only ever loaded on the kind of device it was built for.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.artifacts import TENSORRT_DISTRIBUTIONS, ArtifactCache, device_fingerprint, fingerprint_id
from dse.backends.backend_registry import register_backend
from dse.backends.base import Backend, Runner, default_threads, padded_batch
from dse.backends.capabilities import BF16_CC, FP8_CC, NO_GPU, gpu_runtime
from dse.backends.tensorrt.engine import (
    BuildPlan,
    BuiltEngine,
    create,
    load_or_build,
    one_line,
    trt_logger,
)
from dse.backends.tensorrt.runner import EngineIO, TensorRTRunner, engine_io
from dse.backends.tensorrt.settings import (
    KNOBS,
    PRECISIONS,
    THREAD_KNOB,
    EngineSettings,
    check_compute_capability,
    cuda_graph_knob,
    engine_cache_root,
    engine_key,
    network_flag_names,
    onnx_content_id,
    precision_flags,
    profile_shapes_batch,
    resolve_settings,
    resolve_typing,
    timing_cache_key,
)
from dse.backends.tensorrt.version import TensorRTVersion, import_tensorrt, parse_version
from dse.core import BuildError
from dse.plugins import BackendDeclaration, Capability, Standalone

if TYPE_CHECKING:
    from dse.artifacts import Artifact
    from dse.backends.bundle_extras import BundleExtras
    from dse.backends.op_profile import OpProfile, ProfileRequest
    from dse.spec import HardwareProfile

# What profile_ops runs, named in the declaration and in each profile.
PROFILER = "TensorRT layer profiler (IProfiler) and engine inspector"


def _capability(precision: str, kind: str) -> Capability:
    needs = gpu_runtime(kind, "TensorRT 10 or 11 (Python bindings) and torch with CUDA")
    if kind == "cpu":
        return Capability(False, f"tensorrt {NO_GPU}", needs)
    if precision == "fp8":
        if kind == "jetson":
            return Capability(False, "Jetson GPUs (Orin: compute capability 8.7) have no fp8 tensor "
                                     f"cores; fp8 needs >= {FP8_CC}", needs)
        return Capability(True, "TensorRT engine from the fp8 Q/DQ graph", needs + ", fp8 tensor cores",
                          FP8_CC)
    floor = BF16_CC if precision == "bf16" else None
    how = "from the int8 Q/DQ graph" if precision == "int8" else f"{precision}"
    return Capability(True, f"TensorRT engine, {how}", needs, floor)


@register_backend
class TensorRTBackend(Backend):
    """Builds (or loads from the engine cache) a TensorRT engine and runs it with torch buffers.

    Knobs (all checked before TensorRT is imported):

    - ``workspace_mb``: the builder's workspace memory pool limit in MiB (default: TensorRT's,
      the device's memory);
    - ``builder_optimization_level``: 0 (fast build) to 5 (slow build, best tactics); default 3;
    - ``builder_threads``: CPU threads the builder may use (default: the profile's
      ``max_threads``, else every core); it does not change the engine, so it is not in its key;
    - ``tf32``: let float32 layers use TF32 (default false, so fp32 computes in fp32);
    - ``strongly_typed``: build a strongly typed network, types from the graph (TensorRT 10
      default false: weak typing with the precision's builder flag; TensorRT 11 always true);
    - ``cuda_graph``: launch the engine by replaying a CUDA graph of ``execute_async_v3``
      captured at the candidate's batch size (default false; see
      :mod:`dse.backends.tensorrt.runner`). The engine is the same either way.
    """

    declaration = BackendDeclaration(
        name="tensorrt", artifact_format="onnx", capability=_capability, knobs=KNOBS,
        thread_knob=THREAD_KNOB, int8_symmetric=True, libraries=("tensorrt",),
        fingerprint={"tensorrt": TENSORRT_DISTRIBUTIONS}, extra="tensorrt",
        summary="TensorRT engines built from the ONNX artifact", profiler=PROFILER,
        # run.py builds the engine from the ONNX file and runs it with torch's CUDA buffers.
        standalone=Standalone("dse.backends.tensorrt.run_script", ("tensorrt", "torch", "numpy")))

    def bundle_extras(self, runner: Runner, artifact: Artifact) -> BundleExtras:
        """The builder settings the runner's engine was built with (resolved for the installed
        TensorRT) and its launch, for ``run.py`` to build the same engine from the ONNX file:
        an engine is bound to its GPU model and TensorRT release, so the bundle carries none."""
        from dse.backends.bundle_extras import BundleExtras

        if not isinstance(runner, TensorRTRunner) or runner.plan is None:
            raise BuildError(f"tensorrt exports the runners it compiled, got a "
                             f"{type(runner).__name__} without its build plan")
        return BundleExtras(settings=bundle_settings(
            runner.plan, runner.cuda_graph, runner.describe()["backend_version"]))

    def profile_ops(self, request: ProfileRequest) -> OpProfile:
        """The runner's engine run ``request.runs`` times on an execution context of its own
        with TensorRT's layer profiler attached, and its engine inspector's layer information
        (see :mod:`dse.backends.tensorrt.profiler`)."""
        import torch

        from dse.backends.tensorrt.profiler import profile_context

        runner = request.runner
        if not isinstance(runner, TensorRTRunner):
            raise BuildError(f"tensorrt profiles the runners it compiled, got a "
                             f"{type(runner).__name__}")
        trt = import_tensorrt()
        engine, slot = runner.profiled()
        feed = torch.from_numpy(padded_batch(np.ascontiguousarray(request.batch, dtype=np.float32),
                                             runner.batch_size, "the tensorrt profile"))
        try:
            return profile_context(trt, engine, slot.context, slot.run, feed, request.runs,
                                   request.out_dir, profiler=f"{PROFILER}, TensorRT {trt.__version__}")
        finally:
            # A failed run may leave work queued on the slot's stream: let it finish before the
            # slot's context and buffers go with it.
            slot.stream.synchronize()

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        self.check_knobs(knobs)
        resolve_settings(knobs, 1)
        cuda_graph_knob(knobs)

    def check_knob_device(self, knobs: Mapping[str, Any], device_kind: str) -> None:
        if cuda_graph_knob(knobs) and device_kind == "cpu":
            raise BuildError("knob 'cuda_graph' true needs a CUDA device (it captures the "
                             "engine's launch in a CUDA graph); a cpu device has none")

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        self.check_knobs(knobs)
        settings = resolve_settings(knobs, default_threads(profile))
        cuda_graph = cuda_graph_knob(knobs)
        if artifact.format != "onnx" or artifact.path is None:
            raise BuildError(f"tensorrt builds engines from ONNX files, got a {artifact.format!r} "
                             f"artifact")
        if artifact.precision not in PRECISIONS:
            raise BuildError(f"tensorrt builds precisions {list(PRECISIONS)}, got "
                             f"{artifact.precision!r}")
        if batch_size < 1:
            raise BuildError(f"batch size must be >= 1, got {batch_size}")
        if profile.kind == "cpu":
            raise BuildError(f"tensorrt needs a CUDA device; device {profile.name!r} is a cpu "
                             f"device")
        trt = import_tensorrt()
        version = parse_version(str(trt.__version__))
        strongly_typed = resolve_typing(version, settings.strongly_typed)
        device, gpu_name, capability = _cuda_device(profile)
        check_compute_capability(artifact.precision, profile.kind, capability, gpu_name)
        fingerprint = device_fingerprint(device)
        plan = BuildPlan(settings, network_flag_names(version, strongly_typed),
                         precision_flags(artifact.precision, strongly_typed), batch_size,
                         tuple(artifact.input_shape))
        key = engine_key(onnx_content_id(artifact.path), artifact.precision, settings,
                         strongly_typed, batch_size, fingerprint, version.text)
        engine, built, load_seconds = _engine(trt, artifact.path, plan, key,
                                              timing_cache_key(fingerprint, version.text))
        io = engine_io(trt, engine, plan.sample_shape)
        described = _describe(self.name, artifact.precision, version, strongly_typed, plan,
                              built, load_seconds, io)
        described.update(gpu_name=gpu_name, compute_capability=f"{capability[0]}.{capability[1]}",
                         cuda_device_index=str(device), device_fingerprint=fingerprint_id(fingerprint),
                         driver=fingerprint["driver"], cuda_runtime=fingerprint["cuda_runtime"])
        try:
            return TensorRTRunner(trt, engine, io, batch_size, device,
                                  {**described, "cuda_graph": str(cuda_graph).lower()},
                                  built.build_seconds + load_seconds, cuda_graph=cuda_graph,
                                  plan=plan)
        except RuntimeError as exc:
            raise BuildError(f"the TensorRT engine {built.path.name} loaded but cannot run: "
                             f"{exc}") from exc


def bundle_settings(plan: BuildPlan, cuda_graph: bool, tensorrt_version: str) -> dict[str, Any]:
    """``run.py``'s builder settings (see :mod:`dse.backends.tensorrt.run_script`): the
    engine's ``plan`` as resolved for the TensorRT it was built with, and its launch."""
    settings = plan.settings
    return {"tensorrt_version": tensorrt_version, "network_flags": list(plan.network_flags),
            "precision_flags": list(plan.precision_flags), "tf32": settings.tf32,
            "workspace_mb": settings.workspace_mb,
            "builder_optimization_level": settings.optimization_level,
            "builder_threads": settings.builder_threads,
            "profile_batches": list(profile_shapes_batch(plan.batch_size)),
            "cuda_graph": cuda_graph}


def _cuda_device(profile: HardwareProfile) -> tuple[int, str, tuple[int, int]]:
    """The current CUDA device: index, name and compute capability (BuildError when none)."""
    import torch

    if not torch.cuda.is_available():
        raise BuildError(f"device {profile.name!r} is a {profile.kind} device, but torch "
                         f"{torch.__version__} reports no CUDA device")
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return index, torch.cuda.get_device_name(index), (int(major), int(minor))


def _engine(trt: Any, onnx_path: Path, plan: BuildPlan, key: dict[str, Any],
            timing_key: dict[str, Any]) -> tuple[Any, BuiltEngine, float]:
    """The deserialized engine, where it came from, and the seconds deserializing took."""
    cache = ArtifactCache(engine_cache_root())
    built = load_or_build(trt, onnx_path, plan, cache, key, timing_key)
    engine, load_seconds, errors = _deserialize(trt, built)
    if engine is None and built.cached:
        # A damaged cache file (or one no longer loadable): build afresh, once.
        built.path.unlink(missing_ok=True)
        built = load_or_build(trt, onnx_path, plan, cache, key, timing_key)
        engine, load_seconds, errors = _deserialize(trt, built)
    if engine is None:
        raise BuildError(f"TensorRT could not load the engine {built.path.name}: "
                         f"{one_line(errors)}")
    return engine, built, load_seconds


def _deserialize(trt: Any, built: BuiltEngine) -> tuple[Any, float, list[str]]:
    """The engine from its bytes (None when TensorRT refuses them), the seconds it took, and the
    errors TensorRT logged meanwhile."""
    logger = trt_logger(trt)
    mark = logger.last
    # The engine keeps its runtime alive (the bindings tie their lifetimes together).
    runtime = create(logger, mark, "a runtime", trt.Runtime, logger)
    start = time.perf_counter()
    engine = runtime.deserialize_cuda_engine(built.data)
    return engine, time.perf_counter() - start, logger.errors_since(mark)


def _describe(backend: str, precision: str, version: TensorRTVersion, strongly_typed: bool,
              plan: BuildPlan, built: BuiltEngine, load_seconds: float,
              io: EngineIO) -> dict[str, str]:
    settings: EngineSettings = plan.settings
    low, opt, high = profile_shapes_batch(plan.batch_size)
    return {
        "backend": backend,
        "backend_version": version.text,
        "device": "cuda",
        "precision": precision,
        "threads": str(settings.builder_threads),
        "builder_threads": str(settings.builder_threads),
        "tensorrt_api": version.api_label(strongly_typed),
        "network_flags": ",".join(plan.network_flags) or "none",
        "precision_flags": ",".join(plan.precision_flags) or "none",
        "tf32": "allowed" if settings.tf32 else "disabled",
        "workspace_mb": str(settings.workspace_mb) if settings.workspace_mb else "tensorrt default",
        "builder_optimization_level": str(settings.optimization_level),
        "optimization_profile": f"batch min {low} / opt {opt} / max {high}",
        "engine_cached": str(built.cached),
        "engine_path": str(built.path),
        "engine_bytes": str(len(built.data)),
        "engine_build_seconds": f"{built.build_seconds:.3f}",
        "engine_load_seconds": f"{load_seconds:.3f}",
        "timing_cache": built.timing_cache,
        "input_dtype": io.input_dtype,
        "output_dtype": io.output_dtype,
    }
