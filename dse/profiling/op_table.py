"""A backend profiler's operators as one table, each judged against the roofline.

Per operator: time per run and per call, its share of the summed operator time, FLOPs and bytes
of one call, arithmetic intensity, the attained GFLOP/s and GB/s, and a verdict:

- ``overhead-bound``: a call takes more than :data:`OVERHEAD_FACTOR` times what its FLOPs and
  bytes need at the roofline (``max(FLOPs / peak compute, bytes / peak bandwidth)``): its time goes
  to dispatch, launches, synchronisation or framework work, not to arithmetic or memory traffic;
- else ``compute-bound`` when its intensity is at or above the ridge point (peak compute / peak
  bandwidth), ``memory-bound`` below it;
- ``unknown`` when its FLOPs or bytes, or a ceiling, are unknown: never guessed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dse.profiling.summary import (
    COMPUTE_BOUND,
    MEMORY_BOUND,
    OP_COLUMNS,
    OVERHEAD_BOUND,
    UNKNOWN,
    VERDICTS,
    Ceilings,
)

if TYPE_CHECKING:
    import pandas as pd

    from dse.backends import OpRecord

# How far above its roofline time a call may take before its time is called overhead: attained
# rates of real kernels reach a few tens of percent of the roof; one tenth is well below them.
OVERHEAD_FACTOR = 10.0


def verdict(flops: float | None, nbytes: float | None, us_per_call: float,
            ceilings: Ceilings) -> tuple[str, str]:
    """(verdict, reason) for one call of an operator (see the module's docstring)."""
    peak, bandwidth, ridge = ceilings.peak_gflops, ceilings.peak_bandwidth_gbs, ceilings.ridge
    if flops is None or nbytes is None or not nbytes or us_per_call <= 0:
        return UNKNOWN, "its FLOPs or bytes are not known"
    if peak is None or bandwidth is None or ridge is None:
        return UNKNOWN, "the device's roofline is not known"
    roof_us = max(flops / peak, nbytes / bandwidth) / 1e3  # GFLOP/s = FLOP/ns
    intensity = flops / nbytes
    if us_per_call > OVERHEAD_FACTOR * roof_us:
        return OVERHEAD_BOUND, (f"{us_per_call:.3g} µs per call where its FLOPs and bytes need "
                                f"{roof_us:.3g} µs at the roofline")
    if intensity >= ridge:
        return COMPUTE_BOUND, (f"intensity {intensity:.3g} FLOP/B at or above the ridge "
                               f"{ridge:.3g} FLOP/B")
    return MEMORY_BOUND, f"intensity {intensity:.3g} FLOP/B below the ridge {ridge:.3g} FLOP/B"


def op_table(ops: list[OpRecord], runs: int, ceilings: Ceilings) -> pd.DataFrame:
    """One row per operator, columns :data:`~dse.profiling.summary.OP_COLUMNS`, the longest
    first."""
    import pandas as pd

    total_ms = sum(op.total_us for op in ops) / 1e3
    rows = []
    for op in ops:
        per_call = op.total_us / op.calls if op.calls else 0.0
        label, reason = verdict(op.flops, op.bytes, per_call, ceilings)
        flops = math.nan if op.flops is None else op.flops
        nbytes = math.nan if op.bytes is None else op.bytes
        rows.append({
            "name": op.name, "op_type": op.op_type, "where": op.where, "calls": op.calls,
            "total_ms": op.total_us / 1e3, "ms_per_run": op.total_us / 1e3 / max(runs, 1),
            "share": op.total_us / 1e3 / total_ms if total_ms > 0 else math.nan,
            "us_per_call": per_call, "flops": flops, "bytes": nbytes,
            "intensity": flops / nbytes if nbytes else math.nan,
            "gflops": flops / per_call / 1e3 if per_call > 0 else math.nan,
            "gbs": nbytes / per_call / 1e3 if per_call > 0 else math.nan,
            "verdict": label, "verdict_reason": reason,
            "device_ms": math.nan if op.device_us is None else op.device_us / 1e3,
            "input_shapes": op.input_shapes,
        })
    frame = pd.DataFrame(rows, columns=list(OP_COLUMNS))
    return frame.sort_values("total_ms", ascending=False, ignore_index=True)


def verdict_counts(table: pd.DataFrame) -> dict[str, int]:
    """Operators per verdict, every verdict named (0 where none)."""
    counts = table["verdict"].value_counts()
    return {name: int(counts.get(name, 0)) for name in VERDICTS}
