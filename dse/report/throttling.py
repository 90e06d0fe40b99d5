"""When a device throttled during a measurement, from its telemetry traces: NVML's clocks-event
reasons, the CPU thermal-throttle time counters, and a Jetson's over-current alarms and counters,
each turned into intervals with a reason, same-reason overlaps merged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from typing import NamedTuple

import numpy as np

from dse.report.distributions import FloatArray

_CPU_THROTTLE_TIME = "_throttle_total_time_ms"


class ThrottledInterval(NamedTuple):
    start_s: float
    end_s: float
    reason: str


def throttled_intervals(channel: str, unit: str | None, clock: FloatArray,
               values: FloatArray) -> list[ThrottledInterval]:
    """The intervals a throttle-bearing channel says the device was throttled; [] for others."""
    if channel == "clock_event_reasons" and unit == "bitmask":
        return nvml_throttled(clock, values)
    if channel.endswith(_CPU_THROTTLE_TIME):
        scope = "package" if "package_" in channel else "core"
        return _rising(clock, values, f"cpu thermal throttle ({scope})")
    if channel.startswith("oc_count."):
        return _rising(clock, values, "over-current event")
    if channel.startswith("oc_alarm.") and unit == "flag":
        return _held(clock, [f"over-current alarm ({channel.removeprefix('oc_alarm.')})"
                             if math.isfinite(v) and v > 0 else "" for v in values])
    return []


def nvml_throttled(clock: FloatArray, masks: FloatArray) -> list[ThrottledInterval]:
    """NVML reports the *current* reasons, so each reading holds until the next; only the
    reasons that mean throttling (``THROTTLING_REASONS``) count."""
    # The one table of which NVML bits mean throttling; pure Python, imports no GPU library.
    from dse.measure import THROTTLING_REASONS, reason_bits

    bits = reason_bits()
    reasons = [(name, bits[name]) for name in THROTTLING_REASONS]
    labels = []
    for mask in masks:
        active = [] if not math.isfinite(mask) else [n for n, b in reasons if int(mask) & b]
        labels.append(", ".join(active))
    return _held(clock, labels)


def _held(clock: FloatArray, labels: Sequence[str]) -> list[ThrottledInterval]:
    """Runs of equal, non-empty labels, each from its first reading to the next run's first."""
    out = []
    start = 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            if labels[start]:
                end = clock[i] if i < len(labels) else clock[i - 1]
                out.append(ThrottledInterval(float(clock[start]), float(end), labels[start]))
            start = i
    return out


def _rising(clock: FloatArray, counter: FloatArray, reason: str) -> list[ThrottledInterval]:
    """Between two valid readings of a cumulative counter that rose, something was counted."""
    valid = np.flatnonzero(np.isfinite(counter))
    return [ThrottledInterval(float(clock[a]), float(clock[b]), reason)
            for a, b in pairwise(valid) if counter[b] > counter[a]]


def merge_intervals(intervals: list[ThrottledInterval]) -> list[ThrottledInterval]:
    """Same-reason intervals that overlap or touch as one, all sorted by start."""
    merged: list[ThrottledInterval] = []
    last: dict[str, int] = {}
    for interval in sorted(intervals, key=lambda i: (i.start_s, i.end_s, i.reason)):
        index = last.get(interval.reason)
        if index is not None and interval.start_s <= merged[index].end_s:
            previous = merged[index]
            merged[index] = previous._replace(end_s=max(previous.end_s, interval.end_s))
        else:
            last[interval.reason] = len(merged)
            merged.append(interval)
    return merged
