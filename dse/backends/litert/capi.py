"""LiteRT's profiler, reached through the C API of the ``libLiteRt.so`` that ai-edge-litert ships.

LiteRT's Python ``Interpreter`` (the runner dse measures) takes no profiler, and its Python
``CompiledModel`` neither enables one nor hands out its native handle. The profiler is in the
shared library all the same (``LiteRtCompiledModelGetProfiler``, ``LiteRtGetProfilerEvents``),
switched on by the runtime option ``enable_profiling`` at compile time. So this module drives
that C API with ctypes: an environment, the ``.tflite`` as a model, options for the CPU
accelerator (the TOML payloads LiteRT's own option builders make: ``runtime_options_string``
with ``enable_profiling = true``; ``xnnpack`` with ``num_threads`` and, for builtin kernels
only, ``kernel_mode = "builtin"``), the compiled model, and host-memory tensor buffers over numpy
arrays.

The C declarations are LiteRT's headers (``litert/c/*.h``), checked against the 2.3.0 wheel's
exports and code: ``LiteRtCreateModelFromFile`` takes the environment first, and
``LiteRtGetProfilerEvents`` copies 104-byte ``ProfiledEventData`` records (its loop divides by
13 words). Another release may lay them out otherwise, so :data:`CHECKED_RELEASE` is the only one
this module loads into (a wrong layout would read garbage or corrupt memory, not fail cleanly).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dse.backends.op_profile import ProfilerMissing
from dse.core import BuildError

DISTRIBUTION = "ai-edge-litert"
CHECKED_RELEASE = "2.3"  # major.minor whose ProfiledEventData layout was checked (see module)
_LIBRARY = "libLiteRt.so"
_CPU_ACCELERATOR = 1  # kLiteRtHwAcceleratorCpu
_HOST_ALIGNMENT = 64  # LITERT_HOST_MEMORY_BUFFER_ALIGNMENT: unaligned host memory is refused
_TENSOR_TYPE_BYTES = 512  # room for a LiteRtRankedTensorType (72 bytes), written by LiteRT
_EVENT_BYTES = 104  # sizeof(ProfiledEventData) in the checked release
_OK = 0

_P = ctypes.c_void_p
_OUT = ctypes.POINTER(ctypes.c_void_p)
_SIZE = ctypes.c_size_t


class _MemoryUsage(ctypes.Structure):
    _fields_ = [("total_allocated_bytes", ctypes.c_size_t),
                ("in_use_allocated_bytes", ctypes.c_size_t),
                ("private_footprint_bytes", ctypes.c_size_t)]


class EventData(ctypes.Structure):
    """LiteRT's ``ProfiledEventData`` (``litert/c/litert_profiler_event.h``)."""

    _fields_ = [("tag", ctypes.c_char_p), ("event_type", ctypes.c_int),
                ("start_timestamp_us", ctypes.c_uint64), ("elapsed_time_us", ctypes.c_uint64),
                ("begin_mem_usage", _MemoryUsage), ("end_mem_usage", _MemoryUsage),
                ("event_metadata1", ctypes.c_uint64), ("event_metadata2", ctypes.c_uint64),
                ("event_source", ctypes.c_int)]


# Name -> (result type, argument types), from LiteRT's C headers.
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "LiteRtCreateEnvironment": (ctypes.c_int, [ctypes.c_int, _P, _OUT]),
    "LiteRtDestroyEnvironment": (None, [_P]),
    "LiteRtCreateModelFromFile": (ctypes.c_int, [_P, ctypes.c_char_p, _OUT]),
    "LiteRtDestroyModel": (None, [_P]),
    "LiteRtGetModelSignature": (ctypes.c_int, [_P, _SIZE, _OUT]),
    "LiteRtGetSignatureInputTensorByIndex": (ctypes.c_int, [_P, _SIZE, _OUT]),
    "LiteRtGetSignatureOutputTensorByIndex": (ctypes.c_int, [_P, _SIZE, _OUT]),
    "LiteRtGetRankedTensorType": (ctypes.c_int, [_P, _P]),
    "LiteRtCreateOptions": (ctypes.c_int, [_OUT]),
    "LiteRtDestroyOptions": (None, [_P]),
    "LiteRtSetOptionsHardwareAccelerators": (ctypes.c_int, [_P, ctypes.c_int]),
    "LiteRtCreateOpaqueOptions": (ctypes.c_int, [ctypes.c_char_p, _P, _P, _OUT]),
    "LiteRtDestroyOpaqueOptions": (None, [_P]),
    "LiteRtAddOpaqueOptions": (ctypes.c_int, [_P, _P]),
    "LiteRtCreateCompiledModel": (ctypes.c_int, [_P, _P, _P, _OUT]),
    "LiteRtDestroyCompiledModel": (None, [_P]),
    "LiteRtCreateTensorBufferFromHostMemory": (ctypes.c_int, [_P, _P, _SIZE, _P, _OUT]),
    "LiteRtDestroyTensorBuffer": (None, [_P]),
    "LiteRtRunCompiledModel": (ctypes.c_int, [_P, _SIZE, _SIZE, _OUT, _SIZE, _OUT]),
    "LiteRtCompiledModelGetProfiler": (ctypes.c_int, [_P, _OUT]),
    "LiteRtStartProfiler": (ctypes.c_int, [_P]),
    "LiteRtStopProfiler": (ctypes.c_int, [_P]),
    "LiteRtResetProfiler": (ctypes.c_int, [_P]),
    "LiteRtGetNumProfilerEvents": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_int)]),
    "LiteRtGetProfilerEvents": (ctypes.c_int, [_P, ctypes.c_int, ctypes.POINTER(EventData)]),
}


@dataclass(frozen=True)
class Event:
    """One profiler event, copied out of LiteRT's buffer."""

    tag: str
    event_type: int
    start_us: int
    elapsed_us: int
    metadata1: int
    metadata2: int
    source: int


def release() -> str:
    """The installed ai-edge-litert version; ProfilerMissing when it is not the checked one."""
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ProfilerMissing(f"litert: {DISTRIBUTION} is not installed") from exc
    if ".".join(version.split(".")[:2]) != CHECKED_RELEASE:
        raise ProfilerMissing(f"litert: dse reads LiteRT's profiler events through its C API with "
                              f"the record layout of {DISTRIBUTION} {CHECKED_RELEASE}; {version} is "
                              f"installed and its layout is unchecked")
    if ctypes.sizeof(EventData) != _EVENT_BYTES:
        raise ProfilerMissing(f"litert: LiteRT's profiler records are {_EVENT_BYTES} bytes on "
                              f"64-bit platforms; this one lays them out in "
                              f"{ctypes.sizeof(EventData)}")
    return version


def _library() -> Any:
    import ai_edge_litert

    path = Path(ai_edge_litert.__file__).parent / _LIBRARY
    try:
        library = ctypes.CDLL(str(path))
        for name, (result, arguments) in _SIGNATURES.items():
            function = getattr(library, name)
            function.restype, function.argtypes = result, arguments
    except (OSError, AttributeError) as exc:
        raise ProfilerMissing(f"litert: {path.name} of {DISTRIBUTION} lacks LiteRT's profiler C "
                              f"API ({exc})") from exc
    return library


def _aligned(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """A zeroed array whose data starts on a :data:`_HOST_ALIGNMENT` boundary."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.zeros(nbytes + _HOST_ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % _HOST_ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class ProfiledModel:
    """A ``.tflite`` compiled by LiteRT for the CPU with its profiler on, run on numpy arrays.

    Life cycle: ``open()`` (or ``with``) builds it, ``run`` invokes it, ``start``/``events``
    bracket what is profiled, ``close()`` frees every native object in reverse order. Not
    thread-safe: one caller at a time, as the profile runs.
    """

    def __init__(self, path: Path, threads: int, xnnpack: bool, input_array: np.ndarray,
                 output_shape: tuple[int, ...], output_dtype: np.dtype[Any]) -> None:
        self._path = path
        self._threads = threads
        self._xnnpack = xnnpack
        self.input = _aligned(input_array.shape, input_array.dtype)
        self.output = _aligned(output_shape, output_dtype)
        self._api: Any = None
        self._handles: list[tuple[Callable[[Any], None], Any]] = []  # (destroy, handle)
        self._compiled: Any = None
        self._profiler: Any = None
        self._keep: list[Any] = []
        self._inputs = (ctypes.c_void_p * 1)()
        self._outputs = (ctypes.c_void_p * 1)()

    def __enter__(self) -> ProfiledModel:
        try:
            self.open()
        except BaseException:
            self.close()  # what open() made before it failed
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, name: str, *arguments: Any) -> None:
        status = getattr(self._api, name)(*arguments)
        if status != _OK:
            raise BuildError(f"litert: {name} failed with LiteRtStatus {status} "
                             f"({self._path.name})")

    def _make(self, name: str, destroy: str, *arguments: Any) -> Any:
        handle = ctypes.c_void_p()
        self._call(name, *arguments, ctypes.byref(handle))
        self._handles.append((getattr(self._api, destroy), handle))
        return handle

    def open(self) -> None:
        """Build the environment, model, options, compiled model and buffers."""
        self._api = _library()
        environment = self._make("LiteRtCreateEnvironment", "LiteRtDestroyEnvironment", 0, None)
        model = self._make("LiteRtCreateModelFromFile", "LiteRtDestroyModel", environment,
                           str(self._path).encode())
        options = self._make("LiteRtCreateOptions", "LiteRtDestroyOptions")
        self._call("LiteRtSetOptionsHardwareAccelerators", options, _CPU_ACCELERATOR)
        cpu = f"num_threads = {self._threads}\n" + ("" if self._xnnpack else
                                                    'kernel_mode = "builtin"\n')
        self._option(options, b"runtime_options_string", "enable_profiling = true\n")
        self._option(options, b"xnnpack", cpu)
        self._compiled = self._make("LiteRtCreateCompiledModel", "LiteRtDestroyCompiledModel",
                                    environment, model, options)
        signature = ctypes.c_void_p()
        self._call("LiteRtGetModelSignature", model, 0, ctypes.byref(signature))
        self._inputs[0] = self._buffer(signature, "Input", self.input)
        self._outputs[0] = self._buffer(signature, "Output", self.output)
        profiler = ctypes.c_void_p()  # owned by the compiled model
        self._call("LiteRtCompiledModelGetProfiler", self._compiled, ctypes.byref(profiler))
        if not profiler:
            raise ProfilerMissing(f"litert: LiteRT compiled {self._path.name} without a profiler "
                                  f"although enable_profiling was set")
        self._profiler = profiler

    def _option(self, options: Any, identifier: bytes, toml: str) -> None:
        """Attach a TOML payload; LiteRT owns it from then on and frees it with libc's free."""
        libc = ctypes.CDLL(None)
        libc.strdup.restype, libc.strdup.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
        libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
        payload = libc.strdup(toml.encode())
        opaque = ctypes.c_void_p()
        status = self._api.LiteRtCreateOpaqueOptions(
            identifier, payload, ctypes.cast(libc.free, ctypes.c_void_p), ctypes.byref(opaque))
        if status != _OK:
            libc.free(payload)
            raise BuildError(f"litert: LiteRtCreateOpaqueOptions failed with LiteRtStatus {status}")
        status = self._api.LiteRtAddOpaqueOptions(options, opaque)
        if status != _OK:
            self._api.LiteRtDestroyOpaqueOptions(opaque)
            raise BuildError(f"litert: LiteRtAddOpaqueOptions failed with LiteRtStatus {status}")

    def _buffer(self, signature: Any, which: str, array: np.ndarray) -> Any:
        tensor = ctypes.c_void_p()
        self._call(f"LiteRtGetSignature{which}TensorByIndex", signature, 0, ctypes.byref(tensor))
        tensor_type = (ctypes.c_ubyte * _TENSOR_TYPE_BYTES)()
        self._keep.append(tensor_type)  # alive as long as the buffer made with it
        self._call("LiteRtGetRankedTensorType", tensor, ctypes.cast(tensor_type, ctypes.c_void_p))
        # No deallocator: the numpy array owns the memory and outlives the buffer (close()).
        return self._make("LiteRtCreateTensorBufferFromHostMemory", "LiteRtDestroyTensorBuffer",
                          ctypes.cast(tensor_type, ctypes.c_void_p), array.ctypes.data,
                          array.nbytes, None)

    def run(self, feed: np.ndarray) -> np.ndarray:
        """One invocation on ``feed`` (the input's shape and dtype); a copy of the output."""
        np.copyto(self.input, feed)
        self._call("LiteRtRunCompiledModel", self._compiled, 0, 1, self._inputs, 1, self._outputs)
        return self.output.copy()

    def start(self) -> None:
        """Drop the events so far (warm-up) and record from here."""
        self._call("LiteRtResetProfiler", self._profiler)
        self._call("LiteRtStartProfiler", self._profiler)

    def events(self) -> list[Event]:
        """Stop recording; every event since :meth:`start`, in the order LiteRT recorded them."""
        self._call("LiteRtStopProfiler", self._profiler)
        count = ctypes.c_int()
        self._call("LiteRtGetNumProfilerEvents", self._profiler, ctypes.byref(count))
        if count.value <= 0:
            return []
        records = (EventData * count.value)()
        self._call("LiteRtGetProfilerEvents", self._profiler, count.value, records)
        return [Event((r.tag or b"").decode(errors="replace"), int(r.event_type),
                      int(r.start_timestamp_us), int(r.elapsed_time_us), int(r.event_metadata1),
                      int(r.event_metadata2), int(r.event_source)) for r in records]

    def close(self) -> None:
        """Free the native objects, newest first (buffers, compiled model, options, model,
        environment)."""
        while self._handles:
            destroy, handle = self._handles.pop()
            destroy(handle)
        self._compiled = self._profiler = None
        self._keep.clear()
