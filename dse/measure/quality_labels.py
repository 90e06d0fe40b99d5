"""How cleanly a run was measured: one label per trial, and why a window is measured again.

Labels (``measurement_quality``), worst first, a run with several problems taking the first:
``disturbed`` (other work took the device beyond the interference policy, even after its
re-measurements), ``underpowered`` (even extended to its ceiling, the run stayed below its
sample floors: see :func:`dse.measure.harness.measure_latency`), ``unstable`` (the medians of
its halves lie more than :data:`UNSTABLE_SHIFT_PCT` apart: the machine changed state inside
it), ``imprecise`` (a required percentile's interval is wider than its precision target,
``measurement.precision``), else ``ok``. Whether such a trial may be on the front is the
results' rule (``dse.core.columns``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dse.measure.stats import LatencyStats
    from dse.measure.telemetry import ProbeResult

QUALITY_FLAGS = ("disturbed", "underpowered", "unstable", "imprecise")
#: A run whose halves' medians lie further apart than this changed state inside it. Significance
#: alone (``stationary``) flags 2% shifts of 28,000 samples and passes a 39% one whose correlated
#: samples give wide intervals (both seen here); 5% is the spread of repeated quiet runs.
UNSTABLE_SHIFT_PCT = 5.0


def measurement_quality(stats: LatencyStats, disturbed: bool,
                        precision: Mapping[str, float] | None = None) -> dict[str, str]:
    """The run's label and every flag that applies, as provenance entries
    (``measurement_quality``, ``measurement_flags``); ``precision`` holds the targets of the
    required percentiles (by name), as :func:`imprecise` reads them."""
    applies = (disturbed, stats.underpowered, bool(unstable(stats)),
               bool(imprecise(stats, precision or {})))
    flags = [flag for flag, yes in zip(QUALITY_FLAGS, applies, strict=True) if yes]
    return {"measurement_quality": flags[0] if flags else "ok",
            "measurement_flags": ",".join(flags)}


def imprecise(stats: LatencyStats, precision: Mapping[str, float]) -> str:
    """Why a run's intervals are wider than the campaign needs, or "": each percentile of
    ``precision`` (name -> the relative half-width its interval must reach) against the
    precision the run itself reached (``own_rel_ci``). A percentile without any interval is the
    underpowered label's, not this one's."""
    wide = [f"{name} ±{100 * stats.own_rel_ci[name]:.0f}% (at most ±{100 * target:g}%)"
            for name, target in precision.items()
            if math.isfinite(stats.own_rel_ci.get(name, math.inf))
            and stats.own_rel_ci[name] > target]
    return f"imprecise: {', '.join(wide)}" if wide else ""


def unstable(stats: LatencyStats) -> str:
    """Why a run changed state inside it (its halves' medians too far apart), or ""."""
    if abs(stats.halves_shift_pct) <= UNSTABLE_SHIFT_PCT:
        return ""
    return (f"unstable: the second half's median lay {stats.halves_shift_pct:+.1f}% from the "
            f"first's (at most ±{UNSTABLE_SHIFT_PCT:g}%)")


def disturbed(interference: ProbeResult | None, max_foreign_cpu_pct: float,
              max_steal_pct: float, *, max_cpu_wait_pct: float = 5.0,
              gpu: ProbeResult | None = None,
              max_gpu_foreign_pct: float = 5.0, max_gpu_foreign_processes: int = 0,
              speed: ProbeResult | None = None, max_slowdown: float = 0.0) -> str:
    """Why a window shared more of its device with other work than allowed, or "" when it did
    not, or when the figures are missing: nothing shows a disturbance then.

    ``interference`` is the ``cpu_interference`` probe's result, ``gpu`` the ``gpu_interference``
    probe's, ``speed`` the ``speed_canary`` probe's (None where it did not run); the limits are
    ``measurement.interference``'s (the GPU ones default to its defaults; ``max_slowdown`` 0
    checks no speed)."""
    reasons = []
    if interference is not None:
        foreign = interference.metrics.get("interference_cpu_pct")
        # Other work on free cores leaves the measurement alone; it disturbs once the measuring
        # threads wait for a CPU. Without the run-queue figure, the share alone decides.
        waited = interference.metrics.get("cpu_wait_pct")
        if foreign is not None and foreign > max_foreign_cpu_pct:
            if waited is None:
                reasons.append(f"other processes used {foreign:.0f}% of the CPUs' time (at most "
                               f"{max_foreign_cpu_pct:g}% allowed)")
            elif waited > max_cpu_wait_pct:
                reasons.append(f"other processes used {foreign:.0f}% of the CPUs' time and the "
                               f"measurement waited for a CPU {waited:.0f}% of its time (at most "
                               f"{max_foreign_cpu_pct:g}% and {max_cpu_wait_pct:g}% allowed)")
        steal = interference.metrics.get("steal_pct")
        if steal is not None and steal > max_steal_pct:
            reasons.append(f"the hypervisor took {steal:.0f}% of the CPUs' time (at most "
                           f"{max_steal_pct:g}% allowed)")
    if gpu is not None:
        processes = gpu.metrics.get("gpu_foreign_processes")
        if processes is not None and processes > max_gpu_foreign_processes:
            count = f"{processes:.0f} other process" + ("" if processes == 1 else "es")
            reasons.append(f"{count} computed on the GPU (at most {max_gpu_foreign_processes} "
                           f"allowed)")
        share = gpu.metrics.get("gpu_foreign_pct")
        if share is not None and share > max_gpu_foreign_pct:
            reasons.append(f"other processes used {share:.0f}% of the GPU's SMs (at most "
                           f"{max_gpu_foreign_pct:g}% allowed)")
    if speed is not None and max_slowdown > 0:
        slowdown = speed.metrics.get("machine_slowdown")
        if slowdown is not None and slowdown > max_slowdown:
            reasons.append(f"the machine itself ran {slowdown:.2f}x slower than its best at both "
                           f"ends of the window (a reference loop; at most {max_slowdown:g}x "
                           f"allowed)")
    return "; ".join(reasons)
