"""Shared maths that turns telemetry readings into metrics, for every probe (CPU, NVML, Jetson).

Pure functions over plain sequences. A non-finite value is a failed reading (see ``base.py``) and
is skipped. When the readings cannot support a figure (too few of them, a gap at the window's
edge, a counter that went backwards with no known wrap), :class:`TelemetryGapError` says why in
words fit for ``ProbeResult.missing``; nothing is interpolated or extrapolated to fill the gap.
Plain ``ValueError`` is kept for calling mistakes (sequences of different lengths).

Project rules, the same for every probe (CPU, NVML, Jetson, tegrastats):

* **Energy and mean power come from the readings that bracket the window** (:func:`window_indices`),
  never from the whole trace. The energy is what those readings show — a counter's advance
  (:func:`counter_delta`) or the integral of a power channel (:func:`power_energy`) — and the mean
  power is that energy over the time the readings span (:func:`energy_metrics` with ``seconds``).
  A window without bracketing readings has no energy figure: the metrics are missing with the
  :class:`TelemetryGapError` message as the reason.
* **Clock drop is not clipped** (:func:`clock_drop_pct`): a clock read above its stated maximum
  gives a negative drop, which is what was read. It is the plain mean of the valid readings (the
  sampler reads at a fixed interval), against the highest maximum the probe knows.
* **A boolean state holds until the next valid reading** (:func:`fraction_true`); the fraction is
  of the window's length.

Source-specific rules stay with their probe and reuse these functions for the arithmetic: NVML's
energy counter, trusted only after enough changes and read between its first and last change, is
in :mod:`~dse.measure.telemetry.nvml`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

from dse.measure.telemetry.base import ProbeResult, Trace, Window
from dse.util import counter_step


class TelemetryGapError(ValueError):
    """The readings cannot support the figure asked for; the message is the reason."""


def window_indices(timestamps: Sequence[float], window: Window,
                   valid: Sequence[bool] | None = None) -> list[int]:
    """Indices of the valid readings that bracket ``window``, edges included.

    From the last valid reading at or before ``window.start`` to the first at or after
    ``window.end``. The life cycle (a reading in ``start()`` before the window, one in ``stop()``
    after it) guarantees such a bracket; without it a counter delta would miss part of the window,
    so this raises :class:`TelemetryGapError` instead. ``valid[i]`` false drops reading ``i``
    (default: all are valid). Timestamps are taken to be in reading order.
    """
    if valid is not None and len(valid) != len(timestamps):
        raise ValueError(f"valid has {len(valid)} entries for {len(timestamps)} timestamps")
    kept = [i for i in range(len(timestamps)) if valid is None or valid[i]]
    if not kept:
        raise TelemetryGapError(f"no valid reading among {len(timestamps)}")
    before = [i for i in kept if timestamps[i] <= window.start]
    after = [i for i in kept if timestamps[i] >= window.end]
    if not before or not after:
        first, last = timestamps[kept[0]], timestamps[kept[-1]]
        raise TelemetryGapError(
            f"the valid readings do not bracket the window: the first is "
            f"{first - window.start:+.6f} s from its start and the last {last - window.end:+.6f} s "
            f"from its end (need <= 0 and >= 0)")
    low, high = sorted((before[-1], after[0]))
    return [i for i in kept if low <= i <= high]


def bracketing_rows(trace: Trace, window: Window) -> list[int]:
    """Rows of ``trace`` that bracket ``window``, counting a reading as valid when any of its
    channels is (one zone or CPU failing mid-window does not void the others)."""
    columns = list(trace.channels.values())
    valid = [any(math.isfinite(column[i]) for column in columns)
             for i in range(len(trace.timestamps))]
    return window_indices(trace.timestamps, window, valid)


def counter_delta(values: Sequence[float], wrap: float | None) -> float:
    """How far a cumulative counter advanced: the sum of its successive differences.

    A reading below the previous one is a wraparound and adds ``wrap`` (the counter's range);
    with ``wrap`` None it is a reset or a bug and raises :class:`TelemetryGapError`. At most one
    wrap can be seen per step, so the readings must come faster than the counter can wrap.
    """
    if wrap is not None and not wrap > 0:
        raise ValueError(f"a wrap range must be positive, got {wrap=}")
    finite = [value for value in values if math.isfinite(value)]
    if len(finite) < 2:
        raise TelemetryGapError(
            f"a counter needs two valid readings, got {len(finite)} of {len(values)}")
    total = 0.0
    for previous, current in pairwise(finite):
        step = counter_step(previous, current, wrap)
        if step is None and wrap is None:
            raise TelemetryGapError(
                f"counter went down from {previous:g} to {current:g} and has no wrap range "
                f"(reset?)")
        if step is None:
            raise TelemetryGapError(
                f"counter went down from {previous:g} to {current:g}, more than its wrap range "
                f"{wrap:g}")
        total += step
    return total


def integrate_power(timestamps: Sequence[float], watts: Sequence[float]) -> float:
    """Energy in joules under a power channel: the trapezoid rule over its valid readings.

    A failed reading is dropped, so its neighbours are joined by a straight line; the integral
    covers the first to the last valid reading, no more (call :func:`window_indices` first).
    """
    if len(timestamps) != len(watts):
        raise ValueError(f"{len(timestamps)} timestamps but {len(watts)} power readings")
    points = [(t, w) for t, w in zip(timestamps, watts, strict=True) if math.isfinite(w)]
    if len(points) < 2:
        raise TelemetryGapError(
            f"integrating power needs two valid readings, got {len(points)} of {len(watts)}")
    joules = 0.0
    for (t0, w0), (t1, w1) in pairwise(points):
        if t1 < t0:
            raise ValueError(f"timestamps go backwards: {t0} then {t1}")
        joules += (t1 - t0) * (w0 + w1) / 2
    return joules


def power_energy(timestamps: Sequence[float], watts: Sequence[float], window: Window) -> ProbeResult:
    """``energy_per_inference_mj`` and ``power_mean_w`` of a power channel over ``window``.

    The trapezoid over the valid readings that bracket the window (:func:`window_indices`), and
    its mean power over the span of those readings. Raises :class:`TelemetryGapError` when the
    valid readings do not bracket the window.
    """
    if len(timestamps) != len(watts):
        raise ValueError(f"{len(timestamps)} timestamps but {len(watts)} power readings")
    rows = window_indices(timestamps, window, [math.isfinite(w) for w in watts])
    joules = integrate_power([timestamps[i] for i in rows], [watts[i] for i in rows])
    return energy_metrics(joules, window, seconds=timestamps[rows[-1]] - timestamps[rows[0]])


def energy_metrics(joules: float, window: Window, seconds: float | None = None) -> ProbeResult:
    """``energy_per_inference_mj`` and ``power_mean_w`` of an energy figure for ``window``.

    ``seconds`` is the time the energy covers when that is not the window itself — readings
    taken just before and just after it cover more. The mean power is energy over that span, and
    the energy charged to the window's inferences is that mean power times the *window's* length:
    dividing the whole span's energy by the window's inferences would bill them for the idle
    margins (10-50% with a 100 ms sampler and sub-second windows). What cannot be divided (no
    inference, no time) goes to ``missing``.
    """
    covered = window.seconds if seconds is None else seconds
    result = ProbeResult()
    if covered <= 0:
        reason = f"the energy covers no time ({covered=} s)"
        result.missing["power_mean_w"] = result.missing["energy_per_inference_mj"] = reason
        return result
    power = joules / covered
    result.metrics["power_mean_w"] = power
    if window.inferences > 0 and window.seconds > 0:
        result.metrics["energy_per_inference_mj"] = power * window.seconds * 1e3 / window.inferences
    else:
        result.missing["energy_per_inference_mj"] = (
            f"the window holds no inference or no time ({window.inferences=}, "
            f"{window.seconds=} s)")
    return result


def fraction_true(timestamps: Sequence[float], flags: Sequence[float], window: Window) -> float:
    """Fraction of ``window`` during which a boolean channel was true (non-zero).

    Each valid reading holds until the next valid one, the last until the window's end; so a
    reading at or before ``window.start`` is required, or the state at the start is unknown.
    """
    if len(timestamps) != len(flags):
        raise ValueError(f"{len(timestamps)} timestamps but {len(flags)} flag readings")
    if not window.seconds > 0:
        raise TelemetryGapError(f"the window has no duration ({window.seconds=} s)")
    points = [(t, bool(f)) for t, f in zip(timestamps, flags, strict=True) if math.isfinite(f)]
    if not points or points[0][0] > window.start:
        raise TelemetryGapError("no valid reading at or before the window start, so its state "
                                "there is unknown")
    true_seconds = 0.0
    for index, (t, flag) in enumerate(points):
        until = points[index + 1][0] if index + 1 < len(points) else window.end
        overlap = min(until, window.end) - max(t, window.start)
        if flag and overlap > 0:
            true_seconds += overlap
    return true_seconds / window.seconds


def clock_drop_pct(current: Sequence[float], maximum: float) -> float:
    """``100 * (1 - mean(current) / maximum)``: how far a clock sat below its maximum, in %.

    Not clipped: a driver that reports a current clock above its stated maximum gives a negative
    figure, which is what was read.
    """
    if not (math.isfinite(maximum) and maximum > 0):
        raise TelemetryGapError(f"no usable maximum clock ({maximum=})")
    finite = [value for value in current if math.isfinite(value)]
    if not finite:
        raise TelemetryGapError(f"no valid clock reading among {len(current)}")
    return 100.0 * (1.0 - (sum(finite) / len(finite)) / maximum)
