"""ONNX file -> serialized TensorRT engine, with the device's timing cache and the engine cache.

TensorRT keeps a single logger per process (a builder or runtime made with another logger gets a
warning and the first one's logger), so there is one collecting logger here, made on first use and
kept for the life of the process; each build reads the errors logged while it ran.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.artifacts import ArtifactCache
from dse.backends.tensorrt.settings import EngineSettings, profile_shapes_batch
from dse.core import BuildError
from dse.util import atomic_write

_LOG = logging.getLogger("dse.backends.tensorrt.backend")
_LOGGER: Any = None
_LOGGER_LOCK = threading.Lock()
# One build at a time per process: the errors a build reports are those logged while it ran.
_BUILD_LOCK = threading.Lock()
_KEPT_ERRORS = 64


@dataclass(frozen=True)
class BuildPlan:
    """What to build: the engine's settings, resolved for the installed TensorRT."""

    settings: EngineSettings
    network_flags: tuple[str, ...]
    precision_flags: tuple[str, ...]
    batch_size: int
    sample_shape: tuple[int, ...]


@dataclass(frozen=True)
class BuiltEngine:
    """A serialized engine and where it came from (``cached``: read from the engine cache)."""

    data: bytes
    path: Path
    cached: bool
    build_seconds: float
    timing_cache: str


def trt_logger(trt: Any) -> Any:
    """The process's TensorRT logger: keeps the last errors, passes warnings to ``logging``."""
    global _LOGGER
    with _LOGGER_LOCK:
        if _LOGGER is None:
            _LOGGER = _make_logger(trt)
        return _LOGGER


def _make_logger(trt: Any) -> Any:
    severity = trt.ILogger.Severity
    errors = (severity.INTERNAL_ERROR, severity.ERROR)

    class CollectingLogger(trt.ILogger):  # type: ignore[misc]  # a class from an Any module
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self._counter = itertools.count(1)
            self._errors: deque[tuple[int, str]] = deque(maxlen=_KEPT_ERRORS)
            self.last = 0

        def log(self, level: Any, msg: str) -> None:
            # Called by TensorRT (noexcept on its side), from any thread it builds on.
            if level in errors:
                self.last = next(self._counter)
                self._errors.append((self.last, msg))
            elif level == severity.WARNING:
                _LOG.warning("TensorRT: %s", msg)

        def errors_since(self, mark: int) -> list[str]:
            return [msg for number, msg in list(self._errors) if number > mark]

    return CollectingLogger()


def one_line(messages: list[str]) -> str:
    """Messages joined on one line, for a BuildError."""
    return " | ".join(" ".join(message.split()) for message in messages) or "no message logged"


def load_or_build(trt: Any, onnx_path: Path, plan: BuildPlan, cache: ArtifactCache,
                  engine_key: dict[str, Any], timing_key: dict[str, Any]) -> BuiltEngine:
    """The engine for ``engine_key``: read from ``cache``, or built from ``onnx_path`` and stored.

    Raises BuildError with TensorRT's words when the parser or the builder refuses the model.
    """
    path = cache.path_for(engine_key, ".engine")
    if path.is_file():
        return BuiltEngine(path.read_bytes(), path, True, 0.0, "unused (cached engine)")
    timing_path = cache.path_for(timing_key, ".timing")
    built: dict[str, Any] = {}

    def build(tmp: Path) -> None:
        start = time.perf_counter()
        data, timing, timing_state = build_serialized(trt, onnx_path, plan, timing_path)
        built.update(seconds=time.perf_counter() - start, data=data, timing=timing_state)
        tmp.write_bytes(data)
        if timing is not None:
            atomic_write(timing_path, lambda t: t.write_bytes(timing))

    path, fresh = cache.get_or_build(engine_key, ".engine", build)
    if not fresh:  # another builder finished first
        return BuiltEngine(path.read_bytes(), path, True, 0.0, "unused (cached engine)")
    return BuiltEngine(built["data"], path, False, built["seconds"], built["timing"])


def build_serialized(trt: Any, onnx_path: Path, plan: BuildPlan,
                     timing_path: Path) -> tuple[bytes, bytes | None, str]:
    """Build the engine: (serialized engine, serialized timing cache, how the cache was used)."""
    logger = trt_logger(trt)
    with _BUILD_LOCK:
        mark = logger.last
        builder = create(logger, mark, "a builder", trt.Builder, logger)
        builder.max_threads = plan.settings.builder_threads
        bits = 0
        for name in plan.network_flags:
            bits |= 1 << int(getattr(trt.NetworkDefinitionCreationFlag, name))
        network = create(logger, mark, "a network", builder.create_network, bits)
        parser = create(logger, mark, "an ONNX parser", trt.OnnxParser, network, logger)
        if not parser.parse_from_file(str(onnx_path)):
            problems = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise BuildError(f"TensorRT's ONNX parser cannot load {onnx_path.name}: "
                             f"{one_line(problems or logger.errors_since(mark))}")
        config = create(logger, mark, "a builder config", builder.create_builder_config)
        _configure(trt, config, plan)
        _add_profile(builder, config, network, plan)
        timing_state = _use_timing_cache(config, timing_path)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise BuildError(f"TensorRT could not build an engine from {onnx_path.name}: "
                             f"{one_line(logger.errors_since(mark))}")
        timing = config.get_timing_cache()
        timing_bytes = memoryview(timing.serialize()).tobytes() if timing is not None else None
        data = memoryview(serialized).tobytes()
        errors = logger.errors_since(mark)
    if errors:
        _LOG.warning("TensorRT built %s but logged errors: %s", onnx_path.name, one_line(errors))
    return data, timing_bytes, timing_state


def create(logger: Any, mark: int, what: str, factory: Any, *args: Any) -> Any:
    """``factory(*args)``, a TensorRT object; BuildError with TensorRT's errors when it makes none.

    A TensorRT factory that fails returns nullptr: a method then returns None, and a constructor
    (``trt.Builder``, ``trt.Runtime``) raises pybind11's TypeError "factory function returned
    nullptr".
    """
    try:
        made = factory(*args)
    except TypeError as exc:
        if "nullptr" not in str(exc):
            raise
        made = None
    if made is None:
        raise BuildError(f"TensorRT could not create {what}: {one_line(logger.errors_since(mark))}")
    return made


def _configure(trt: Any, config: Any, plan: BuildPlan) -> None:
    settings = plan.settings
    if settings.workspace_mb is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace_mb << 20)
    config.builder_optimization_level = settings.optimization_level
    if not settings.tf32:
        config.clear_flag(trt.BuilderFlag.TF32)
    for name in plan.precision_flags:
        config.set_flag(getattr(trt.BuilderFlag, name))


def _add_profile(builder: Any, config: Any, network: Any, plan: BuildPlan) -> None:
    """One optimization profile on the single input: batch min 1, opt = max = the candidate's."""
    if network.num_inputs != 1 or network.num_outputs != 1:
        raise BuildError(f"dse runs models with one input and one output; this one has "
                         f"{network.num_inputs} inputs and {network.num_outputs} outputs")
    tensor = network.get_input(0)
    shape = tuple(tensor.shape)
    if len(shape) != 1 + len(plan.sample_shape) or shape[0] != -1:
        raise BuildError(f"input {tensor.name!r} has shape {shape}; dse needs (batch, "
                         f"{', '.join(map(str, plan.sample_shape))}) with a dynamic batch axis")
    low, opt, high = profile_shapes_batch(plan.batch_size)
    profile = builder.create_optimization_profile()
    try:
        profile.set_shape(tensor.name, (low, *plan.sample_shape), (opt, *plan.sample_shape),
                          (high, *plan.sample_shape))
    # The bindings raise RuntimeError for shapes TensorRT finds inconsistent.
    except RuntimeError as exc:
        raise BuildError(f"TensorRT refused the optimization profile batch min/opt/max "
                         f"{low}/{opt}/{high} for input {tensor.name!r}: {exc}") from exc
    if config.add_optimization_profile(profile) < 0:
        raise BuildError(f"TensorRT refused the optimization profile batch min/opt/max "
                         f"{low}/{opt}/{high} for input {tensor.name!r}")


def _use_timing_cache(config: Any, path: Path) -> str:
    """Load the device's timing cache into ``config``, or a new one when there is none or the
    stored one does not fit this TensorRT and GPU; say which."""
    stored = path.read_bytes() if path.is_file() else b""
    # ignore_mismatch=False: timings measured on another device would mislead tactic selection.
    if stored:
        cache = config.create_timing_cache(stored)
        if cache is not None and config.set_timing_cache(cache, False):
            return f"reused {path.name}"
    cache = config.create_timing_cache(b"")
    if cache is None or not config.set_timing_cache(cache, False):
        raise BuildError("TensorRT could not create an empty timing cache")
    return f"new {path.name}" + (" (the stored one did not load)" if stored else "")
