"""Derived telemetry maths, checked against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from dse.measure.telemetry.base import Window
from dse.measure.telemetry.derived import (
    TelemetryGapError,
    clock_drop_pct,
    counter_delta,
    energy_metrics,
    fraction_true,
    integrate_power,
    power_energy,
    window_indices,
)

NAN = math.nan


def test_counter_delta_sums_steps_and_adds_the_range_at_each_wrap() -> None:
    # 100 -> 200: +100; 200 -> 50 wraps at 1000: 50 + 1000 - 200 = +850; 50 -> 150: +100.
    assert counter_delta([100, 200, 50, 150], wrap=1000) == 1050
    # Two wraps in a row: 900 -> 100 (+200), 100 -> 50 (+950).
    assert counter_delta([900, 100, 50], wrap=1000) == 1150


def test_counter_delta_skips_failed_readings() -> None:
    assert counter_delta([10, NAN, 30, NAN, 35], wrap=None) == 25
    # The wrap is still seen across the gap: 900 -> (NaN) -> 100 is +200.
    assert counter_delta([900, NAN, 100], wrap=1000) == 200


def test_counter_delta_refuses_what_it_cannot_know() -> None:
    with pytest.raises(TelemetryGapError, match="went down from 20 to 5 and has no wrap range"):
        counter_delta([10, 20, 5], wrap=None)
    with pytest.raises(TelemetryGapError, match="two valid readings, got 1 of 3"):
        counter_delta([NAN, 7, NAN], wrap=100)
    with pytest.raises(TelemetryGapError, match="more than its wrap range"):
        counter_delta([5000, 10], wrap=1000)
    with pytest.raises(ValueError, match="wrap=0"):
        counter_delta([1, 2], wrap=0)


def test_integrate_power_is_the_trapezoid_over_valid_readings() -> None:
    # 0-1 s: (10 + 20) / 2 = 15 J; 1-3 s: 2 * (20 + 30) / 2 = 50 J.
    assert integrate_power([0.0, 1.0, 3.0], [10.0, 20.0, 30.0]) == 65.0
    # The NaN at t=1 is dropped: one trapezoid 0-3 s, 3 * (10 + 30) / 2 = 60 J.
    assert integrate_power([0.0, 1.0, 3.0], [10.0, NAN, 30.0]) == 60.0


def test_integrate_power_errors() -> None:
    with pytest.raises(TelemetryGapError, match="two valid readings, got 1 of 2"):
        integrate_power([0.0, 1.0], [NAN, 5.0])
    with pytest.raises(ValueError, match="2 timestamps but 3 power readings"):
        integrate_power([0.0, 1.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="go backwards"):
        integrate_power([1.0, 0.0], [1.0, 1.0])


def test_energy_metrics() -> None:
    window = Window(start=10.0, end=14.0, inferences=200)
    # 8 J over 200 inferences = 40 mJ each; over the 4 s window, 2 W; over 5 s covered, 1.6 W.
    assert energy_metrics(8.0, window).metrics == {"energy_per_inference_mj": 40.0, "power_mean_w": 2.0}
    assert energy_metrics(8.0, window, seconds=5.0).metrics["power_mean_w"] == 1.6


def test_energy_metrics_says_what_it_cannot_divide() -> None:
    result = energy_metrics(8.0, Window(start=1.0, end=1.0, inferences=0))
    assert result.metrics == {}
    assert "no time" in result.missing["energy_per_inference_mj"]
    assert "covers no time" in result.missing["power_mean_w"]


def test_fraction_true_holds_each_reading_until_the_next() -> None:
    window = Window(start=1.0, end=5.0, inferences=1)
    # True from 0 (before the window) to 2, false 2-3, true 3-4.5, false 4.5 on:
    # in the window 1-2 and 3-4.5 are true, 2.5 s of 4 s.
    assert fraction_true([0.0, 2.0, 3.0, 4.5], [1, 0, 1, 0], window) == 0.625
    # A NaN does not interrupt: the reading before it holds. 0-3 true (2 s in the window), 3-5 false.
    assert fraction_true([0.0, 2.0, 3.0], [1.0, NAN, 0.0], window) == 0.5
    # The last reading holds to the window's end: true from 4 to 5.
    assert fraction_true([1.0, 4.0], [False, True], window) == 0.25


def test_fraction_true_needs_the_state_at_the_start() -> None:
    window = Window(start=1.0, end=5.0, inferences=1)
    with pytest.raises(TelemetryGapError, match="at or before the window start"):
        fraction_true([1.5, 4.0], [1, 1], window)
    with pytest.raises(TelemetryGapError, match="no duration"):
        fraction_true([0.0], [1], Window(start=2.0, end=2.0, inferences=1))


def test_clock_drop_pct() -> None:
    # mean(1000, 2000, NaN) = 1500 of 2000: 25 % below.
    assert clock_drop_pct([1000.0, 2000.0, NAN], 2000.0) == 25.0
    # Above the stated maximum reads as a negative drop, not clipped.
    assert clock_drop_pct([2200.0], 2000.0) == pytest.approx(-10.0)
    with pytest.raises(TelemetryGapError, match="no usable maximum"):
        clock_drop_pct([1.0], NAN)
    with pytest.raises(TelemetryGapError, match="no valid clock reading among 1"):
        clock_drop_pct([NAN], 1.0)


def test_window_indices_takes_the_tightest_valid_bracket() -> None:
    window = Window(start=2.0, end=4.0, inferences=1)
    stamps = [0.0, 1.0, 2.5, 3.0, 4.0, 5.0]
    assert window_indices(stamps, window) == [1, 2, 3, 4]
    # An invalid reading at the edge widens the bracket to the next valid one.
    assert window_indices(stamps, window, [True, False, True, False, False, True]) == [0, 2, 5]


def test_window_indices_refuses_readings_that_miss_an_edge() -> None:
    window = Window(start=2.0, end=4.0, inferences=1)
    with pytest.raises(TelemetryGapError, match=r"first is \+0\.500000 s from its start"):
        window_indices([2.5, 4.5], window)
    with pytest.raises(TelemetryGapError, match="no valid reading among 2"):
        window_indices([1.0, 5.0], window, [False, False])


def test_power_energy_integrates_only_the_bracketing_readings() -> None:
    window = Window(start=1.0, end=3.0, inferences=4)
    # Readings 1-3 s bracket the window (0 s and 4 s are outside it): 1 x (20 + 40) / 2 +
    # 1 x (40 + 20) / 2 = 60 J over 2 s, 15 J = 15000 mJ per inference.
    result = power_energy([0.0, 1.0, 2.0, 3.0, 4.0], [100.0, 20.0, 40.0, 20.0, 100.0], window)
    assert result.metrics == {"energy_per_inference_mj": 15000.0, "power_mean_w": 30.0}
    # A failed reading at the end widens the bracket to the next valid one (4 s), and the NaN is
    # bridged: 1 x (20 + 40) / 2 + 2 x (40 + 100) / 2 = 170 J over 3 s.
    result = power_energy([0.0, 1.0, 2.0, 3.0, 4.0], [100.0, 20.0, 40.0, NAN, 100.0], window)
    assert result.metrics["power_mean_w"] == pytest.approx(170.0 / 3)
    # Mean power over the bracketing readings (170 J / 3 s), times the window's 2 s, over its 4
    # inferences: 170/3 x 2 / 4 J = 28.33 J each (not the 42.5 J of billing the whole span).
    assert result.metrics["energy_per_inference_mj"] == pytest.approx(170.0 / 3 * 2 / 4 * 1000)
    with pytest.raises(TelemetryGapError, match="do not bracket the window"):
        power_energy([1.5, 4.0], [10.0, 10.0], window)
