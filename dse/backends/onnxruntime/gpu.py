"""ONNX Runtime on NVIDIA GPUs: the CUDA and the TensorRT execution providers.

Both need the ``onnxruntime-gpu`` distribution (the ``onnxruntime`` one has only the CPU provider);
TensorRT also needs the TensorRT libraries. What is missing is a BuildError naming it, raised
before a session is made; a provider ORT drops while making the session is one too.

Device: the farm pins each device worker to one GPU with ``CUDA_VISIBLE_DEVICES``, so the process
sees its GPU as device 0 and ``device_id`` is always 0.

Host <-> device copies: ``run`` takes and returns host numpy arrays, and the timed call binds
host buffers (:mod:`dse.backends.onnxruntime.binding`: the input and the logits bound once, in host
memory), so each inference pays the copy of the input batch to the GPU and of the logits back,
inside the timed call. That is what a deployment serving requests from host memory pays, and
what the torch CUDA runner pays too (``.to("cuda")`` in every call). Binding an input already on
the device would time the kernels alone and flatter the GPU against the CPU backends, whose
input is already in place; it is not done.
"""

from __future__ import annotations

import hashlib
import importlib
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.artifacts import TENSORRT_DISTRIBUTIONS, device_cache_root
from dse.backends.backend_registry import register_backend
from dse.backends.base import Backend, Runner, flag_knob
from dse.backends.capabilities import NO_GPU, gpu_runtime, supports
from dse.backends.onnxruntime.backend import (
    ORT_FINGERPRINT,
    SESSION_KNOBS,
    SessionPlan,
    SessionSettings,
    choice_knob,
    compile_session,
    onnx_path,
    ort_bundle_extras,
)
from dse.backends.onnxruntime.placement import TENSORRT_PROVIDER
from dse.backends.onnxruntime.profiler import PROFILER as ORT_PROFILER
from dse.backends.onnxruntime.profiler import profile_ort_runner
from dse.core import BuildError, stable_hash
from dse.plugins import BackendDeclaration, Capability, Standalone

if TYPE_CHECKING:
    from dse.artifacts import Artifact
    from dse.backends.bundle_extras import BundleExtras
    from dse.backends.op_profile import OpProfile, ProfileRequest
    from dse.spec import HardwareProfile

CUDA_PROVIDER = "CUDAExecutionProvider"
DEVICE_ID = "0"
CUDNN_ALGO_SEARCHES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
# TensorRT's builder optimization levels; 3 is TensorRT's default.
TRT_OPTIMIZATION_LEVELS = range(6)
_DEFAULT_TRT_LEVEL = 3
# Distributions that ship the onnxruntime module, the GPU one first.
_ORT_DISTRIBUTIONS = ("onnxruntime-gpu", "onnxruntime", "onnxruntime-directml",
                      "onnxruntime-openvino", "onnxruntime-qnn", "onnxruntime-training")
# Q/DQ operators: in an int8 graph, TensorRT must run them itself to build int8 layers. One left
# on the CUDA fallback (TensorRT rejects non-zero zero points, for one) means int8 that TensorRT
# did not do.
_QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
# A bundle's run.py on these providers: ONNX Runtime's GPU build (the TensorRT provider loads
# libnvinfer, which the tensorrt wheels bring where no system TensorRT does).
CUDA_STANDALONE = Standalone("dse.backends.onnxruntime.run_script", ("onnxruntime-gpu", "numpy"))
TENSORRT_STANDALONE = Standalone("dse.backends.onnxruntime.run_script",
                                 ("onnxruntime-gpu", "tensorrt", "numpy"))
# TensorRT provider options naming this device's cache folders: left out of a bundle, whose
# run.py builds its engine when its session is made.
_DEVICE_CACHE_OPTIONS = frozenset({"trt_engine_cache_enable", "trt_engine_cache_path",
                                   "trt_timing_cache_enable", "trt_timing_cache_path"})
_GPU_LIBRARIES = {
    CUDA_PROVIDER: "the CUDA and cuDNN libraries this onnxruntime-gpu was built for, and a visible "
                   "GPU",
    TENSORRT_PROVIDER: "the TensorRT libraries (libnvinfer) this onnxruntime-gpu was built for, "
                       "plus CUDA and cuDNN, and a visible GPU",
}


def tensorrt_cache_dir(root: Path | None = None) -> Path:
    """``<root>/ort-trt/<fingerprint id>/``: engines and the timing cache of this device.

    The fingerprint names the GPU, driver, CUDA, TensorRT and ONNX Runtime versions, so engines
    built for another GPU or release are never found, let alone loaded.
    """
    from dse.artifacts import device_fingerprint, fingerprint_id

    base = device_cache_root() if root is None else root
    return base / "ort-trt" / fingerprint_id(device_fingerprint())


def installed_onnxruntime() -> str:
    """The installed distribution(s) of the onnxruntime module, e.g. ``onnxruntime==1.32.0``."""
    import importlib.metadata

    found = []
    for name in _ORT_DISTRIBUTIONS:
        try:
            found.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return " and ".join(found) or "no onnxruntime distribution"


def require_provider(ort: Any, provider: str, backend: str) -> None:
    """BuildError unless this onnxruntime build has ``provider``, naming what to install."""
    available = list(ort.get_available_providers())
    if provider not in available:
        raise BuildError(
            f"{backend} needs ONNX Runtime's {provider}, but the installed "
            f"{installed_onnxruntime()} offers only {available}; install onnxruntime-gpu in its "
            f"place (pip uninstall onnxruntime && pip install onnxruntime-gpu), with "
            f"{_GPU_LIBRARIES[provider]}")


def check_device(backend: str, precision: str, profile: HardwareProfile) -> None:
    """BuildError with the capability table's reason unless the profile's device runs it."""
    ok, reason = supports(backend, precision, profile.kind)
    if not ok:
        raise BuildError(reason)


def _int_knob(knobs: Mapping[str, Any], name: str, allowed: range | None) -> int | None:
    value = knobs.get(name)
    if value is None:
        return None
    valid = not isinstance(value, bool) and isinstance(value, numbers.Integral)
    if allowed is None:
        valid = valid and value >= 1
        wanted = "an integer >= 1"
    else:
        valid = valid and value in allowed
        wanted = f"an integer in {allowed.start}..{allowed.stop - 1}"
    if not valid:
        raise BuildError(f"knob {name!r} must be {wanted}, got {value!r}")
    return int(value)


def _cuda_graph(knobs: Mapping[str, Any]) -> bool:
    return bool(flag_knob(knobs, "enable_cuda_graph", False))


def _cuda_capability(precision: str, kind: str) -> Capability:
    needs = gpu_runtime(kind, "onnxruntime-gpu with the CUDA execution provider")
    if kind == "cpu":
        return Capability(False, f"onnxruntime_cuda {NO_GPU}", needs)
    if precision in ("fp32", "fp16"):
        return Capability(True, f"ONNX Runtime CUDA execution provider, {precision} ONNX graph "
                                "(float32 inputs and outputs)", needs)
    if precision == "bf16":
        return Capability(False, "ONNX Runtime's CUDA execution provider has no bf16 Conv kernel; "
                                 "use tensorrt or torch for bf16", needs)
    return Capability(False, f"ONNX Runtime's CUDA execution provider runs {precision} Q/DQ "
                             "graphs dequantized in fp32; use onnxruntime_tensorrt or tensorrt for "
                             f"{precision}", needs)


def _tensorrt_capability(precision: str, kind: str) -> Capability:
    needs = gpu_runtime(kind, "onnxruntime-gpu with the TensorRT execution provider and TensorRT")
    if kind == "cpu":
        return Capability(False, f"onnxruntime_tensorrt {NO_GPU}", needs)
    if precision in ("fp32", "fp16"):
        return Capability(True, f"ONNX Runtime TensorRT execution provider, {precision}", needs)
    if precision == "int8":
        return Capability(True, "ONNX Runtime TensorRT execution provider, int8 from the Q/DQ graph "
                                "(explicit quantization)", needs)
    return Capability(False, f"dse does not build {precision} through ONNX Runtime's TensorRT "
                             f"provider; the tensorrt backend builds {precision} engines", needs)


@register_backend
class OrtCudaBackend(Backend):
    """ONNX Runtime's CUDA execution provider, fp32 or fp16 ONNX graphs (float32 inputs and
    outputs either way).

    Knobs: those of :class:`~dse.backends.onnxruntime.backend.SessionSettings` (the CPU threads
    serve what ORT runs on the host), ``cudnn_conv_algo_search`` (EXHAUSTIVE, ORT's default;
    HEURISTIC; DEFAULT) and ``enable_cuda_graph`` (default false: ORT's CUDA-graph capture and
    replay, through fixed device buffers; see :mod:`dse.backends.onnxruntime.cuda_graph`).
    TF32 is off (``use_tf32=0``; ORT turns it on by default): an fp32 candidate computes in fp32.
    ``compile_seconds`` is the session's creation plus its first run, where cuDNN's algorithm
    search for the candidate's batch size happens.
    """

    declaration = BackendDeclaration(
        name="onnxruntime_cuda", artifact_format="onnx", capability=_cuda_capability,
        knobs=SESSION_KNOBS | {"cudnn_conv_algo_search", "enable_cuda_graph"},
        thread_knob="intra_op_threads",
        libraries=("onnxruntime-gpu", "onnx"), fingerprint=ORT_FINGERPRINT,
        extra="gpu", summary="ONNX Runtime, CUDA execution provider",
        profiler=ORT_PROFILER, standalone=CUDA_STANDALONE)

    def profile_ops(self, request: ProfileRequest) -> OpProfile:
        return profile_ort_runner(request)

    def bundle_extras(self, runner: Runner, artifact: Artifact) -> BundleExtras:
        """The session's providers with their options; ``run.py`` binds device buffers as
        :mod:`dse.backends.onnxruntime.cuda_graph` does when they enable CUDA graphs."""
        return ort_bundle_extras(runner)

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        self.check_knobs(knobs)
        SessionSettings.checked(knobs)
        choice_knob(knobs, "cudnn_conv_algo_search", CUDNN_ALGO_SEARCHES, "EXHAUSTIVE")
        _cuda_graph(knobs)

    def check_knob_device(self, knobs: Mapping[str, Any], device_kind: str) -> None:
        if _cuda_graph(knobs) and device_kind == "cpu":
            raise BuildError("knob 'enable_cuda_graph' true needs a CUDA device (ORT captures the "
                             "session's CUDA kernels in a CUDA graph); a cpu device has none")

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        self.check_knob_values(knobs)
        settings = SessionSettings.from_knobs(knobs, profile)
        search = choice_knob(knobs, "cudnn_conv_algo_search", CUDNN_ALGO_SEARCHES, "EXHAUSTIVE")
        onnx_path(artifact, self.name)
        check_device(self.name, artifact.precision, profile)
        self.check_knob_device(knobs, profile.kind)
        import onnxruntime as ort

        require_provider(ort, CUDA_PROVIDER, self.name)
        graph = _cuda_graph(knobs)
        options = {"device_id": DEVICE_ID, "cudnn_conv_algo_search": search, "use_tf32": "0",
                   **({"enable_cuda_graph": "1"} if graph else {})}
        plan = SessionPlan(self.name, ((CUDA_PROVIDER, options),), timed=True,
                           requires=_GPU_LIBRARIES[CUDA_PROVIDER])
        runner = compile_session(plan, artifact, settings, batch_size, "cuda", options)
        if not graph:
            return runner
        from dse.backends.onnxruntime.cuda_graph import OrtCudaGraphRunner

        try:
            return OrtCudaGraphRunner(runner, tuple(artifact.input_shape))
        except BuildError:
            runner.close()
            raise


@register_backend
class OrtTensorrtBackend(Backend):
    """ONNX Runtime's TensorRT execution provider, with the CUDA provider as the listed fallback:
    fp32, fp16 (``trt_fp16_enable``, fp16 graph) and int8 (``trt_int8_enable``, Q/DQ graph,
    explicit quantization: every Q/DQ node must run inside TensorRT).

    Knobs: those of :class:`~dse.backends.onnxruntime.backend.SessionSettings`,
    ``trt_max_workspace_size`` (bytes; default: TensorRT's) and
    ``trt_builder_optimization_level`` (0..5, default 3).

    Engines and TensorRT's timing cache are kept under :func:`tensorrt_cache_dir`, the engines in
    a folder per model file content and build settings (the provider's own cache key covers the
    model's file name and structure, not its weights or the builder settings). The optimization
    profile spans batch 1 to the candidate's batch size with the candidate's as the optimum, so
    the engine is built once, while the session is created, and covers the partial last batch of
    an accuracy pass. ``compile_seconds`` is the session's creation (engine build, or load from
    the cache) plus its first run. TensorRT's builder allows TF32 for fp32 layers by default
    (``BuilderFlag.kTF32``) and the provider has no option to clear it, so fp32 here means fp32
    with TF32 convolutions on Ampere and newer GPUs (only NVIDIA's process-wide debug variable
    ``NVIDIA_TF32_OVERRIDE=0`` would stop it, for every library in the process).
    """

    declaration = BackendDeclaration(
        name="onnxruntime_tensorrt", artifact_format="onnx", capability=_tensorrt_capability,
        knobs=SESSION_KNOBS | {"trt_max_workspace_size", "trt_builder_optimization_level"},
        thread_knob="intra_op_threads", int8_symmetric=True,
        libraries=("onnxruntime-gpu", "onnx", "tensorrt"),
        fingerprint={**ORT_FINGERPRINT, "tensorrt": TENSORRT_DISTRIBUTIONS},
        extra="tensorrt", summary="ONNX Runtime, TensorRT execution provider",
        profiler=ORT_PROFILER, standalone=TENSORRT_STANDALONE)

    def profile_ops(self, request: ProfileRequest) -> OpProfile:
        return profile_ort_runner(request)

    def bundle_extras(self, runner: Runner, artifact: Artifact) -> BundleExtras:
        """The session's providers with their options, less those naming this device's engine
        and timing caches: ``run.py`` builds the engine with the same builder options."""
        from dse.backends.bundle_extras import BundleExtras

        extras = ort_bundle_extras(runner)
        providers = [[name, {key: value for key, value in options.items()
                             if key not in _DEVICE_CACHE_OPTIONS}]
                     for name, options in extras.settings["providers"]]
        return BundleExtras(settings={**extras.settings, "providers": providers})

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        self.check_knobs(knobs)
        SessionSettings.checked(knobs)
        _int_knob(knobs, "trt_max_workspace_size", None)
        _int_knob(knobs, "trt_builder_optimization_level", TRT_OPTIMIZATION_LEVELS)

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        self.check_knob_values(knobs)
        settings = SessionSettings.from_knobs(knobs, profile)
        workspace = _int_knob(knobs, "trt_max_workspace_size", None)
        level = _int_knob(knobs, "trt_builder_optimization_level", TRT_OPTIMIZATION_LEVELS)
        path = onnx_path(artifact, self.name)
        check_device(self.name, artifact.precision, profile)
        import onnxruntime as ort

        require_provider(ort, TENSORRT_PROVIDER, self.name)
        require_provider(ort, CUDA_PROVIDER, self.name)
        _load_tensorrt_libraries()
        build = {
            "trt_fp16_enable": str(artifact.precision == "fp16"),
            "trt_int8_enable": str(artifact.precision == "int8"),
            "trt_builder_optimization_level": str(_DEFAULT_TRT_LEVEL if level is None else level),
            **({} if workspace is None else {"trt_max_workspace_size": str(workspace)}),
            **_profile_shapes(path, artifact.input_shape, batch_size),
        }
        cache = tensorrt_cache_dir()
        engines = cache / "engines" / stable_hash({"model": _file_digest(path), **build})
        engines.mkdir(parents=True, exist_ok=True)
        options = {
            "device_id": DEVICE_ID,
            **build,
            "trt_engine_cache_enable": "True",
            "trt_engine_cache_path": str(engines),
            "trt_timing_cache_enable": "True",
            "trt_timing_cache_path": str(cache),
        }
        plan = SessionPlan(
            self.name, ((TENSORRT_PROVIDER, options), (CUDA_PROVIDER, {"device_id": DEVICE_ID})),
            fallbacks=(CUDA_PROVIDER,), timed=True, requires=_GPU_LIBRARIES[TENSORRT_PROVIDER],
            pinned_ops=_QDQ_OPS if artifact.precision == "int8" else frozenset())
        cached = any(engines.glob("*.engine"))
        return compile_session(plan, artifact, settings, batch_size, "cuda", {
            **options, "trt_engine_cached": str(cached).lower(),
            "device_fingerprint": cache.name})


def _load_tensorrt_libraries() -> None:
    """Load libnvinfer into the process when TensorRT's Python wheels are installed.

    The pip wheels keep the libraries inside site-packages, where the dynamic loader does not look
    when ORT opens its TensorRT provider library; once the bindings have loaded them, the loader
    finds them already in the process by their soname. Without the wheels (TensorRT from a system
    package or JetPack, on the library path), there is nothing to do.
    """
    try:
        importlib.import_module("tensorrt")
    except ImportError:
        return


def _profile_shapes(path: Path, input_shape: tuple[int, ...], batch_size: int) -> dict[str, str]:
    """The TensorRT optimization profile for a dynamic batch axis: batch 1 up to the candidate's,
    tuned for the candidate's. None for a model whose batch size is fixed."""
    import onnx

    model: Any = onnx.load(str(path), load_external_data=False)
    initializers = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise BuildError(f"onnxruntime_tensorrt runs models with one input, {path.name} has "
                         f"{[i.name for i in inputs]}")
    dims = inputs[0].type.tensor_type.shape.dim
    if not dims or (dims[0].HasField("dim_value") and dims[0].dim_value > 0):
        return {}
    rest = "x".join(str(d) for d in input_shape)
    name = inputs[0].name
    return {"trt_profile_min_shapes": f"{name}:1x{rest}",
            "trt_profile_opt_shapes": f"{name}:{batch_size}x{rest}",
            "trt_profile_max_shapes": f"{name}:{batch_size}x{rest}"}


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]
