"""How fast the machine itself ran during a window: a fixed reference loop timed at its two ends.

A virtual machine, or the host under it, can run slow for seconds to minutes — by a third, by
half — with no other process in the guest, no steal in ``/proc/stat`` and a tight interval on
the window, so neither :mod:`dse.measure.telemetry.cpu_interference` nor the window's own
statistics see it (docs/benchmarks.md, "The VM's speed states"). A candidate timed then reads
slower than it runs. This probe times a *canary* — a pure-Python loop of fixed work, the fastest
of :data:`REPEATS` runs (the fastest ignores a run another thread interrupted) — when the window
opens and when it closes, and compares the faster of the two with the fastest canary this process
has ever timed: the machine at its own speed.

- ``machine_slowdown``: that ratio (1.0: as fast as ever; 2.0: the loop took twice as long at
  both ends). :func:`dse.measure.quality_labels.disturbed` calls a window disturbed above
  ``measurement.interference.max_slowdown``.

The faster end decides, so a slow spell that began or ended inside the window is not called one:
a window is flagged only when the machine was slow at both of its ends. The reference is the
process's own fastest reading, so a worker that starts in a slow spell sees it only once it has
timed one fast canary. An interpreter loop, not arithmetic in cache: the slow spells on the
development VM slow interpreter and memory-bound work and barely touch in-cache matrix products.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import ClassVar

from dse.measure.telemetry.base import (
    Probe,
    ProbeResult,
    ProbeSettings,
    Trace,
    Window,
    interval_setting,
    register_probe,
)

#: Runs of the loop per canary reading; the fastest counts.
REPEATS = 15
#: Iterations of the loop: about 0.1 ms on a 2020s server core, 1.5 ms a reading.
LOOP = 3000
#: Readings that seed a process's reference the first time the probe is used.
SEED_READINGS = 5


def canary_us() -> float:
    """The fastest of :data:`REPEATS` runs of a fixed interpreter loop, in microseconds."""
    best = math.inf
    for _ in range(REPEATS):
        start = time.perf_counter_ns()
        total = 0
        for value in range(LOOP):
            total += value * value
        best = min(best, time.perf_counter_ns() - start)
    return best / 1e3


class SpeedCanarySettings(ProbeSettings):
    # Nothing is read between the ends: the interval only paces the probe's idle thread.
    interval_s: float = interval_setting(3600.0)


@register_probe
class SpeedCanaryProbe(Probe):
    """The machine's own speed at a window's ends, against the fastest this process has seen
    (module docstring). The device worker runs it in every window of a CPU device."""

    name = "speed_canary"
    provides = ("machine_slowdown",)
    units: ClassVar[dict[str, str]] = {"canary_us": "us"}
    settings_model = SpeedCanarySettings

    #: The fastest canary any probe of this process has timed: the reference.
    fastest_us: ClassVar[float] = math.inf

    def __init__(self, interval_s: float = 3600.0,
                 canary: Callable[[], float] = canary_us) -> None:
        super().__init__(interval_s)
        self.canary = canary

    def available(self) -> tuple[bool, str]:
        return True, ""

    def read(self) -> dict[str, float]:
        return {}

    def read_at_ends(self) -> dict[str, float]:
        cls = type(self)
        if not math.isfinite(cls.fastest_us):
            cls.fastest_us = min(self.canary() for _ in range(SEED_READINGS))
        reading = self.canary()
        cls.fastest_us = min(cls.fastest_us, reading)
        return {"canary_us": reading}

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        readings = [v for v in trace.channels.get("canary_us", []) if math.isfinite(v) and v > 0]
        reference = type(self).fastest_us
        if len(readings) < 2 or not math.isfinite(reference) or reference <= 0:
            return ProbeResult(missing={"machine_slowdown":
                                        "no canary reading at both ends of the window"})
        return ProbeResult(metrics={"machine_slowdown": min(readings[0], readings[-1]) / reference})

    def provenance(self, trace: Trace) -> dict[str, str]:
        readings = trace.channels.get("canary_us", [])
        if len(readings) < 2:
            return {}
        return {"canary_us_ends": f"{readings[0]:.1f},{readings[-1]:.1f}",
                "canary_us_fastest": f"{type(self).fastest_us:.1f}"}
