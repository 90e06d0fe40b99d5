"""The machine's own speed at a window's ends: the canary probe on real work of known size, the
disturbance it adds, and a real worker's windows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from dse.core.candidate import Candidate
from dse.farm.worker import DeviceWorker
from dse.measure.quality_labels import disturbed
from dse.measure.telemetry import Window
from dse.measure.telemetry.base import ProbeResult
from dse.measure.telemetry.speed_canary import SpeedCanaryProbe
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec
from tests.conftest import LOCAL_CPU

TINY_ARCH = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}


def _readings(*values: float) -> Callable[[], float]:
    """A canary that reads ``values`` in turn (microseconds): the machine's speed as given, so
    the probe's arithmetic is tested exactly, whatever else runs on this machine."""
    given = iter(values)
    return lambda: next(given)


@pytest.fixture(autouse=True)
def fresh_reference() -> Iterator[None]:
    """Each test starts with no fastest reading, as a new worker process does."""
    saved = SpeedCanaryProbe.fastest_us
    SpeedCanaryProbe.fastest_us = float("inf")
    yield
    SpeedCanaryProbe.fastest_us = saved


def _window(probe: SpeedCanaryProbe) -> ProbeResult:
    probe.start()
    trace = probe.stop()
    return probe.summarize(trace, Window(0.0, 1.0, 1))


def test_the_real_canary_reads_at_least_one_against_its_own_fastest() -> None:
    # The faster end against the fastest reading, which includes both ends: never below 1.
    result = _window(SpeedCanaryProbe())
    assert result.metrics["machine_slowdown"] >= 1.0
    assert 0 < SpeedCanaryProbe.fastest_us < float("inf")


def test_a_window_slow_at_both_ends_reads_slow_and_one_slow_end_does_not() -> None:
    # The process's reference: five seed readings and both ends of a first window at 100 us.
    fast = SpeedCanaryProbe(canary=_readings(*[100.0] * 7))
    assert _window(fast).metrics["machine_slowdown"] == 1.0
    slow = SpeedCanaryProbe(canary=_readings(300.0, 250.0))
    assert slow.summarize(_traced(slow), Window(0.0, 1.0, 1)).metrics["machine_slowdown"] == 2.5
    # Slow when the window opened, itself again when it closed: the faster end decides.
    mixed = SpeedCanaryProbe(canary=_readings(300.0, 110.0))
    assert mixed.summarize(_traced(mixed), Window(0.0, 1.0, 1)).metrics["machine_slowdown"] \
        == pytest.approx(1.1)
    # A faster reading than any before becomes the reference.
    faster = SpeedCanaryProbe(canary=_readings(80.0, 90.0))
    assert _window(faster).metrics["machine_slowdown"] == 1.0
    assert SpeedCanaryProbe.fastest_us == 80.0


def _traced(probe: SpeedCanaryProbe) -> object:
    probe.start()
    return probe.stop()


def test_without_both_ends_the_slowdown_is_missing_with_why() -> None:
    probe = SpeedCanaryProbe()
    probe.start()
    trace = probe.stop()
    trace.channels["canary_us"] = trace.channels["canary_us"][:1]
    result = probe.summarize(trace, Window(0.0, 1.0, 1))
    assert result.metrics == {}
    assert "both ends" in result.missing["machine_slowdown"]


def test_a_slow_machine_disturbs_a_window_only_above_the_limit() -> None:
    slow = ProbeResult(metrics={"machine_slowdown": 1.8})
    why = disturbed(None, 20.0, 5.0, speed=slow, max_slowdown=1.5)
    assert why == ("the machine itself ran 1.80x slower than its best at both ends of the "
                   "window (a reference loop; at most 1.5x allowed)")
    assert disturbed(None, 20.0, 5.0, speed=slow, max_slowdown=2.0) == ""
    assert disturbed(None, 20.0, 5.0, speed=slow, max_slowdown=0.0) == ""  # 0: never
    assert disturbed(None, 20.0, 5.0, speed=None, max_slowdown=1.5) == ""


def test_a_cpu_worker_reads_the_machine_speed_in_every_window(tmp_path: Path) -> None:
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    worker = DeviceWorker(profile, str(tmp_path))
    assert "speed_canary" in [probe.name for probe in worker.probes]
    candidate = Candidate("cnn", TINY_ARCH, "fp32", 4, "onnxruntime", {"intra_op_threads": 1})
    training = TrainingSpec(epochs=1, batch_size=256)
    quick = {"min_seconds": 0.2, "max_seconds": 0.3, "warmup_max_seconds": 0.05}

    result = worker.evaluate(candidate, training, MeasureSpec(**quick))
    assert result.status == "ok", result.reason
    assert result.metrics["machine_slowdown"] >= 1.0
    assert "speed_canary.canary_us_ends" in result.provenance

    # A limit below 1 calls every window slow (the faster end is never below the fastest
    # reading): flagged at once with action flag, and why.
    flagged = worker.evaluate(candidate, training, MeasureSpec(
        **quick, interference={"max_slowdown": 0.9, "action": "flag"}))
    assert flagged.provenance["disturbed"] == "True"
    assert "the machine itself ran" in flagged.provenance["disturbance"]
    assert flagged.provenance["measurement_quality"] == "disturbed"
