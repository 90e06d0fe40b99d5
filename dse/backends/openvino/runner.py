"""A compiled OpenVINO model as a :class:`~dse.backends.base.Runner`: its infer requests, one per
calling thread, for ``run`` and for the timed call (see :mod:`dse.backends.openvino.backend`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from dse.backends.base import Runner, bound_batch, padded_batch


class OpenVinoRunner(Runner):
    """A compiled model and one infer request per calling thread.

    Unlike most runners this one may be driven by several threads at once (the offline
    scenario's): each thread's first call makes its own ``InferRequest``. A request runs with
    the synchronous ``infer()``, which releases the GIL, so concurrent calls overlap on the
    compiled model's streams (several with the throughput hint). ``start_async()`` + ``wait()``,
    the request handed to the plugin's executor and waited for, measured 60-80 us more per call
    (OpenVINO 2026.4, one thread, one stream): twice the whole inference of the quickstart CNN.
    ``run`` shares its input with OpenVINO (not copied) and
    copies the logits out of the request's buffer before the next call reuses it.

    The timed call (:meth:`bound_call`) is how a deployment and ``benchmark_app -api sync`` run
    a request: the batch written once into each request's own input tensor (allocated by the
    plugin), then ``infer()`` alone per call, the logits read as a view of the request's output
    tensor. ``run``'s input, wrapped and set as the request's tensor on every call, cost 20 us
    more per call on the quickstart CNN.
    """

    def __init__(self, compiled: Any, batch_size: int, settings: dict[str, str]) -> None:
        self._compiled: Any = compiled
        self._local = threading.local()
        self._settings = settings
        self.batch_size = batch_size
        # The device and properties it was compiled with, for a bundle's run.py.
        self.properties: tuple[str, dict[str, Any]] | None = None

    def run(self, x: np.ndarray) -> np.ndarray:
        rows = len(x)
        if rows == self.batch_size and x.dtype == np.float32 and x.flags.c_contiguous:
            feed = x  # no copy, no checks beyond these
        else:
            feed = padded_batch(x, self.batch_size,
                                "this openvino runner (compiled for one batch size)")
        slot = getattr(self._local, "slot", None)
        if slot is None:
            slot = self._local.slot = self._request()
        request, output = slot
        request.infer({0: feed}, share_inputs=True, share_outputs=True)
        logits: np.ndarray = np.array(output[:rows], dtype=np.float32)
        return logits

    def bound_call(self, x: np.ndarray) -> Callable[[], np.ndarray]:
        return _BoundRequests(self, bound_batch(x, self.batch_size))

    def runtime_clock(self, call: Callable[[], np.ndarray]) -> Callable[[], float] | None:
        # The request's own latency of its last infer(), timed inside OpenVINO: what
        # benchmark_app reports.
        return call.last_latency_ms if isinstance(call, _BoundRequests) else None

    def _request(self) -> tuple[Any, np.ndarray]:
        """A new infer request and a view of its output tensor: with static shapes the buffer
        is allocated once, so its numpy view is made once too (a few microseconds a call at
        batch 1 otherwise)."""
        compiled = self._compiled
        if compiled is None:
            raise RuntimeError("a call on a closed openvino runner")
        request = compiled.create_infer_request()
        return request, request.get_output_tensor(0).data

    def describe(self) -> dict[str, str]:
        return dict(self._settings)

    def close(self) -> None:
        # Dropping the thread-local drops every thread's request with it; a bound call's
        # requests go with the bound call.
        self._compiled = None
        self._local = threading.local()


class _BoundRequests:
    """The timed call of an :class:`OpenVinoRunner`: per calling thread, its own infer request
    with the batch written once into the request's input tensor, then ``infer()`` alone per
    call; the logits are a view of the request's output tensor."""

    def __init__(self, runner: OpenVinoRunner, feed: np.ndarray) -> None:
        self._runner = runner
        self._feed = feed
        self._local = threading.local()

    def __call__(self) -> np.ndarray:
        slot = getattr(self._local, "slot", None)
        if slot is None:
            request, output = self._local.slot = self._runner._request()
            request.get_input_tensor(0).data[...] = self._feed
        else:
            request, output = slot
            if self._runner._compiled is None:
                raise RuntimeError("a bound call on a closed openvino runner")
        # share_outputs: the returned dict views the output tensor rather than copying it.
        request.infer(share_outputs=True)
        result: np.ndarray = output
        return result

    def last_latency_ms(self) -> float:
        """OpenVINO's own time of this thread's last ``infer()``, in ms."""
        return float(self._local.slot[0].latency)


# What the compiled model says it runs with: its properties as read back, in words, for a runner's
# describe() (the settings in effect, not those asked for).
def in_effect(compiled: Any, threads_asked: str) -> dict[str, str]:
    """describe()'s settings as the compiled model reports them, not as they were asked ("n/a"
    for a property the device's plugin does not have)."""
    supported = set(compiled.get_property("SUPPORTED_PROPERTIES"))

    def read(key: str) -> str | None:
        return property_text(compiled.get_property(key)) if key in supported else None

    return {"threads": read("INFERENCE_NUM_THREADS") or threads_asked,
            "performance_hint": (read("PERFORMANCE_HINT") or "n/a").lower(),
            "num_streams": read("NUM_STREAMS") or "n/a",
            "optimal_infer_requests": read("OPTIMAL_NUMBER_OF_INFER_REQUESTS") or "n/a",
            "inference_precision": read("INFERENCE_PRECISION_HINT") or "n/a",
            "cpu_pinning": read("ENABLE_CPU_PINNING") or "n/a",
            "execution_devices": ",".join(str(name) for name in
                                          compiled.get_property("EXECUTION_DEVICES"))}


def property_text(value: Any) -> str:
    """A property's value in words: an ``openvino.Type`` by its short name (``bf16``), an enum
    by its member's name (``LATENCY``), anything else as ``str``."""
    type_name = getattr(value, "get_type_name", None)
    if callable(type_name):
        return str(type_name())
    return str(getattr(value, "name", value))
