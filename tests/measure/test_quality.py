"""One quality label per measured run, worst first, and why a window is measured again."""

from __future__ import annotations

import pytest

from dse.measure.quality_labels import UNSTABLE_SHIFT_PCT, disturbed, measurement_quality, unstable
from dse.measure.stats import summarize
from dse.measure.telemetry import ProbeResult

STEADY = [1.0 + 0.001 * (i % 5) for i in range(400)]


def test_one_label_per_run_worst_first() -> None:
    steady = summarize(STEADY, seconds=1.0, min_samples=100)
    assert measurement_quality(steady, disturbed=False) == {
        "measurement_quality": "ok", "measurement_flags": ""}
    assert measurement_quality(steady, disturbed=True)["measurement_quality"] == "disturbed"
    short = summarize(STEADY[:50], seconds=1.0, min_samples=100)
    assert measurement_quality(short, disturbed=False)["measurement_quality"] == "underpowered"
    # The second half 10% slower: the machine changed state inside the run.
    shifted = summarize(STEADY[:200] + [v * 1.1 for v in STEADY[200:]], seconds=1.0,
                        min_samples=500)
    assert shifted.halves_shift_pct == pytest.approx(10.0, abs=0.2)
    assert shifted.halves_shift_pct > UNSTABLE_SHIFT_PCT
    assert measurement_quality(shifted, disturbed=True) == {
        "measurement_quality": "disturbed",
        "measurement_flags": "disturbed,underpowered,unstable"}
    # 2% apart is within the spread of repeated quiet runs: not unstable.
    close = summarize(STEADY[:200] + [v * 1.02 for v in STEADY[200:]], seconds=1.0)
    assert measurement_quality(close, disturbed=False)["measurement_quality"] == "ok"
    assert unstable(close) == ""
    assert unstable(shifted).startswith("unstable: the second half's median lay +10.0%")


def test_a_window_is_disturbed_only_beyond_the_policy() -> None:
    busy = ProbeResult(metrics={"interference_cpu_pct": 50.0, "steal_pct": 7.0})
    assert disturbed(busy, 20.0, 5.0) == (
        "other processes used 50% of the CPUs' time (at most 20% allowed); the hypervisor took "
        "7% of the CPUs' time (at most 5% allowed)")
    assert disturbed(busy, 60.0, 10.0) == ""
    # Figures missing (a window too short for the ticks): nothing shows a disturbance.
    assert disturbed(ProbeResult(missing={"interference_cpu_pct": "short"}), 20.0, 5.0) == ""
    assert disturbed(None, 20.0, 5.0) == ""
