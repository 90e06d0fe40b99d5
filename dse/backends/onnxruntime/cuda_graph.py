"""ONNX Runtime's CUDA provider with CUDA graphs (the onnxruntime_cuda ``enable_cuda_graph`` knob).

With ``enable_cuda_graph`` ORT captures the session's kernels on a run and replays them on later
runs, which requires the inputs and outputs at the same device addresses on every run: so this
runner binds one input and one output buffer on the GPU (I/O binding with ``OrtValue``s made
once) and, per call, copies the host batch into the input buffer (``update_inplace``), runs the
binding and copies the logits back to the host. The timed call still pays both copies, as every
GPU runner of dse does (see :mod:`dse.backends.onnxruntime.gpu`): it is ``run`` on the bound batch (the
default ``Runner.bound_call``), since ``run`` already is the deployment's path, its device
buffers bound once. ORT refuses graph capture when a compute
node is not on the CUDA provider (a Memcpy node would be needed); the session's creation then
fails and the candidate is infeasible with ORT's reason.

A smaller batch (an accuracy pass's last one) is padded with zeros to the captured shape and its
rows sliced out: one captured graph serves every call, and eval-mode rows are independent.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.base import Runner, padded_batch
from dse.backends.onnxruntime.backend import OrtRunner
from dse.core import BuildError

if TYPE_CHECKING:
    from pathlib import Path

    from dse.backends.onnxruntime.backend import SessionPlan, SessionSettings


class OrtCudaGraphRunner(Runner):
    """Runs an ``enable_cuda_graph`` session through fixed device buffers; see the module."""

    def __init__(self, runner: OrtRunner, sample_shape: tuple[int, ...]) -> None:
        import onnxruntime as ort

        self._runner = runner
        self.batch_size = runner.batch_size
        session = runner.session
        self._input_shape = (self.batch_size, *sample_shape)
        output_shape = _output_shape(session, self.batch_size)
        self._input = ort.OrtValue.ortvalue_from_shape_and_type(
            self._input_shape, np.float32, "cuda", 0)
        self._output = ort.OrtValue.ortvalue_from_shape_and_type(
            output_shape, np.float32, "cuda", 0)
        self._binding: Any = session.io_binding()
        self._binding.bind_ortvalue_input(session.get_inputs()[0].name, self._input)
        self._binding.bind_ortvalue_output(session.get_outputs()[0].name, self._output)
        self.compile_seconds = runner.compile_seconds
        # The session's first run (the placement check's) was a regular one; ORT captures on the
        # next: done here, so compile pays the capture and the timed runs only replay.
        start = time.perf_counter()
        try:
            self.run(np.zeros(self._input_shape, dtype=np.float32))
        except Exception as exc:  # ORT's run-time errors share no base class below Exception
            raise BuildError(f"onnxruntime_cuda could not capture the session in a CUDA graph: "
                             f"{type(exc).__name__}: {exc}") from exc
        if self.compile_seconds is not None:
            self.compile_seconds += time.perf_counter() - start

    def run(self, x: np.ndarray) -> np.ndarray:
        session = self._runner.session
        if session is None:
            raise RuntimeError("run() on a closed onnxruntime runner")
        rows = len(x)
        feed = padded_batch(x, self.batch_size, "this CUDA graph")
        self._input.update_inplace(feed)  # host -> the bound device buffer, same address
        session.run_with_iobinding(self._binding)
        result: np.ndarray = self._binding.copy_outputs_to_cpu()[0][:rows]
        return result

    @property
    def sibling(self) -> tuple[SessionPlan, Path, SessionSettings] | None:
        """The wrapped runner's session plan, model file and settings (its ``sibling``)."""
        return self._runner.sibling

    def describe(self) -> dict[str, str]:
        return {**self._runner.describe(), "enable_cuda_graph": "1", "io_binding": "cuda"}

    def close(self) -> None:
        self._binding = None
        self._runner.close()


def _output_shape(session: Any, batch_size: int) -> tuple[int, ...]:
    """The output's shape at ``batch_size``: a bound output buffer needs it before any run.
    BuildError for an output with another symbolic axis than the batch."""
    output = session.get_outputs()[0]
    dims = list(output.shape)
    rest = dims[1:]
    if not dims or not all(isinstance(d, int) and d > 0 for d in rest):
        raise BuildError(f"enable_cuda_graph binds a fixed output buffer, but output "
                         f"{output.name!r} has shape {dims}: only its batch axis may vary")
    return (batch_size, *rest)
