"""TVM's runtime thread pool, which is process-wide: its cap, set before TVM starts it, and each
runner's count, set (under :data:`POOL_LOCK`) before a compile or a run that needs another."""

from __future__ import annotations

import os
import threading
from typing import Any

from dse.core import BuildError

# One compile or run at a time sets the pool for its runner.
POOL_LOCK = threading.Lock()


def allow_threads() -> None:
    """Let TVM's thread pool grow to every core: it caps itself at ``$TVM_NUM_THREADS``, else at
    ``$OMP_NUM_THREADS`` — which Ray workers set to 1 — when it first starts; the knob then sets
    each runner's count below the cap."""
    cores = os.cpu_count() or 1
    try:
        given = int(os.environ.get("TVM_NUM_THREADS", "0"))
    except ValueError:
        given = 0
    os.environ["TVM_NUM_THREADS"] = str(max(given, cores))


def set_threads(tvm: Any, threads: int) -> None:
    """Size the pool to ``threads``; BuildError when TVM runs another count (its cap)."""
    # runtime.config_threadpool(mode, nthreads): mode 1 is TVM's default (big cores first).
    tvm.get_global_func("runtime.config_threadpool")(1, threads)
    in_effect = threads_in_effect(tvm)
    if in_effect != threads:
        raise BuildError(f"tvm: asked for {threads} threads, TVM's thread pool runs {in_effect} "
                         f"(it was started with TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')})")


def threads_in_effect(tvm: Any) -> int:
    """The pool's thread count now."""
    return int(tvm.get_global_func("runtime.NumThreads")())
