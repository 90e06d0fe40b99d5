"""The model's own memory: what the process holds because the runner exists.

``memory_model_mb`` = the process's resident memory while the runner is warm and timed, minus its
resident memory just before the runner was built, plus the weights the runner runs from memory
that was already resident (an in-memory torch module used as is: ``Runner.borrowed_bytes``).
Freed heap is handed back to the system before each reading (glibc ``malloc_trim``), so memory
that earlier work freed but the allocator kept does not count against or for the model; readings
of one live set still differ by up to :data:`RESOLUTION_BYTES`. Each backend starts its runtime
before the first reading (``Backend.start_runtime``), so its one-off cost is not a model's.

The whole process's RSS (hundreds of MB of Python, torch and the runtimes, whatever the model)
is ``process_rss_peak_mb``; it is the figure to bound only where the whole process must fit.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to hand back this way
        return None
    return trim


def trim_heap() -> None:
    """Hand freed heap back to the system where the C library can (glibc); else nothing."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def rss_bytes() -> int:
    """This process's resident memory now, in bytes."""
    import psutil

    return int(psutil.Process(os.getpid()).memory_info().rss)


# How far apart two readings of the same live set fall (the allocator's arenas and pages): seen
# 0.1 to 1.5 MB here for one small model measured again and again.
RESOLUTION_BYTES = 2 * 1024 * 1024


def model_footprint_mb(rss_before: int, rss_during: int, borrowed: int) -> tuple[float | None, str]:
    """``memory_model_mb`` from the readings, or None and why it cannot be read from them. A
    drop within :data:`RESOLUTION_BYTES` is a runner that added nothing the readings can tell."""
    added = rss_during - rss_before
    if added < -RESOLUTION_BYTES:
        return None, (f"the process released {-added / 1e6:.1f} MB more than the runner took "
                      f"between the readings; its footprint cannot be read from RSS")
    return (max(added, 0) + borrowed) / 1e6, ""
