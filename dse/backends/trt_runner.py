"""A deserialized TensorRT engine as a :class:`~dse.backends.base.Runner`.

Device memory and the CUDA stream come from torch (every GPU device worker has a CUDA build of
torch), so the backend needs neither pycuda nor cuda-python. TensorRT runs through the name-based
I/O API (``set_input_shape``, ``set_tensor_address``, ``execute_async_v3``) of TensorRT 10 and 11.

An execution context must not run two batches at once, yet the harness's offline measurement calls
``run`` from several threads; so each calling thread gets its own execution slot (context, stream
and buffers), made on its first call.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.base import Runner
from dse.backends.trt_engine import one_line, trt_logger
from dse.backends.trt_settings import torch_dtype_name
from dse.exceptions import BuildError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class EngineIO:
    """The engine's single input and output: names and torch dtypes (by name)."""

    input_name: str
    input_dtype: str
    output_name: str
    output_dtype: str
    sample_shape: tuple[int, ...]


def engine_io(trt: Any, engine: Any, sample_shape: tuple[int, ...]) -> EngineIO:
    """Read the I/O tensors of ``engine``; BuildError unless there is one input and one output."""
    inputs: list[str] = []
    outputs: list[str] = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        (inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs).append(name)
    if len(inputs) != 1 or len(outputs) != 1:
        raise BuildError(f"dse runs engines with one input and one output; this one has inputs "
                         f"{inputs} and outputs {outputs}")
    shape = tuple(engine.get_tensor_shape(inputs[0]))
    if shape[1:] != sample_shape:
        raise BuildError(f"engine input {inputs[0]!r} has shape {shape}, expected (batch, "
                         f"{', '.join(map(str, sample_shape))})")
    return EngineIO(inputs[0], torch_dtype_name(_dtype_name(engine.get_tensor_dtype(inputs[0]))),
                    outputs[0], torch_dtype_name(_dtype_name(engine.get_tensor_dtype(outputs[0]))),
                    sample_shape)


def _dtype_name(dtype: Any) -> str:
    # pybind11 enums have .name; str() ("DataType.FLOAT") is the fallback for older bindings.
    return str(getattr(dtype, "name", "") or str(dtype).rsplit(".", 1)[-1])


class _Slot:
    """One execution context with its own stream and device buffers sized for the max batch."""

    def __init__(self, trt: Any, engine: Any, io: EngineIO, max_batch: int, device: int) -> None:
        import torch

        self._trt = trt
        self._io = io
        self._device = device
        logger = trt_logger(trt)
        mark = logger.last
        self.context = engine.create_execution_context()
        if self.context is None:
            raise RuntimeError(f"TensorRT could not create an execution context: "
                               f"{one_line(logger.errors_since(mark))}")
        self.stream = torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]
        full = (max_batch, *io.sample_shape)
        self.input = torch.empty(full, dtype=getattr(torch, io.input_dtype), device=device)
        self._set_batch(max_batch)
        out_shape = tuple(self.context.get_tensor_shape(io.output_name))
        self.output = torch.empty(out_shape, dtype=getattr(torch, io.output_dtype), device=device)
        # Fixed addresses: a smaller batch uses the leading rows, as the batch axis is outermost.
        self.context.set_tensor_address(io.input_name, self.input.data_ptr())
        self.context.set_tensor_address(io.output_name, self.output.data_ptr())

    def _set_batch(self, batch: int) -> None:
        if not self.context.set_input_shape(self._io.input_name, (batch, *self._io.sample_shape)):
            raise RuntimeError(f"TensorRT refused batch {batch} for input {self._io.input_name!r}")
        self.batch = batch

    def run(self, feed: torch.Tensor) -> np.ndarray:
        import torch

        rows = feed.shape[0]
        logger = trt_logger(self._trt)
        mark = logger.last
        with torch.cuda.device(self._device), torch.cuda.stream(self.stream):
            self.input[:rows].copy_(feed)
            if rows != self.batch:
                self._set_batch(rows)
            if not self.context.execute_async_v3(self.stream.cuda_stream):
                raise RuntimeError(f"TensorRT execute_async_v3 failed: "
                                   f"{one_line(logger.errors_since(mark))}")
            # On the runner's stream (the current one), after the engine's work; blocking.
            logits = self.output[:rows].to("cpu", torch.float32)
        self.stream.synchronize()
        result: np.ndarray = logits.numpy()
        return result


class TensorRTRunner(Runner):
    """Runs batches of up to ``batch_size`` images through a TensorRT engine on one CUDA device."""

    def __init__(self, trt: Any, engine: Any, io: EngineIO, batch_size: int, device: int,
                 settings: dict[str, str], compile_seconds: float) -> None:
        self._trt = trt
        self._engine: Any = engine
        self._io = io
        self._device = device
        self._settings = settings
        self._lock = threading.Lock()
        self._slots: list[_Slot] = []
        self._local = threading.local()
        self.batch_size = batch_size
        self.compile_seconds = compile_seconds
        self._slot()  # the compiling thread's slot: a context that cannot be made fails compile

    def _slot(self) -> _Slot:
        slot: _Slot | None = getattr(self._local, "slot", None)
        if slot is None:
            with self._lock:
                if self._engine is None:
                    raise RuntimeError("run() on a closed tensorrt runner")
                slot = _Slot(self._trt, self._engine, self._io, self.batch_size, self._device)
                self._slots.append(slot)
            self._local.slot = slot
        return slot

    def run(self, x: np.ndarray) -> np.ndarray:
        import torch

        if self._engine is None:
            raise RuntimeError("run() on a closed tensorrt runner")
        feed = np.ascontiguousarray(x, dtype=np.float32)
        if feed.ndim != 1 + len(self._io.sample_shape) or feed.shape[1:] != self._io.sample_shape:
            raise ValueError(f"expected a batch of shape (N, "
                             f"{', '.join(map(str, self._io.sample_shape))}), got {feed.shape}")
        if not 1 <= len(feed) <= self.batch_size:
            raise ValueError(f"batch of {len(feed)} images; this engine runs 1 to "
                             f"{self.batch_size}")
        if not feed.flags.writeable:  # torch.from_numpy warns on read-only memory
            feed = feed.copy()
        return self._slot().run(torch.from_numpy(feed))

    def describe(self) -> dict[str, str]:
        return {**self._settings, "execution_contexts": str(len(self._slots))}

    def close(self) -> None:
        with self._lock:
            if self._engine is None:
                return
            for slot in self._slots:
                slot.stream.synchronize()
            # Contexts go before the engine that made them.
            self._slots.clear()
            self._local = threading.local()
            self._engine = None
