"""Cumulative hardware counters (RAPL energy in µJ, and the like) read twice: how far one advanced
between two readings, one wraparound allowed. The measurement's energy figures
(:mod:`dse.measure.telemetry.derived`) and the dashboard's power traces
(:mod:`dse.report.trace_series`) both read steps through this one rule.
"""

from __future__ import annotations


def counter_step(previous: float, current: float, wrap: float | None) -> float | None:
    """How far a counter advanced from ``previous`` to ``current``.

    A reading below the previous one wrapped around once and adds ``wrap`` (the counter's range).
    None when the step cannot be known: the counter went down and has no wrap range (a reset), or
    it went down by more than its range (more than one wrap between the readings).

    >>> counter_step(10.0, 25.0, None), counter_step(90.0, 5.0, 100.0)
    (15.0, 15.0)
    >>> counter_step(90.0, 5.0, None) is None, counter_step(90.0, 5.0, 50.0) is None
    (True, True)
    """
    step = current - previous
    if step >= 0:
        return step
    if wrap is None:
        return None
    step += wrap
    return step if step >= 0 else None
