"""The latency harness: adaptive stopping, warm-up, the first call kept apart, scenarios."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dse.exceptions import MeasurementError
from dse.measure import measure_latency, measure_offline, measure_sustained, timer_overhead_ns


def _spin(ms: float) -> None:
    """Busy-wait: unlike sleep, its duration does not depend on the scheduler's wake-up slack."""
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def test_stops_when_the_median_is_known_to_the_target() -> None:
    stats = measure_latency(lambda: _spin(0.5), target_rel_ci=0.02, min_iters=20,
                            min_seconds=0.0, max_seconds=10.0)
    assert stats.target_met
    assert stats.rel_ci <= 0.02
    assert stats.p50_ci_ms is not None
    low, high = stats.p50_ci_ms
    assert low <= stats.p50_ms <= high
    assert high - low <= 2 * 0.02 * stats.p50_ms
    assert stats.seconds < 5.0
    assert 0.45 <= stats.p50_ms <= 1.5


def test_limits_stop_a_noisy_function_and_say_the_target_was_missed() -> None:
    rng = np.random.default_rng(0)
    stats = measure_latency(lambda: _spin(float(rng.choice([0.1, 1.0]))), target_rel_ci=0.001,
                            min_iters=10, min_seconds=0.0, max_seconds=0.3,
                            warmup_max_seconds=0.05)
    assert not stats.target_met
    assert stats.rel_ci > 0.001
    assert 0.25 <= stats.seconds < 1.0


def test_first_call_and_warmup_are_not_samples() -> None:
    calls = []

    def work() -> None:
        _spin(30 if not calls else 0.3)  # a slow first call, like lazy initialisation
        calls.append(1)

    stats = measure_latency(work, min_iters=10, min_seconds=0.0, max_seconds=5.0)
    assert stats.first_call_ms >= 29
    assert stats.max_ms < 29
    assert stats.warmup_iters >= 20  # at least two chunks of ten to see the median settle
    assert len(calls) == 1 + stats.warmup_iters + stats.n


def test_window_hooks_bracket_exactly_the_timed_calls() -> None:
    events: list[tuple[str, int]] = []
    count = [0]

    def work() -> None:
        count[0] += 1

    stats = measure_latency(work, min_iters=50, min_seconds=0.0, max_seconds=1.0,
                            on_window=lambda opening: events.append(
                                ("open" if opening else "close", count[0])))
    (_, opened_at), (_, closed_at) = events
    assert closed_at - opened_at == stats.n


def test_sync_runs_inside_the_timed_region() -> None:
    stats = measure_latency(lambda: None, sync=lambda: _spin(0.3), min_iters=20, min_seconds=0.0,
                            max_seconds=2.0)
    assert stats.p50_ms >= 0.29


def test_timer_overhead_is_small_and_positive() -> None:
    assert 0 < timer_overhead_ns() < 50_000


def test_sustained_run_lasts_its_time() -> None:
    stats = measure_sustained(lambda: _spin(0.2), seconds=0.3)
    assert 0.3 <= stats.seconds < 0.6
    assert stats.n > 100


def test_offline_keeps_requests_in_flight() -> None:
    stats = measure_offline(lambda: time.sleep(0.005), batch_size=4, concurrency=4, seconds=0.3)
    # sleep releases the GIL: four threads finish about four times the calls of one
    assert stats.calls >= 4 * 0.3 / 0.005 * 0.6
    assert stats.throughput_sps == pytest.approx(stats.calls * 4 / stats.seconds)


def test_offline_surfaces_errors() -> None:
    def boom() -> None:
        raise RuntimeError("device lost")

    with pytest.raises(MeasurementError, match="device lost"):
        measure_offline(boom, batch_size=1, concurrency=2, seconds=0.05)


def test_keeps_measuring_while_the_machine_changes_state() -> None:
    timed = [0]
    opened = [False]

    def work() -> None:
        # Three times slower after the 25th timed call, like a neighbour waking up on a shared
        # host; without the stationarity check the run would stop at its first check (n=40).
        if opened[0]:
            timed[0] += 1
        _spin(0.2 if timed[0] <= 25 else 0.6)

    stats = measure_latency(work, min_iters=40, min_seconds=0.0, max_seconds=2.0,
                            on_window=lambda opening: opened.__setitem__(0, opening))
    assert stats.n >= 80
    assert stats.p50_ms >= 0.55  # the state it settled in, not a mixture


def test_stopping_checks_take_a_small_share_of_the_window() -> None:
    # Two latencies half and half: the median's CI spans both, so the target is never met and the
    # run checks all along its second. Checking at every 10% more samples, as before, took 20-40%.
    from dse.measure.harness import CHECK_SHARE

    rng = np.random.default_rng(3)
    stats = measure_latency(lambda: _spin(float(rng.choice([0.01, 0.05]))), target_rel_ci=0.001,
                            min_iters=10, min_seconds=0.0, max_seconds=1.0,
                            warmup_max_seconds=0.05)
    assert not stats.target_met
    assert 0 < stats.check_seconds <= 5 * CHECK_SHARE * stats.seconds


@pytest.mark.gpu
def test_cuda_event_timing_matches_synchronised_host_timing() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no NVIDIA GPU / CUDA on this machine (torch reports no CUDA device)")
    a = torch.randn(4096, 4096, device="cuda")

    def matmul() -> object:
        return a @ a

    events = measure_latency(matmul, timer="cuda", min_seconds=0.5, max_seconds=3.0)
    host = measure_latency(matmul, sync=torch.cuda.synchronize, min_seconds=0.5, max_seconds=3.0)
    # Few enough launches that the queue never fills (a full queue would block the host).
    torch.cuda.synchronize()
    unsynced = measure_latency(matmul, min_iters=20, max_iters=20, min_seconds=0.0,
                               warmup_max_iters=0)
    assert events.p50_ms == pytest.approx(host.p50_ms, rel=0.1)
    # Host time of an asynchronous launch is far below the real device time.
    assert unsynced.p50_ms < 0.5 * events.p50_ms
