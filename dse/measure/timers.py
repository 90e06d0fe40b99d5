"""Timed calls: a call wrapped so that calling it returns its duration in ms, on the host's clock
or on the device's (CUDA events), and the host clock's own cost, the floor under a host-timed
sample.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Literal

import numpy as np

Timer = Literal["host", "cuda"]


def timer_overhead_ns(repeats: int = 2000) -> float:
    """Median cost of one host timestamp pair, in ns: the floor under any host-timed sample."""
    clock = time.perf_counter_ns
    gaps = np.empty(repeats)
    for i in range(repeats):
        start = clock()
        gaps[i] = clock() - start
    return float(np.median(gaps))


def host_timed(fn: Callable[[], object], sync: Callable[[], object] | None) -> Callable[[], float]:
    """Time on the host's monotonic clock, in ms; ``sync`` (if any) waits for the device."""
    clock = time.perf_counter_ns
    if sync is None:
        def timed() -> float:
            start = clock()
            fn()
            return (clock() - start) / 1e6
    else:
        # The sync belongs inside the timed region: an asynchronous launch returns before the
        # device has done the work, and its host time alone would be a lie.
        def timed() -> float:
            start = clock()
            fn()
            sync()
            return (clock() - start) / 1e6
    return timed


def cuda_timed(fn: Callable[[], object]) -> Callable[[], float]:
    """Time on the device's own clock with CUDA events around the call (torch's CUDA API)."""
    import torch

    begin = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def timed() -> float:
        begin.record()
        fn()
        end.record()
        end.synchronize()
        return float(begin.elapsed_time(end))

    return timed


class RuntimeClockTap:
    """A timed call that also reads the runtime's own clock of each call while ``recording``.

    Some runtimes time their own inference (OpenVINO's ``InferRequest.latency``, which its
    ``benchmark_app`` reports): the call as the runtime sees it, without the way in from Python.
    Read right after the host clock has stopped, it costs the timed call nothing; each recorded
    call gives a pair (host ms, runtime ms). The host clock stays the measurement (a Python
    deployment pays the way in, and runtimes without such a clock are timed the same way); the
    runtime's figure says how much of it the runtime itself spent.
    """

    def __init__(self, timed: Callable[[], float], clock: Callable[[], float]) -> None:
        self._timed = timed
        self._clock = clock
        self.recording = False
        self.pairs: list[tuple[float, float]] = []

    def __call__(self) -> float:
        ms = self._timed()
        if self.recording:
            self.pairs.append((ms, self._clock()))
        return ms

    def runtime_p50_ms(self) -> float:
        """The median of the runtime's own clock over the recorded calls (NaN without any)."""
        if not self.pairs:
            return math.nan
        return float(np.median([inner for _, inner in self.pairs]))

    def overhead_us(self) -> float:
        """The median of host minus runtime time per recorded call, in us: the way in from the
        caller (the binding's call, its argument handling, the GIL) that the runtime does not
        time (NaN without any)."""
        if not self.pairs:
            return math.nan
        return float(np.median([host - inner for host, inner in self.pairs])) * 1e3
