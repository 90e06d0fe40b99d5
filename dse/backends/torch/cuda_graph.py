"""Eager torch with CUDA-graph replay (the torch backend's ``cuda_graph`` knob).

The module's forward at the candidate's batch size is captured once, in ``compile``, into a
``torch.cuda.CUDAGraph`` reading a static input buffer and writing a static output; each ``run``
copies the host batch into the input buffer, replays the graph and copies the logits back. So the
timed call still pays the host <-> device copies, like every GPU runner of dse, and saves the
per-kernel launch cost that eager mode pays on every call.

A smaller batch (the last, partial batch of an accuracy pass) is padded with zeros to the
captured size and its rows sliced out: eval-mode rows are independent, so the padding changes no
real row, and every call replays the one captured graph (an uncaptured call for it would run
other kernels than the ones measured).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.base import Runner, padded_batch
from dse.backends.torch.common import Placement, TorchRunner
from dse.backends.torch.sdpa_knob import kernel_context
from dse.core import BuildError

if TYPE_CHECKING:
    import torch

# Eager iterations on a side stream before capture: the caching allocator and cuDNN/cuBLAS
# workspaces are set up there, not inside the graph (PyTorch's documented recipe uses 3).
WARMUP_CALLS = 3


class TorchCudaGraphRunner(TorchRunner):
    """Replays the module's forward captured at ``batch_size``; see the module docstring."""

    def __init__(self, module: Callable[[torch.Tensor], torch.Tensor], placement: Placement,
                 batch_size: int, settings: dict[str, str], input_shape: tuple[int, ...],
                 kernel: str) -> None:
        super().__init__(module, placement, batch_size, {**settings, "cuda_graph": "true"},
                         kernel)
        self._graph: Any = None
        self._static_in: torch.Tensor | None = None
        self._static_out: torch.Tensor | None = None
        self._capture(module, input_shape)

    def _capture(self, module: Callable[[torch.Tensor], torch.Tensor],
                 input_shape: tuple[int, ...]) -> None:
        import torch

        place = self._placement
        static_in = torch.zeros((self.batch_size, *input_shape), device="cuda",
                                dtype=getattr(torch, self.input_dtype))
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(side), self._context():
                for _ in range(WARMUP_CALLS):
                    module(static_in)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with self._context(), torch.cuda.graph(graph):
                static_out = module(static_in)
            torch.cuda.synchronize()
        # Capture refuses what a graph cannot hold (host syncs, CPU ops, dynamic control flow):
        # a RuntimeError from torch or the CUDA driver.
        except RuntimeError as exc:
            raise BuildError(f"torch could not capture the module in a CUDA graph at batch "
                             f"{self.batch_size} ({place.precision}): {exc}") from exc
        self._graph, self._static_in, self._static_out = graph, static_in, static_out

    @contextlib.contextmanager
    def _context(self) -> Iterator[None]:
        import torch

        place = self._placement
        # Autocast's weight cache must be off while capturing (PyTorch's CUDA-graph notes).
        with torch.inference_mode(), kernel_context(self._kernel), torch.autocast(
                "cuda", getattr(torch, place.dtype), enabled=place.autocast, cache_enabled=False):
            yield

    def run(self, x: np.ndarray) -> np.ndarray:
        import torch

        if self._graph is None or self._static_in is None or self._static_out is None:
            raise RuntimeError("run() on a closed torch runner")
        rows = len(x)
        feed = padded_batch(x, self.batch_size, "this CUDA graph")
        with torch.inference_mode():
            self._static_in.copy_(torch.from_numpy(feed))
            self._graph.replay()
            # A blocking device -> host copy: run() returns when the GPU's work is done.
            result: np.ndarray = self._static_out[:rows].to("cpu", torch.float32).numpy()
        return result

    def bound_call(self, x: np.ndarray) -> Callable[[], np.ndarray]:
        """``run`` on the bound batch (``Runner``'s default): ``run`` already is the deployment's
        path, the graph's buffers bound once at capture, and its host copies belong in the timed
        call as for every GPU runner."""
        return Runner.bound_call(self, x)

    def close(self) -> None:
        super().close()
        self._graph = self._static_in = self._static_out = None
