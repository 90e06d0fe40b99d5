"""What the ``openvino`` backend offers a generative language model: its capability per precision,
its knobs, and the runner (:mod:`.llm_ir` builds the stateful IR, :mod:`.llm_runner` decodes).

The compute precision is OpenVINO's ``INFERENCE_PRECISION_HINT`` (f32, bf16, f16, each checked
against the CPU's OPTIMIZATION_CAPABILITIES); the ``weights`` knob stores the linear layers'
weights at that precision or compressed by NNCF (int8, int4 in groups of ``weight_group_size``);
the ``kv_cache`` knob is the KV cache's precision (``KV_CACHE_PRECISION``): ``same`` as the
compute (set explicitly: the CPU plugin's own default is u8), ``fp16`` or ``int8`` (u8).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.backends.base import default_threads, thread_knob
from dse.backends.weight_formats import weight_knobs
from dse.core import BuildError
from dse.plugins import Capability

if TYPE_CHECKING:
    from dse.backends.generation_runner import GenerationRunner
    from dse.models import LanguageModel
    from dse.spec import HardwareProfile

#: The knobs a generative model takes on openvino.
GENERATION_KNOBS = frozenset({"num_threads", "weights", "weight_group_size", "kv_cache"})
#: Knobs only a generative model takes (a fixed-shape model refuses them).
GENERATION_ONLY_KNOBS = frozenset({"weights", "weight_group_size", "kv_cache"})
#: The ``kv_cache`` knob's values -> OpenVINO's KV_CACHE_PRECISION (``same``: the compute's).
KV_CACHE_FORMATS = {"same": None, "fp16": "f16", "int8": "u8"}
# dse compute precision -> (INFERENCE_PRECISION_HINT, the OPTIMIZATION_CAPABILITIES entry).
_COMPUTE = {"fp32": ("f32", "FP32"), "bf16": ("bf16", "BF16"), "fp16": ("f16", "FP16")}
REQUIRES = "openvino, NNCF for int8/int4 weights (pip install 'dse[llm]')"


def generation_capability(precision: str, kind: str) -> Capability:
    """The CPU plugin at a floating-point compute precision; integer formats are the weights'
    (and the KV cache's) knobs, not a compute precision."""
    if kind != "cpu":
        return Capability(False, "dse runs language models on OpenVINO's CPU plugin only so far "
                                 "(its GPU plugin drives Intel GPUs, not NVIDIA ones)",
                          "a cpu device profile")
    if precision not in _COMPUTE:
        return Capability(False, "OpenVINO computes a language model in fp32, bf16 or fp16; for "
                                 "integer formats keep one of those and set the knobs weights: "
                                 "int8 or int4 (NNCF) and kv_cache: int8", REQUIRES)
    need = "" if precision == "fp32" else (f"; needs the CPU's native {precision} "
                                           f"({_COMPUTE[precision][1]} in its "
                                           f"OPTIMIZATION_CAPABILITIES), checked at compile")
    return Capability(True, f"OpenVINO CPU plugin, the model's stateful IR (KV cache as internal "
                            f"state), {_COMPUTE[precision][0]} inference precision{need}",
                      REQUIRES)


def kv_cache_knob(knobs: Mapping[str, Any]) -> str:
    """The ``kv_cache`` knob, checked; BuildError naming the allowed values."""
    value = knobs.get("kv_cache", "same")
    if value not in KV_CACHE_FORMATS:
        raise BuildError(f"knob 'kv_cache' must be one of {list(KV_CACHE_FORMATS)}, got "
                         f"{value!r}")
    return str(value)


def compile_openvino_generator(core: Any, model: LanguageModel, precision: str,
                               knobs: Mapping[str, Any], profile: HardwareProfile,
                               batch_size: int, cache_dir: Path) -> GenerationRunner:
    """The runner; BuildError for a knob a generative model does not take, a precision or
    device the capability refuses, a CPU without the precision, or an IR that cannot be built."""
    import openvino as ov

    from dse.backends.openvino.llm_ir import stateful_ir
    from dse.backends.openvino.llm_runner import OpenVinoGenerationRunner

    entry = generation_capability(precision, profile.kind)
    if not entry.supported:
        raise BuildError(entry.reason)
    weights, group = weight_knobs(knobs)
    kv_cache = kv_cache_knob(knobs)
    hint, feature = _COMPUTE[precision]
    capabilities = [str(item) for item in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")]
    if feature not in capabilities:
        raise BuildError(f"openvino: this CPU lacks native {precision} ({feature} is not among "
                         f"its OPTIMIZATION_CAPABILITIES {capabilities})")
    threads = thread_knob(knobs, "num_threads", default_threads(profile))
    folder = stateful_ir(model, weights, group, cache_dir)
    config = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
              "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": hint,
              "KV_CACHE_PRECISION": KV_CACHE_FORMATS[kv_cache] or hint}
    described = {"backend": "openvino", "backend_version": str(ov.__version__), "device": "cpu",
                 "precision": precision, "threads": str(threads), "weights": weights,
                 "kv_cache": f"{kv_cache} (OpenVINO state, KV_CACHE_PRECISION)",
                 "model_folder": str(folder), "mode": "stateful IR, dse's greedy loop"}
    if weights == "int4":
        described["weight_group_size"] = str(group)
    try:
        return OpenVinoGenerationRunner(core, folder, config, batch_size, described)
    except Exception as exc:  # OpenVINO raises RuntimeError and its own types
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise BuildError(f"openvino cannot compile the language model with {config}: "
                         f"{lines[-1][:300] if lines else type(exc).__name__}") from exc


def bundled_openvino_generator(core: Any, folder: Path, properties: dict[str, Any],
                               precision: str, knobs: Mapping[str, Any],
                               profile: HardwareProfile, batch_size: int) -> GenerationRunner:
    """An exported bundle's stateful IR (``folder``) compiled with the ``properties`` it was
    measured with (``dse verify``); BuildError when the device or OpenVINO refuses it."""
    import openvino as ov

    from dse.backends.openvino.llm_runner import OpenVinoGenerationRunner

    entry = generation_capability(precision, profile.kind)
    if not entry.supported:
        raise BuildError(entry.reason)
    weights, group = weight_knobs(knobs)
    described = {"backend": "openvino", "backend_version": str(ov.__version__), "device": "cpu",
                 "precision": precision,
                 "threads": str(properties.get("INFERENCE_NUM_THREADS", "")),
                 "weights": weights, "kv_cache": f"{kv_cache_knob(knobs)} (OpenVINO state, "
                                                 f"KV_CACHE_PRECISION)",
                 "model_folder": str(folder), "mode": "stateful IR from a bundle, dse's greedy "
                                                      "loop"}
    if weights == "int4":
        described["weight_group_size"] = str(group)
    try:
        return OpenVinoGenerationRunner(core, folder, properties, batch_size, described)
    except Exception as exc:  # OpenVINO raises RuntimeError and its own types
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise BuildError(f"openvino cannot compile the bundle's language model with "
                         f"{properties}: {lines[-1][:300] if lines else type(exc).__name__}"
                         ) from exc
