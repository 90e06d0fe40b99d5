"""ONNX Runtime's I/O binding, as the timed call of every ONNX Runtime runner
(:meth:`dse.backends.onnxruntime.backend.OrtRunner.bound_call`).

A deployment binds its input and output buffers to the session once and then only runs it
(``run_with_iobinding``); ``session.run`` instead converts the input dict and allocates and
converts the outputs on every call. The bound batch is wrapped once in an ``OrtValue`` that
shares its host memory; the logits are written in place into a preallocated host array wrapped
the same way. ONNX Runtime's own ``onnxruntime_perf_test`` likewise makes its input
``OrtValue``s once (it lets the session allocate the outputs on each run).

Both buffers are host memory on every provider: with a GPU provider ORT copies the input to the
device and the logits back inside ``run_with_iobinding``, which returns when they are on the host
(see :mod:`dse.backends.onnxruntime.gpu`).

Thread safety: one binding per calling thread, made on its first call (a binding holds its output
buffer); ``run_with_iobinding`` may run concurrently on the one session, as ``run`` may.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np


def io_bound_call(session_of: Callable[[], Any], input_name: str, output_name: str,
                  feed: np.ndarray) -> Callable[[], np.ndarray]:
    """The timed call on ``feed`` (a bound batch, kept alive by the call): its logits, a view of
    the calling thread's output buffer where ORT writes them in place. ``session_of`` gives the
    runner's session, None once the runner is closed (the call then raises RuntimeError)."""
    import onnxruntime as ort

    value = ort.OrtValue.ortvalue_from_numpy(feed)  # on the CPU: feed's memory, not a copy
    local = threading.local()

    def call() -> np.ndarray:
        slot = getattr(local, "slot", None)
        if slot is None:
            slot = local.slot = _binding(ort, session_of(), value, input_name, output_name,
                                         len(feed))
        session, binding, read = slot
        if session_of() is None:
            raise RuntimeError("a bound call on a closed onnxruntime runner")
        session.run_with_iobinding(binding)
        return read()

    return call


def _binding(ort: Any, session: Any, value: Any, input_name: str, output_name: str,
             batch_size: int) -> tuple[Any, Any, Callable[[], np.ndarray]]:
    """A binding of ``value`` as the input, and how to read its logits: a host array ORT writes
    in place where the output's shape and type are known before a run, else what ORT allocated
    on the run, copied out."""
    if session is None:
        raise RuntimeError("a bound call on a closed onnxruntime runner")
    binding = session.io_binding()
    binding.bind_ortvalue_input(input_name, value)
    shape = output_shape(session.get_outputs()[0], batch_size)
    if shape is None:
        binding.bind_output(output_name, "cpu")
        return session, binding, lambda: binding.copy_outputs_to_cpu()[0]
    logits = np.empty(shape, dtype=np.float32)
    binding.bind_ortvalue_output(output_name, ort.OrtValue.ortvalue_from_numpy(logits))
    return session, binding, lambda: logits


def output_shape(output: Any, batch_size: int) -> tuple[int, ...] | None:
    """The shape of a float32 output at ``batch_size``, from the session's metadata: None when
    it is of another type or has another axis whose size only a run tells."""
    dims = list(output.shape)
    if output.type != "tensor(float)" or not dims \
            or not all(isinstance(d, int) and d > 0 for d in dims[1:]):
        return None
    return (batch_size, *dims[1:])
