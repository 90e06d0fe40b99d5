"""Other work on the CPUs during a window: /proc parsing on real-format files, the shares over a
window, a real hog process, and the worker's policy (re-measure, flag, ignore)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dse.core.candidate import Candidate
from dse.farm.worker import DeviceWorker
from dse.measure.quality_labels import disturbed
from dse.measure.telemetry import Trace, Window
from dse.measure.telemetry.base import ProbeResult
from dse.measure.telemetry.cpu_interference import (
    MIN_TICKS,
    CpuInterferenceProbe,
    parse_proc_stat,
    parse_schedstat,
    parse_self_stat,
    tasks_schedstat,
)
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec
from tests.conftest import LOCAL_CPU

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "proc"
TINY_ARCH = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}
CPUS = os.cpu_count() or 1


def test_proc_stat_is_read_from_its_aggregate_line() -> None:
    # A real /proc/stat of a 2-CPU VM: cpu user nice system idle iowait irq softirq steal ...
    ticks = parse_proc_stat((FIXTURES / "stat").read_text())
    assert ticks.busy == 609773 + 464 + 89272 + 0 + 2031
    assert ticks.steal == 14366
    assert ticks.total == 609773 + 464 + 89272 + 728892 + 6351 + 0 + 2031 + 14366
    assert ticks.procs_running >= 1
    with pytest.raises(ValueError, match="no aggregate 'cpu' line"):
        parse_proc_stat("cpu0 1 2 3 4\n")


def test_own_cpu_time_survives_a_name_with_spaces_and_parentheses() -> None:
    assert parse_self_stat((FIXTURES / "self-stat-odd-name").read_text()) == 1234 + 567


def test_run_queue_figures_are_summed_over_the_process_threads() -> None:
    # Real-format schedstat files of two threads: ns on a CPU, ns waiting, timeslices.
    root = FIXTURES / "root"
    assert parse_schedstat("606726 1250 14\n") == (606726, 1250)
    assert tasks_schedstat(root / "proc" / "self" / "task") == (
        2113471912 + 606726, 38211803 + 1250)
    probe = CpuInterferenceProbe(root=str(root))
    assert probe.available() == (True, "")
    reading = probe.read_at_ends()
    assert (reading["run_ns"], reading["wait_ns"]) == (2113471912 + 606726, 38211803 + 1250)
    assert probe.read()["own"] == 1234 + 567
    assert "run_ns" not in probe.read()  # every interval: not read


def _trace(*readings: dict[str, float]) -> Trace:
    trace = Trace("cpu_interference")
    for i, reading in enumerate(readings):
        trace.add(float(i), reading)
    return trace


def test_shares_come_from_the_window_ends() -> None:
    probe = CpuInterferenceProbe()
    start = {"busy": 1000.0, "steal": 50.0, "total": 5000.0, "own": 300.0, "procs_running": 1.0}
    # 200 ticks of two CPUs: we used 100, someone else 80 more, the hypervisor 10.
    end = {"busy": 1180.0, "steal": 60.0, "total": 5200.0, "own": 400.0, "procs_running": 2.0}
    result = probe.summarize(_trace(start, end), Window(0.0, 1.0, 1))
    assert result.metrics == {"interference_cpu_pct": 40.0, "steal_pct": 5.0}
    assert result.missing["cpu_wait_pct"].startswith("no /proc/self/task/*/schedstat reading")
    assert probe.provenance(_trace(start, end)) == {"procs_running_mean": "1.50"}


def test_the_wait_share_comes_from_the_ends_that_have_it() -> None:
    probe = CpuInterferenceProbe()
    base = {"busy": 1000.0, "steal": 0.0, "total": 5000.0, "own": 300.0, "procs_running": 1.0}
    nan = float("nan")
    readings = [{**base, "run_ns": 1e9, "wait_ns": 1e8},
                {**base, "busy": 1100.0, "total": 5100.0, "run_ns": nan, "wait_ns": nan},
                {**base, "busy": 1200.0, "total": 5200.0, "own": 400.0, "run_ns": 1.6e9,
                 "wait_ns": 5e8}]
    # 0.6 s on a CPU and 0.4 s waiting for one: 40% of the runnable time.
    result = probe.summarize(_trace(*readings), Window(0.0, 2.0, 1))
    assert result.metrics["cpu_wait_pct"] == pytest.approx(40.0)


@pytest.mark.parametrize(("metrics", "says"), [
    # One busy loop on the other core of two: half the CPUs, but nothing waited.
    ({"interference_cpu_pct": 50.0, "steal_pct": 0.0, "cpu_wait_pct": 0.1}, ""),
    # Two busy loops: the measurement waited 45% of its time.
    ({"interference_cpu_pct": 66.0, "steal_pct": 0.0, "cpu_wait_pct": 45.0},
     "other processes used 66% of the CPUs' time and the measurement waited for a CPU 45% of "
     "its time (at most 20% and 5% allowed)"),
    # Waiting on its own threads, nobody else busy: not interference.
    ({"interference_cpu_pct": 2.0, "steal_pct": 0.0, "cpu_wait_pct": 30.0}, ""),
    # No run-queue figure: the share alone decides.
    ({"interference_cpu_pct": 50.0, "steal_pct": 0.0},
     "other processes used 50% of the CPUs' time (at most 20% allowed)"),
    ({"interference_cpu_pct": 0.0, "steal_pct": 9.0, "cpu_wait_pct": 9.0},
     "the hypervisor took 9% of the CPUs' time (at most 5% allowed)"),
])
def test_work_beside_the_measurement_is_not_interference_work_taking_its_cpu_is(
        metrics: dict[str, float], says: str) -> None:
    assert disturbed(ProbeResult(metrics=metrics), 20.0, 5.0, max_cpu_wait_pct=5.0) == says


def test_a_window_too_short_for_the_ticks_is_missing_with_why() -> None:
    probe = CpuInterferenceProbe()
    start = {"busy": 1000.0, "steal": 0.0, "total": 5000.0, "own": 300.0, "procs_running": 1.0}
    end = {**start, "total": 5000.0 + MIN_TICKS - 1, "busy": 1010.0}
    result = probe.summarize(_trace(start, end), Window(0.0, 0.05, 1))
    assert result.metrics == {}
    assert result.missing["interference_cpu_pct"].startswith(
        f"the window held {MIN_TICKS - 1} CPU ticks")


@pytest.fixture
def hog() -> Iterator[list[subprocess.Popen[bytes]]]:
    """A process spinning on every CPU, so the measurement must share one; ended by PID."""
    processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                 for _ in range(CPUS)]
    try:
        time.sleep(0.2)  # under way before any window opens
        yield processes
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_a_real_hog_is_seen(hog: list[subprocess.Popen[bytes]]) -> None:
    probe = CpuInterferenceProbe()
    assert probe.available() == (True, "")
    probe.start()
    end = time.perf_counter() + 0.5
    while time.perf_counter() < end:  # runnable all along, as a measurement is
        pass
    trace = probe.stop()
    result = probe.summarize(trace, Window(trace.timestamps[0], trace.timestamps[-1], 1))
    # CPUS spinning processes beside one more: at least half of their fair share, and this
    # thread waited for a CPU (about a third of the time on 2 CPUs).
    assert result.metrics["interference_cpu_pct"] >= 50 * CPUS / (CPUS + 1)
    assert result.metrics["cpu_wait_pct"] > 5


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache folder for the policy tests: the first trains and exports the candidate (under
    the hog), the others reuse its weights and artifact and only measure. The build is no part
    of the policy, and under the hog it took most of each test's time."""
    return tmp_path_factory.mktemp("interference-cache")


@pytest.mark.parametrize(("action", "remeasures", "flagged"), [
    ("remeasure", 2, True), ("flag", 0, True), ("ignore", 0, False)])
def test_the_worker_remeasures_or_flags_a_disturbed_window(
        hog: list[subprocess.Popen[bytes]], built: Path, action: str, remeasures: int,
        flagged: bool) -> None:
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    worker = DeviceWorker(profile, str(built))
    # Half of one CPU's share: the hog (a whole CPU) is always above it.
    limit = 50 / CPUS
    measure = MeasureSpec(min_seconds=0.3, max_seconds=0.4, warmup_max_seconds=0.05,
                          interference={"max_foreign_cpu_pct": limit, "action": action,
                                        "max_remeasures": 2, "wait_s": 0.0})
    candidate = Candidate("cnn", TINY_ARCH, "fp32", 4, "onnxruntime", {"intra_op_threads": 1})
    result = worker.evaluate(candidate, TrainingSpec(epochs=1, batch_size=256), measure)
    assert result.status == "ok", result.reason
    facts = result.provenance
    assert facts["remeasures"] == str(remeasures)
    assert facts["disturbed"] == str(flagged)
    assert result.metrics["interference_cpu_pct"] > limit
    assert facts["disturbance"].startswith("other processes used")
    reasons = [part for part in facts["remeasured_because"].split(" | ") if part]
    assert len(reasons) == remeasures
    # The hog may slow the machine's reference loop too (dse.measure.telemetry.speed_canary).
    assert all(reason.startswith(("other processes used", "unstable:", "the machine itself"))
               for reason in reasons)
