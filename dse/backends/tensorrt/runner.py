"""A deserialized TensorRT engine as a :class:`~dse.backends.base.Runner`.

Device memory and the CUDA stream come from torch (every GPU device worker has a CUDA build of
torch), so the backend needs neither pycuda nor cuda-python. TensorRT runs through the name-based
I/O API (``set_input_shape``, ``set_tensor_address``, ``execute_async_v3``) of TensorRT 10 and 11.

An execution context must not run two batches at once, yet the harness's offline measurement calls
``run`` from several threads; so each calling thread gets its own execution slot (context, stream
and buffers), made on its first call.

CUDA graphs (the ``cuda_graph`` knob): each slot runs ``execute_async_v3`` once at the full batch
(TensorRT defers some shape work to the first enqueue after ``set_input_shape``, which must not
land in a graph), then captures one more enqueue on its stream into a ``torch.cuda.CUDAGraph`` —
torch's capture is ``cudaStreamBeginCapture``/``EndCapture`` and its ``replay`` is
``cudaGraphLaunch``, so no cuda-python is needed. The capture is thread-local
(``capture_error_mode="thread_local"``): another thread's slot may be running meanwhile. The graph
holds the buffers' addresses and the full batch's shape; a smaller batch is padded with zeros to
it (eval-mode rows are independent) so every call replays the one captured graph.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.base import Runner
from dse.backends.tensorrt.engine import BuildPlan, one_line, trt_logger
from dse.backends.tensorrt.settings import torch_dtype_name
from dse.core import BuildError

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

    def __init__(self, trt: Any, engine: Any, io: EngineIO, max_batch: int, device: int,
                 cuda_graph: bool = False) -> None:
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
        self.graph: torch.cuda.CUDAGraph | None = self._capture() if cuda_graph else None

    def _set_batch(self, batch: int) -> None:
        if not self.context.set_input_shape(self._io.input_name, (batch, *self._io.sample_shape)):
            raise RuntimeError(f"TensorRT refused batch {batch} for input {self._io.input_name!r}")
        self.batch = batch

    def _enqueue(self) -> None:
        logger = trt_logger(self._trt)
        mark = logger.last
        if not self.context.execute_async_v3(self.stream.cuda_stream):
            raise RuntimeError(f"TensorRT execute_async_v3 failed: "
                               f"{one_line(logger.errors_since(mark))}")

    def _capture(self) -> torch.cuda.CUDAGraph:
        """One enqueue at the full batch captured on this slot's stream (see the module)."""
        import torch

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(self._device), torch.cuda.stream(self.stream):
            self._enqueue()  # TensorRT's deferred work, outside the graph
            self.stream.synchronize()
            try:
                with torch.cuda.graph(graph, stream=self.stream,
                                      capture_error_mode="thread_local"):
                    self._enqueue()
            except RuntimeError as exc:
                raise RuntimeError(f"TensorRT's enqueue could not be captured in a CUDA graph: "
                                   f"{exc}") from exc
        return graph

    def run(self, feed: torch.Tensor) -> np.ndarray:
        import torch

        rows = feed.shape[0]
        with torch.cuda.device(self._device), torch.cuda.stream(self.stream):
            self.input[:rows].copy_(feed)
            if self.graph is not None:
                self.input[rows:].zero_()  # padding rows: the graph runs the full batch
                self.graph.replay()
            else:
                if rows != self.batch:
                    self._set_batch(rows)
                self._enqueue()
            # On the runner's stream (the current one), after the engine's work; blocking.
            logits = self.output[:rows].to("cpu", torch.float32)
        self.stream.synchronize()
        result: np.ndarray = logits.numpy()
        return result


class TensorRTRunner(Runner):
    """Runs batches of up to ``batch_size`` images through a TensorRT engine on one CUDA device.

    Its timed call is ``run`` on the bound batch (``Runner``'s default ``bound_call``): ``run``
    already is the deployment's path, each slot's device buffers bound once
    (``set_tensor_address``), and its copies from and to host memory belong in the timed call
    as for every GPU runner (see :mod:`dse.backends.onnxruntime.gpu`).

    Attributes:
        plan: what the engine was built with (None when not told), for a bundle's ``run.py``.
        cuda_graph: whether each slot replays its enqueue from a CUDA graph.
    """

    def __init__(self, trt: Any, engine: Any, io: EngineIO, batch_size: int, device: int,
                 settings: dict[str, str], compile_seconds: float, *,
                 cuda_graph: bool = False, plan: BuildPlan | None = None) -> None:
        self._trt = trt
        self._engine: Any = engine
        self._io = io
        self._device = device
        self._settings = settings
        self._lock = threading.Lock()
        self._slots: list[_Slot] = []
        self._local = threading.local()
        self.cuda_graph = cuda_graph
        self.plan = plan
        self.batch_size = batch_size
        self.compile_seconds = compile_seconds
        self._slot()  # the compiling thread's slot: a context that cannot be made fails compile

    def _slot(self) -> _Slot:
        slot: _Slot | None = getattr(self._local, "slot", None)
        if slot is None:
            with self._lock:
                if self._engine is None:
                    raise RuntimeError("run() on a closed tensorrt runner")
                slot = _Slot(self._trt, self._engine, self._io, self.batch_size, self._device,
                             self.cuda_graph)
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

    def profiled(self) -> tuple[Any, _Slot]:
        """The engine and a fresh execution slot of it without a CUDA graph, for TensorRT's
        layer profiler (a graph replay runs no enqueue for it to time). The slot is not one of
        the runner's: it goes when the caller drops it, and the runner's own stay as they are."""
        with self._lock:
            if self._engine is None:
                raise RuntimeError("profiled() on a closed tensorrt runner")
            return self._engine, _Slot(self._trt, self._engine, self._io, self.batch_size,
                                       self._device, cuda_graph=False)

    def describe(self) -> dict[str, str]:
        return {**self._settings, "execution_contexts": str(len(self._slots))}

    def close(self) -> None:
        with self._lock:
            if self._engine is None:
                return
            for slot in self._slots:
                slot.stream.synchronize()
                slot.graph = None  # a graph goes before the context and buffers it launches
            # Contexts go before the engine that made them.
            self._slots.clear()
            self._local = threading.local()
            self._engine = None
