"""The tensorrt backend's decisions that need no TensorRT: knobs, typing, precision flags, device
checks, cache keys and the cache folder. Pure functions, so they are tested without a GPU.
"""

from __future__ import annotations

import hashlib
import numbers
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dse.artifacts import device_cache_root
from dse.backends.base import flag_knob
from dse.backends.capabilities import CAPABILITIES
from dse.backends.tensorrt.version import TensorRTVersion
from dse.core import BuildError

KNOBS = frozenset({"workspace_mb", "builder_optimization_level", "builder_threads", "tf32",
                   "strongly_typed", "cuda_graph"})
THREAD_KNOB = "builder_threads"
# TensorRT's own default level; set explicitly so the engine key names what was asked for.
DEFAULT_OPTIMIZATION_LEVEL = 3
OPTIMIZATION_LEVELS = range(0, 6)
# The engine cache lives under $DSE_DEVICE_CACHE/trt-engines (the device worker sets the variable;
# the ONNX Runtime TensorRT provider keeps its caches beside it, under the same variable).
ENGINE_SUBFOLDER = "trt-engines"
# Bump when the way engines are built changes, so engines cached before are not reused.
ENGINE_FORMAT_VERSION = 1
# Weak typing (TensorRT 10): the builder flag that lets each precision's kernels be chosen. int8 and
# fp8 come from Q/DQ graphs (explicit quantization). TensorRT 8's guide requires the INT8 flag for
# any quantization and later guides say only that strong typing needs no flag, so weak typing
# sets INT8 / FP8 for Q/DQ graphs (harmless if no longer needed); strong typing sets none.
_WEAK_FLAGS = {"fp32": (), "fp16": ("FP16",), "bf16": ("BF16",), "int8": ("INT8",),
               "fp8": ("FP8",)}
PRECISIONS = tuple(_WEAK_FLAGS)
# TensorRT I/O data types (DataType member names) and the torch dtype that holds each.
_TORCH_DTYPES = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8",
                 "UINT8": "uint8", "INT32": "int32", "INT64": "int64", "BOOL": "bool"}
_CONTENT_ID = re.compile(r"^[0-9a-f]{16,64}$")


@dataclass(frozen=True)
class EngineSettings:
    """The knobs, validated, with defaults filled in.

    ``workspace_mb`` None leaves TensorRT's default workspace limit (the device's memory);
    ``strongly_typed`` None means "the version's default" until :func:`resolve_typing` decides.
    """

    workspace_mb: int | None
    optimization_level: int
    builder_threads: int
    tf32: bool
    strongly_typed: bool | None


def _integer(knobs: Mapping[str, Any], name: str, default: int | None, allowed: str,
             low: int, high: int | None = None) -> int | None:
    value = knobs.get(name, default)
    if value is None:
        return None
    whole = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    number = int(value) if whole else None
    if number is None or number < low or (high is not None and number > high):
        raise BuildError(f"knob {name!r} must be {allowed}, got {value!r}")
    return number


def resolve_settings(knobs: Mapping[str, Any], default_threads: int) -> EngineSettings:
    """Validate ``knobs`` (names were checked by the backend); BuildError naming a bad value."""
    workspace = _integer(knobs, "workspace_mb", None, "an integer number of MiB >= 1", 1)
    level = _integer(knobs, "builder_optimization_level", DEFAULT_OPTIMIZATION_LEVEL,
                     "an integer from 0 to 5", OPTIMIZATION_LEVELS.start,
                     OPTIMIZATION_LEVELS.stop - 1)
    threads = _integer(knobs, THREAD_KNOB, default_threads, "an integer >= 1", 1)
    assert level is not None and threads is not None  # their defaults are not None
    # TF32 is TensorRT's default for float32 layers, but then "fp32" would compute with 10-bit
    # mantissas on Ampere and newer; fp32 means fp32 unless the knob allows TF32.
    tf32 = flag_knob(knobs, "tf32", False)
    assert tf32 is not None
    return EngineSettings(workspace, level, threads, tf32, flag_knob(knobs, "strongly_typed", None))


def cuda_graph_knob(knobs: Mapping[str, Any]) -> bool:
    """The ``cuda_graph`` knob (default false). How the engine is launched, not how it is built:
    not part of :class:`EngineSettings`, so engines (and their cache keys) are shared by both."""
    value = flag_knob(knobs, "cuda_graph", False)
    return bool(value)


def resolve_typing(version: TensorRTVersion, requested: bool | None) -> bool:
    """Whether the network is strongly typed: TensorRT 11 always; TensorRT 10 when asked (its
    default is weak typing with precision flags)."""
    if version.strongly_typed_only:
        if requested is False:
            raise BuildError(f"knob 'strongly_typed' cannot be false with TensorRT "
                             f"{version.text}: TensorRT 11 builds strongly typed networks only")
        return True
    return bool(requested)


def precision_flags(precision: str, strongly_typed: bool) -> tuple[str, ...]:
    """The BuilderFlag names to set for ``precision``: none for a strongly typed network, whose
    types come from the graph (and which TensorRT 11 and strong typing forbid)."""
    if precision not in _WEAK_FLAGS:
        raise BuildError(f"the tensorrt backend builds precisions {list(PRECISIONS)}, got "
                         f"{precision!r}")
    return () if strongly_typed else _WEAK_FLAGS[precision]


def network_flag_names(version: TensorRTVersion, strongly_typed: bool) -> tuple[str, ...]:
    """The NetworkDefinitionCreationFlag names for ``create_network``.

    TensorRT 10 needs STRONGLY_TYPED to opt in (EXPLICIT_BATCH is ignored since 10.0, so it is
    not set); TensorRT 11 types every network strongly and deprecated the flag, so none is set.
    """
    return ("STRONGLY_TYPED",) if strongly_typed and not version.strongly_typed_only else ()


def check_compute_capability(precision: str, device_kind: str, capability: tuple[int, int],
                             gpu_name: str) -> None:
    """BuildError when the capability table rules ``precision`` out on this GPU."""
    entry = CAPABILITIES.get(("tensorrt", precision, device_kind))
    if entry is None or not entry.supported:
        raise BuildError(entry.reason if entry is not None else
                         f"no tensorrt capability entry for {precision=}, {device_kind=}")
    floor = entry.min_compute_capability
    if floor is None:
        return
    needed = (int(floor), round((floor - int(floor)) * 10))
    if capability < needed:
        raise BuildError(f"tensorrt {precision} needs CUDA compute capability >= {floor}, but "
                         f"{gpu_name} has {capability[0]}.{capability[1]}")


def onnx_content_id(path: Path) -> str:
    """An id of the ONNX file's content: its name when that is already a content hash (the
    artifact cache names files so), else a hash of its bytes."""
    if _CONTENT_ID.match(path.stem):
        return path.stem
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def engine_key(onnx_id: str, precision: str, settings: EngineSettings, strongly_typed: bool,
               batch_size: int, fingerprint: Mapping[str, str],
               tensorrt_version: str) -> dict[str, Any]:
    """Everything an engine depends on, as an :class:`~dse.artifacts.ArtifactCache` key.

    The builder's thread count is left out: it changes how fast an engine builds, not what is
    built.
    """
    knobs = {k: v for k, v in asdict(settings).items() if k not in ("builder_threads",
                                                                     "strongly_typed")}
    return {"stage": "tensorrt-engine", "version": ENGINE_FORMAT_VERSION, "onnx": onnx_id,
            "precision": precision, "knobs": knobs, "strongly_typed": strongly_typed,
            "batch_size": batch_size, "profile": profile_shapes_batch(batch_size),
            "device": dict(fingerprint), "tensorrt": tensorrt_version}


def timing_cache_key(fingerprint: Mapping[str, str], tensorrt_version: str) -> dict[str, Any]:
    """The key of the device's timing cache: tactic timings hold for one GPU and TensorRT."""
    return {"stage": "tensorrt-timing-cache", "device": dict(fingerprint),
            "tensorrt": tensorrt_version}


def profile_shapes_batch(batch_size: int) -> tuple[int, int, int]:
    """(min, opt, max) batch of the optimization profile: tuned for the candidate's batch, and
    down to 1 for the partial last batch of the accuracy pass."""
    return (1, batch_size, batch_size)


def engine_cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """``$DSE_DEVICE_CACHE/trt-engines``, or under a per-user folder in the temp dir when unset."""
    return device_cache_root(environ) / ENGINE_SUBFOLDER


def torch_dtype_name(trt_dtype: str) -> str:
    """The torch dtype (by name) for a TensorRT I/O data type (by DataType member name)."""
    try:
        return _TORCH_DTYPES[trt_dtype]
    except KeyError:
        raise BuildError(f"the engine has an I/O tensor of type {trt_dtype}; dse feeds and reads "
                         f"{sorted(_TORCH_DTYPES)}") from None
