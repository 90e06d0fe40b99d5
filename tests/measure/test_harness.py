"""The latency harness: adaptive stopping, warm-up, the first call kept apart, scenarios."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dse.core.exceptions import MeasurementError
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
    assert not stats.underpowered  # its floors were met before the 5-second cap
    assert 0.45 <= stats.p50_ms <= 1.5


def test_limits_stop_a_noisy_function_and_say_the_target_was_missed() -> None:
    rng = np.random.default_rng(0)
    stats = measure_latency(lambda: _spin(float(rng.choice([0.1, 1.0]))), target_rel_ci=0.001,
                            min_iters=10, min_seconds=0.0, max_seconds=0.3,
                            warmup_max_seconds=0.05)
    assert not stats.target_met
    assert stats.rel_ci > 0.001
    # The cap stopped it: no sooner (a busy machine can only make it later, so no upper bound).
    assert stats.seconds >= 0.25


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


def test_a_runtime_clock_is_read_once_per_timed_call_and_never_replaces_the_host_clock() -> None:
    # A "runtime" that times its own work inside the call, as OpenVINO times infer(): the
    # harness reads that clock after every timed call of every block (never after the first
    # call, warm-up or the calls between blocks), keeps the host clock as the samples, and
    # reports the runtime's median and the host's excess over it.
    inner: list[float] = []
    reads: list[float] = []

    def work() -> None:
        start = time.perf_counter_ns()
        _spin(0.2)
        inner.append((time.perf_counter_ns() - start) / 1e6)

    def runtime_clock() -> float:
        reads.append(inner[-1])
        return inner[-1]

    stats = measure_latency(work, min_iters=60, min_seconds=0.0, max_seconds=1.0, blocks=3,
                            block_gap_s=0.01, warmup_max_seconds=0.05,
                            runtime_clock=runtime_clock)
    assert len(reads) == stats.n
    assert stats.runtime_p50_ms == pytest.approx(float(np.median(reads)))
    assert stats.runtime_p50_ms <= stats.p50_ms
    assert stats.runtime_overhead_us > 0  # each host sample holds its runtime time and more
    plain = measure_latency(work, min_iters=20, min_seconds=0.0, max_seconds=0.5)
    assert np.isnan(plain.runtime_p50_ms) and np.isnan(plain.runtime_overhead_us)


def test_sync_runs_inside_the_timed_region() -> None:
    stats = measure_latency(lambda: None, sync=lambda: _spin(0.3), min_iters=20, min_seconds=0.0,
                            max_seconds=2.0)
    assert stats.p50_ms >= 0.29


def test_timer_overhead_is_small_and_positive() -> None:
    assert 0 < timer_overhead_ns() < 50_000


def test_sustained_run_lasts_its_time() -> None:
    stats = measure_sustained(lambda: _spin(0.2), seconds=0.3)
    assert stats.seconds >= 0.3
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
    from dse.measure.stopping import CHECK_SHARE

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


# -- floors, caps and arguments ----------------------------------------------------------------

def test_caps_bound_a_slow_call_by_one_call() -> None:
    # Each call takes at least 0.2 s, so the warm-up cap (0.3 s) admits at most two calls and the
    # timing cap (0.5 s) at most three. Warm-up ran whole chunks of ten before looking at the
    # clock: measure_latency(sleep(2), max_seconds=5) took 31 s.
    calls = [0]

    def slow() -> None:
        calls[0] += 1
        time.sleep(0.2)

    stats = measure_latency(slow, min_iters=30, min_seconds=0.0, max_seconds=0.5,
                            warmup_max_seconds=0.3, max_extension=1.0)
    assert stats.warmup_iters <= 2
    assert stats.n <= 3 and not stats.extended
    assert calls[0] == 1 + stats.warmup_iters + stats.n
    # Stopped by the cap below the floor of 30 samples: said so, not passed off as a measurement.
    assert stats.min_samples == 30 and stats.underpowered
    assert stats.p99_ci_ms is None and stats.p50_ci_ms is None


def test_a_required_percentile_is_a_floor_not_a_wish() -> None:
    from dse.measure.stats import samples_for_ci

    stats = measure_latency(lambda: None, target_rel_ci=0.5, min_iters=10, min_seconds=0.0,
                            max_seconds=60.0, required_quantiles=(0.5, 0.99))
    assert stats.min_samples == samples_for_ci(0.99) == 368
    assert stats.n >= 368
    assert stats.underpowered == (stats.p99_ci_ms is None)


def test_a_run_that_meets_its_floors_is_not_underpowered() -> None:
    stats = measure_latency(lambda: _spin(0.05), target_rel_ci=0.5, min_iters=20,
                            min_seconds=0.0, max_seconds=60.0)
    assert stats.n >= 20 and stats.min_samples == 20
    assert not stats.underpowered


def test_throughput_comes_from_the_median() -> None:
    stats = measure_latency(lambda: _spin(0.05), target_rel_ci=0.5, min_iters=20,
                            min_seconds=0.0, max_seconds=60.0)
    assert stats.throughput(4) == 4 * 1000.0 / stats.p50_ms


def test_an_error_in_the_function_reaches_the_caller() -> None:
    def broken() -> None:
        raise RuntimeError("runtime lost its device")

    with pytest.raises(RuntimeError, match="runtime lost its device"):
        measure_latency(broken)


@pytest.mark.parametrize(("arguments", "message"), [
    ({"target_rel_ci": 0.0}, r"target_rel_ci must lie in \(0, 1\)"),
    ({"target_rel_ci": float("nan")}, "target_rel_ci must be a number"),
    ({"min_iters": 0}, "min_iters must be an integer >= 1"),
    ({"min_iters": 2.5}, "min_iters must be an integer >= 1"),
    ({"max_iters": 0}, "max_iters must be an integer >= 30"),
    ({"min_iters": 50, "max_iters": 40}, "max_iters must be an integer >= 50"),
    ({"min_seconds": float("nan")}, "min_seconds must be a number"),
    ({"min_seconds": -1.0}, "min_seconds must be finite and >= 0"),
    ({"max_seconds": 0.0}, "max_seconds must be finite, > 0"),
    ({"max_seconds": -5.0}, "max_seconds must be finite, > 0"),
    ({"max_seconds": float("nan")}, "max_seconds must be a number"),
    ({"max_seconds": float("inf")}, "max_seconds must be finite"),
    ({"min_seconds": 2.0, "max_seconds": 1.0}, r"max_seconds must be .* >= min_seconds \(2.0\)"),
    ({"warmup_max_iters": -1}, "warmup_max_iters must be an integer >= 0"),
    ({"warmup_max_seconds": float("nan")}, "warmup_max_seconds must be a number"),
    ({"warmup_tolerance": 0.0}, "warmup_tolerance must be finite and > 0"),
    ({"timer": "wall"}, "timer must be 'host' or 'cuda'"),
    ({"required_quantiles": (1.0,)}, r"required_quantiles must lie in \(0, 1\)"),
    ({"required_quantiles": (0.99,), "max_iters": 100},
     "max_iters = 100 can never give the 0.99 quantile a 95% confidence interval"),
], ids=lambda value: str(value) if isinstance(value, dict) else "")
def test_each_bad_argument_is_one_clear_error(arguments: dict[str, object], message: str) -> None:
    calls = [0]
    with pytest.raises(ValueError, match=message):
        measure_latency(lambda: calls.__setitem__(0, calls[0] + 1), **arguments)  # type: ignore[arg-type]
    assert calls[0] == 0  # refused before the function ran


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan"), float("inf")])
def test_sustained_and_offline_refuse_a_bad_duration(seconds: float) -> None:
    with pytest.raises(ValueError, match="seconds must be a finite number of seconds > 0"):
        measure_sustained(lambda: None, seconds=seconds)
    with pytest.raises(ValueError, match="seconds must be a finite number of seconds > 0"):
        measure_offline(lambda: None, batch_size=1, concurrency=1, seconds=seconds)
