"""OpenVINO: the candidate's ONNX file read by OpenVINO's ONNX front end and compiled by its CPU
plugin (or, with the ``device`` knob, an Intel machine's GPU or NPU plugin).

Precisions come from OpenVINO itself rather than from dse's lowered graphs
(``float_at_runtime``): fp32, bf16 and fp16 compile the fp32 graph with the matching
``INFERENCE_PRECISION_HINT`` (f32 always set explicitly: on CPUs with bf16 units OpenVINO's own
default is bf16), which is how OpenVINO deploys a float model. int8 compiles the QDQ graph dse
builds with ONNX Runtime's static quantization, which OpenVINO's low-precision transformations
turn into int8 kernels; not NNCF, OpenVINO's own quantizer: the QDQ graph is calibrated like
every ONNX int8 candidate of a campaign (same samples, same min/max ranges, per-channel weights),
so OpenVINO's int8 differs from the other ONNX runtimes' by its kernels, not by a second
quantizer's choices, and no second calibration pass has to be run and cached. Its activations are
symmetric (``int8_symmetric``, as TensorRT's):
OpenVINO runs convolutions on s8 activations with non-zero zero points in f32 (measured, see
:mod:`dse.backends.openvino.kernels`).

A precision is a hint to OpenVINO, so every compile is checked: the model is compiled once more
with profiling on (``PERF_COUNT``) and run on a batch of zeros, and the kernels that ran must be
of the asked precision (a silent fallback to f32 is a BuildError). The measured model is compiled
without profiling: the second compile costs ~25 ms for the test cnn, while profiling's per-node
timers would be in every measured call (under 1% here, more for models of many small nodes).

``dse profile`` compiles one more sibling with ``PERF_COUNT`` (``profile_ops``): the runner's
properties (on the CPU plugin, as one stream of its threads per stream), its counters read
around a window of calls (:mod:`dse.backends.openvino.profiler`).

Shapes are static: the model is reshaped to the candidate's batch size before compiling, which
measured 10-20% faster than OpenVINO's dynamic-shape path for the test cnn (shape inference and
buffer checks per call); a smaller batch is zero-padded and cut back.
"""

from __future__ import annotations

import functools
import importlib
import numbers
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.backend_registry import register_backend
from dse.backends.base import Backend, Runner, default_threads, padded_batch, thread_knob
from dse.backends.capabilities import FP8_CC
from dse.backends.onnxruntime.backend import choice_knob, onnx_path
from dse.backends.openvino.generation import (
    GENERATION_KNOBS,
    GENERATION_ONLY_KNOBS,
    compile_openvino_generator,
    generation_capability,
    kv_cache_knob,
)
from dse.backends.openvino.kernels import (
    Kernel,
    check_kernel_precision,
    compute_kernel_counts,
    executed_kernels,
    precision_counts,
)
from dse.backends.openvino.runner import OpenVinoRunner, in_effect
from dse.backends.weight_formats import weight_knobs
from dse.core import BuildError
from dse.plugins import BackendDeclaration, Capability, Standalone

if TYPE_CHECKING:
    from dse.artifacts import Artifact
    from dse.backends.bundle_extras import BundleExtras
    from dse.backends.generation_runner import GenerationRunner
    from dse.backends.op_profile import OpProfile, ProfileRequest
    from dse.models import LanguageModel
    from dse.spec import HardwareProfile

# What profile_ops runs, named in the declaration and in each profile.
PROFILER = "OpenVINO performance counters (PERF_COUNT)"
KNOBS = frozenset({"num_threads", "performance_hint", "num_streams", "device"}) | GENERATION_KNOBS
DEVICES = ("CPU", "GPU", "NPU")
HINTS = ("latency", "throughput")
# dse precision -> (INFERENCE_PRECISION_HINT value, the OPTIMIZATION_CAPABILITIES entry it needs).
# int8 keeps f32 for what is left unquantized, as ONNX Runtime does (with the bf16 hint this QDQ
# graph does not even compile on the CPU plugin: "No suitable implementations").
_PRECISION_HINTS = {"fp32": ("f32", "FP32"), "bf16": ("bf16", "BF16"), "fp16": ("f16", "FP16"),
                    "int8": ("f32", "INT8")}
_FEATURE_NAMES = {"BF16": "bf16 arithmetic (AVX512-BF16 or AMX on x86)",
                  "FP16": "fp16 arithmetic (AVX512-FP16 or AMX-FP16 on x86, or Arm's fp16)",
                  "INT8": "int8 arithmetic", "FP32": "fp32 arithmetic"}


def _capability(precision: str, kind: str) -> Capability:
    if kind != "cpu":
        return Capability(False, "OpenVINO runs Intel hardware: its GPU plugin drives Intel GPUs, "
                                 "not NVIDIA ones, and its CPU plugin on a GPU server would measure "
                                 "the host CPU; measure that CPU with a cpu profile",
                          "a cpu device profile (x86 or Arm CPU; an Intel iGPU or NPU through the "
                          "device knob)")
    if precision == "fp32":
        return Capability(True, "OpenVINO CPU plugin, f32 inference precision (an Intel GPU or NPU "
                                "through the device knob)", "openvino")
    if precision in ("bf16", "fp16"):
        feature = _PRECISION_HINTS[precision][1]
        return Capability(True, f"OpenVINO CPU plugin lowering the fp32 graph itself with the "
                                f"{_PRECISION_HINTS[precision][0]} inference-precision hint; needs "
                                f"the CPU's native {precision} support ({feature} in its "
                                f"OPTIMIZATION_CAPABILITIES), checked with the kernels at compile",
                          f"openvino; a CPU with {_FEATURE_NAMES[feature]}")
    if precision == "int8":
        return Capability(True, "OpenVINO CPU plugin running dse's QDQ int8 graph (ONNX Runtime "
                                "static quantization, symmetric activations) through its "
                                "low-precision transformations; int8 kernels checked at compile",
                          "openvino; int8 vector instructions (VNNI or AMX for speed)")
    return Capability(False, "OpenVINO's CPU plugin has no fp8 inference precision (its hint takes "
                             "f32, bf16 and f16) and would run fp8 Q/DQ in float; fp8 runs on "
                             f"TensorRT (tensorrt backend, compute capability >= {FP8_CC})",
                      "a GPU with fp8 tensor cores")


def num_streams(knobs: Mapping[str, Any]) -> int | str | None:
    """The ``num_streams`` knob: an integer >= 1, ``"auto"`` (OpenVINO picks for the hint), or
    None when absent (the hint decides: 1 for latency); BuildError otherwise."""
    value = knobs.get("num_streams")
    if value is None or value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise BuildError(f"knob 'num_streams' must be an integer >= 1 or 'auto', got {value!r}")
    return int(value)


@functools.cache
def _openvino() -> Any:
    """The ``openvino`` package (untyped, hence imported by name); ImportError when absent."""
    return importlib.import_module("openvino")


@functools.cache
def _core() -> Any:
    """The process's one ``openvino.Core``: it loads each device plugin once, on first use."""
    return _openvino().Core()


def _first_line(exc: BaseException) -> str:
    """OpenVINO's own message from an error: its text is a chain of ``Exception from <file>:``
    and ``Check '...' failed at <file>:`` lines ending in the message itself."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(("Exception from ", "Check '"))
            and not line.endswith(":")]
    chosen = said or lines
    return chosen[-1][:300] if chosen else type(exc).__name__


@register_backend
class OpenVinoBackend(Backend):
    """Compiles the ONNX artifact with OpenVINO for the ``device`` knob's plugin (default CPU).

    Knobs: ``num_threads`` (``INFERENCE_NUM_THREADS``; default the profile's ``max_threads``,
    else every core), ``performance_hint`` ("latency", the default, or "throughput":
    ``PERFORMANCE_HINT``), ``num_streams`` (an integer >= 1 or "auto": ``NUM_STREAMS``; absent,
    the hint decides) and ``device`` ("CPU", "GPU" or "NPU": an Intel machine's other plugins; a
    device OpenVINO does not list is a BuildError). ``compile_seconds`` is the measured model's
    ``compile_model`` (graph transformations and kernel generation), not the profiled check's.
    """

    declaration = BackendDeclaration(
        name="openvino", artifact_format="onnx", capability=_capability, knobs=KNOBS,
        thread_knob="num_threads", int8_symmetric=True, float_at_runtime=True,
        libraries=("openvino", "onnx"), fingerprint={"openvino": ("openvino",)}, extra="openvino",
        summary="OpenVINO (CPU plugin; Intel GPU/NPU via a knob), precision hints checked",
        profiler=PROFILER, standalone=Standalone("dse.backends.openvino.run_script", ("openvino", "numpy")),
        generation=generation_capability, generation_knobs=GENERATION_KNOBS,
        language_only_knobs=GENERATION_ONLY_KNOBS,
        generation_standalone=Standalone("dse.backends.openvino.generation_run_script",
                                         ("openvino", "numpy")))

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        self.check_knobs(knobs)
        thread_knob(knobs, "num_threads", 1)
        choice_knob(knobs, "performance_hint", HINTS, "latency")
        num_streams(knobs)
        choice_knob(knobs, "device", DEVICES, "CPU")
        weight_knobs(knobs)
        kv_cache_knob(knobs)

    def start_runtime(self, profile: HardwareProfile) -> None:
        _start_openvino()

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        refused = self.declaration.kind_refusal(knobs, generative=False)
        if refused:
            raise BuildError(refused)
        ov, core, plan = self._plan(artifact, knobs, profile, batch_size)
        kernels = _profiled_kernels(core, plan, batch_size, artifact.input_shape)
        check_kernel_precision(kernels, artifact.precision, plan.device)
        start = time.perf_counter()
        compiled = _compile(core, plan.model, plan.device, plan.config, plan.name)
        seconds = time.perf_counter() - start
        runner = OpenVinoRunner(compiled, batch_size, {
            "backend": self.name, "backend_version": str(ov.__version__), "device": plan.device,
            "precision": artifact.precision,
            "device_full_name": str(core.get_property(plan.device, "FULL_DEVICE_NAME")),
            **in_effect(compiled, str(plan.config.get("INFERENCE_NUM_THREADS", "n/a"))),
            "shape": f"static, batch {batch_size}",
            "nodes_by_precision": precision_counts(kernels),
            "compute_kernels": compute_kernel_counts(kernels)})
        runner.compile_seconds = seconds
        runner.properties = (plan.device, dict(plan.config))
        return runner

    def compile_generator(self, model: LanguageModel, precision: str, knobs: Mapping[str, Any],
                          profile: HardwareProfile, batch_size: int, *,
                          cache_dir: Path | None = None) -> GenerationRunner:
        """A language model's stateful IR (:mod:`dse.backends.openvino.generation`)."""
        self.check_knob_values(knobs)
        refused = self.declaration.kind_refusal(knobs, generative=True)
        if refused:
            raise BuildError(refused)
        try:
            _openvino()
        except ImportError as exc:
            raise BuildError(f"openvino cannot be imported ({exc}); install dse[openvino]") from exc
        if cache_dir is None:
            from dse.util import user_cache_root

            cache_dir = user_cache_root()
        return compile_openvino_generator(_core(), model, precision, knobs, profile, batch_size,
                                          cache_dir)

    def bundled_generator(self, folder: Path, settings: Mapping[str, Any], precision: str,
                          knobs: Mapping[str, Any], profile: HardwareProfile,
                          batch_size: int) -> GenerationRunner:
        """The bundle's stateful IR compiled with the OpenVINO properties it was measured with."""
        from dse.backends.openvino.generation import bundled_openvino_generator

        try:
            _openvino()
        except ImportError as exc:
            raise BuildError(f"openvino cannot be imported ({exc}); install dse[openvino]") from exc
        return bundled_openvino_generator(_core(), folder, dict(settings["properties"]),
                                          precision, knobs, profile, batch_size)

    def bundle_extras(self, runner: Runner, artifact: Artifact) -> BundleExtras:
        from dse.backends.openvino.bundle import openvino_bundle_extras

        return openvino_bundle_extras(runner)

    def generation_bundle(self, runner: GenerationRunner, model: LanguageModel,
                          out: Path) -> dict[str, Any]:
        """The stateful IR the runner compiled (its weights as the ``weights`` knob made them),
        with the OpenVINO properties it was compiled with."""
        from dse.backends.generation_runner import copy_model_folder
        from dse.backends.openvino.llm_runner import OpenVinoGenerationRunner

        if not isinstance(runner, OpenVinoGenerationRunner):
            raise BuildError(f"openvino exports the runners it compiled, got a "
                             f"{type(runner).__name__}")
        copy_model_folder(runner.folder, out)
        return {"properties": {str(k): v if isinstance(v, int | float) else str(v)
                               for k, v in runner.properties.items()}}

    def profile_ops(self, request: ProfileRequest) -> OpProfile:
        """The runner's model compiled once more with the same properties and ``PERF_COUNT`` on
        (profiling is a compile-time property: the measured runner has it off), then run
        ``request.runs`` times with its performance counters read after each call (see
        :mod:`dse.backends.openvino.profiler`)."""
        from dse.backends.openvino.profiler import (
            AVERAGING_DEVICES,
            one_stream_properties,
            profile_compiled,
        )

        runner = request.runner
        if not isinstance(runner, OpenVinoRunner):
            raise BuildError(f"openvino profiles the runners it compiled, got a "
                             f"{type(runner).__name__}")
        ov, core, plan = self._plan(request.artifact, request.knobs, request.profile,
                                    runner.batch_size)
        averaging = plan.device in AVERAGING_DEVICES
        config = {**plan.config, "PERF_COUNT": True,
                  **(one_stream_properties(runner.describe()) if averaging else {})}
        profiled = _compile(core, plan.model, plan.device, config, plan.name)
        feed = padded_batch(np.ascontiguousarray(request.batch, dtype=np.float32),
                            runner.batch_size, "the openvino profile (compiled for one batch size)")
        return profile_compiled(profiled, feed, request.runs, request.out_dir,
                                profiler=f"{PROFILER}, openvino {ov.__version__} ({plan.device})",
                                averaging=averaging,
                                in_effect=in_effect(profiled, str(config.get(
                                    "INFERENCE_NUM_THREADS", "n/a"))))

    def _plan(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
              batch_size: int) -> tuple[Any, Any, _Plan]:
        """The openvino module, the Core, and what to compile: the one recipe of the measured
        runner and of its profiled sibling."""
        self.check_knob_values(knobs)
        path = onnx_path(artifact, self.name)
        if profile.kind != "cpu" or artifact.precision not in _PRECISION_HINTS:
            raise BuildError(_capability(artifact.precision, profile.kind).reason)
        try:
            ov = _openvino()
        except ImportError as exc:
            raise BuildError(f"openvino cannot be imported ({exc}); install dse[openvino]") from exc
        core = _core()
        device = _present_device(core, choice_knob(knobs, "device", DEVICES, "CPU"))
        hint, feature = _PRECISION_HINTS[artifact.precision]
        _check_feature(core, device, feature, artifact.precision)
        config = _config(core, device, knobs, hint, thread_knob(knobs, "num_threads",
                                                                default_threads(profile)))
        model = _read_model(core, path, batch_size, artifact.input_shape)
        return ov, core, _Plan(model, device, config, path.name)


@dataclass(frozen=True)
class _Plan:
    """A model read and reshaped, and the device and properties to compile it with."""

    model: Any
    device: str
    config: dict[str, Any]
    name: str


def _present_device(core: Any, device: str) -> str:
    """``device`` when OpenVINO lists it (``GPU`` also as ``GPU.0``...), else BuildError."""
    available = [str(name) for name in core.available_devices]
    if not any(name == device or name.startswith(f"{device}.") for name in available):
        raise BuildError(f"openvino: device {device!r} is not available on this machine; OpenVINO "
                         f"lists {available} (a GPU or NPU needs Intel hardware and its driver)")
    return device


def _check_feature(core: Any, device: str, feature: str, precision: str) -> None:
    capabilities = [str(item) for item in core.get_property(device, "OPTIMIZATION_CAPABILITIES")]
    if feature not in capabilities:
        name = str(core.get_property(device, "FULL_DEVICE_NAME"))
        raise BuildError(f"openvino: the {device} ({name}) lacks {_FEATURE_NAMES[feature]}: its "
                         f"OPTIMIZATION_CAPABILITIES are {capabilities}, without {feature}; "
                         f"{precision} would not run natively")


def _config(core: Any, device: str, knobs: Mapping[str, Any], hint: str,
            threads: int) -> dict[str, Any]:
    """The compile properties; those the device's plugin does not have (threads on a GPU) are
    left out rather than refused by it."""
    streams = num_streams(knobs)
    wanted: dict[str, Any] = {
        "PERFORMANCE_HINT": choice_knob(knobs, "performance_hint", HINTS, "latency").upper(),
        "INFERENCE_PRECISION_HINT": hint, "INFERENCE_NUM_THREADS": threads}
    if streams is not None:
        wanted["NUM_STREAMS"] = streams if isinstance(streams, int) else "AUTO"
    supported = set(core.get_property(device, "SUPPORTED_PROPERTIES"))
    return {key: value for key, value in wanted.items() if key in supported}


def _read_model(core: Any, path: Path, batch_size: int, input_shape: tuple[int, ...]) -> Any:
    try:
        model = core.read_model(str(path))
    except Exception as exc:  # OpenVINO raises RuntimeError and its own front-end errors
        raise BuildError(f"openvino could not read {path.name}: {_first_line(exc)}") from exc
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise BuildError(f"openvino: {path.name} has {len(model.inputs)} inputs and "
                         f"{len(model.outputs)} outputs; dse's runners take one of each")
    try:
        model.reshape({0: [batch_size, *input_shape]})
    except Exception as exc:
        raise BuildError(f"openvino could not give {path.name} the static shape "
                         f"{[batch_size, *input_shape]}: {_first_line(exc)}") from exc
    return model


def _compile(core: Any, model: Any, device: str, config: Mapping[str, Any], name: str) -> Any:
    try:
        return core.compile_model(model, device, dict(config))
    except Exception as exc:
        raise BuildError(f"openvino could not compile {name} for {device} with {dict(config)}: "
                         f"{_first_line(exc)}") from exc


def _profiled_kernels(core: Any, plan: _Plan, batch_size: int,
                      input_shape: tuple[int, ...]) -> list[Kernel]:
    """The kernels one inference on zeros ran, from a compile with profiling on."""
    profiled = _compile(core, plan.model, plan.device, {**plan.config, "PERF_COUNT": True},
                        plan.name)
    request = profiled.create_infer_request()
    try:
        request.infer({0: np.zeros((batch_size, *input_shape), dtype=np.float32)})
    except Exception as exc:
        raise BuildError(f"openvino: {plan.name} compiled for {plan.device} but failed on its "
                         f"first inference: {_first_line(exc)}") from exc
    return executed_kernels(request.profiling_info)


@functools.cache
def _start_openvino() -> None:
    """Import OpenVINO, create the Core and compile and run a one-node model on the CPU, once per
    process: the CPU plugin's library and thread pools are then resident before a candidate's
    footprint is read. Failures are left to the real compile, which reports them."""
    try:
        ov = _openvino()
        ops = importlib.import_module("openvino.opset13")
        x = ops.parameter([1], np.float32, name="x")
        model = ov.Model([ops.relu(x)], [x], "start")
        compiled = _core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": 1})
        compiled.create_infer_request().infer({0: np.zeros(1, dtype=np.float32)})
    except Exception:  # the real compile reports a runtime that cannot start
        return
