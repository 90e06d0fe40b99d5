"""Timed calls: a call wrapped so that calling it returns its duration in ms, on the host's clock
or on the device's (CUDA events), and the host clock's own cost, the floor under a host-timed
sample.
"""

from __future__ import annotations

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
