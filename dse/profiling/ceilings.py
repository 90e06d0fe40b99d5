"""The roofline a profile's verdicts are made against, measured on the device now.

A device profile's peak figures (``peak_gflops``, ``peak_bandwidth_gbs``) are datasheet numbers for
the whole chip; a candidate runs on the threads its knobs give it. What an operator could attain
there is measured instead, with torch, on the same device and thread count, at the candidate's
compute type:

- compute: a square matrix product (``torch.mm``, 1024 on a CPU, 8192 on a GPU) repeated, the best
  rate of several repeats;
- bandwidth: a copy of a buffer far larger than the caches (256 MiB), read and written once each,
  the best rate of several repeats.

The best of repeats, because other work on a shared machine can only slow a repeat down. int8 has
no portable dense kernel in torch on every device: its compute ceiling is the fp32 one, and the
source says so. The figures take about a second on a CPU.
"""

from __future__ import annotations

import time
from typing import Any

from dse.profiling.summary import Ceilings

_REPEATS = 5
_COPY_BYTES = 256 * 2**20
_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "float16",
           "int8": "float32"}


def measure_ceilings(device: str, precision: str, threads: int) -> Ceilings:
    """Compute and bandwidth ceilings on ``device`` ("cpu" or "cuda") with ``threads`` intra-op
    threads (torch's pool, restored after), at ``precision``'s compute type."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        dtype = getattr(torch, _DTYPES.get(precision, "float32"))
        if device == "cpu" and dtype != torch.float32:
            # A CPU's fp16/bf16 matrix product may run through conversions; the fp32 roof is the
            # one every CPU kernel can reach.
            dtype = torch.float32
        gflops = _matmul_gflops(torch, device, dtype)
        bandwidth = _copy_gbs(torch, device)
    finally:
        torch.set_num_threads(before)
    kind = str(dtype).removeprefix("torch.")
    note = "" if _DTYPES.get(precision) == kind or precision == "fp32" else \
        f" ({precision} ops are judged against the {kind} compute roof)"
    return Ceilings(gflops, bandwidth,
                    f"measured now on {device} with {threads} thread(s): torch.mm {kind} and a "
                    f"{_COPY_BYTES // 2**20} MiB copy, best of {_REPEATS}{note}", threads)


def _matmul_gflops(torch: Any, device: str, dtype: Any) -> float:
    size = 1024 if device == "cpu" else 8192
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    best = _best_seconds(torch, device, lambda: torch.mm(a, b))
    return 2.0 * size**3 / best / 1e9


def _copy_gbs(torch: Any, device: str) -> float:
    elements = _COPY_BYTES // 4
    src = torch.ones(elements, device=device)
    dst = torch.empty_like(src)
    best = _best_seconds(torch, device, lambda: dst.copy_(src))
    return 2.0 * _COPY_BYTES / best / 1e9


def _best_seconds(torch: Any, device: str, work: Any) -> float:
    work()  # first touch: page faults and lazy initialisation are no part of a roof
    best = float("inf")
    for _ in range(_REPEATS):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        work()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def profile_peaks(peak_gflops: float | None, peak_bandwidth_gbs: float | None,
                  name: str, source: str) -> Ceilings | None:
    """The device profile's own peak figures as ceilings, when it gives both."""
    if peak_gflops is None or peak_bandwidth_gbs is None:
        return None
    return Ceilings(peak_gflops, peak_bandwidth_gbs,
                    f"device profile {name!r}" + (f": {source}" if source else ""))
