"""dse's latency measurement inside a window watched by the real ``cpu_interference`` probe, for the
benchmarks that compare timings: a comparison is only as good as the machine was quiet, so each
window's verdict is kept beside the figures."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def watched_latency(fn: Callable[[], object], max_seconds: float | None = None
                    ) -> tuple[Any, bool]:
    """``fn`` timed with the campaign's default protocol, and whether its window was disturbed
    (other processes or steal beyond the default interference policy). ``max_seconds``: a
    shorter cap than the default's, for a benchmark's quick mode."""
    from dse.measure import measure_latency
    from dse.measure.quality_labels import disturbed
    from dse.measure.telemetry import make_probe
    from dse.measure.telemetry.base import Window
    from dse.spec import InterferenceSpec, MeasureSpec

    spec, policy = MeasureSpec(), InterferenceSpec()
    if max_seconds is not None:
        spec = MeasureSpec(max_seconds=max_seconds, min_seconds=min(spec.min_seconds, max_seconds),
                           warmup_max_seconds=min(spec.warmup_max_seconds, max_seconds))
    probe = make_probe("cpu_interference")
    marks: list[float] = []

    def mark(opening: bool) -> None:
        marks.append(time.time())
        if opening:
            probe.start()

    stats = measure_latency(fn, target_rel_ci=spec.target_rel_ci, min_iters=spec.min_iters,
                            min_seconds=spec.min_seconds, max_seconds=spec.max_seconds,
                            warmup_max_seconds=spec.warmup_max_seconds,
                            blocks=spec.blocks, on_window=mark)
    result = probe.summarize(probe.stop(), Window(marks[0], marks[-1], 1))
    return stats, bool(disturbed(result, policy.max_foreign_cpu_pct, policy.max_steal_pct))
