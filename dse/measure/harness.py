"""Latency sampling: warm-up until the median settles, then time calls until the median is known
to the requested precision (or a limit is reached); plus the offline (throughput) scenario.

The same code times a candidate on every device; the worker calls it inside its measurement window.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dse.exceptions import MeasurementError
from dse.measure.stats import (
    LatencyStats,
    autocorrelation_time,
    halves_agree,
    median_rel_halfwidth,
    quantile_ci,
    samples_for_ci,
    summarize,
)

if TYPE_CHECKING:
    from dse.measure.run_to_run import RunToRun

Timer = Literal["host", "cuda"]


def timer_overhead_ns(repeats: int = 2000) -> float:
    """Median cost of one host timestamp pair, in ns: the floor under any host-timed sample."""
    clock = time.perf_counter_ns
    gaps = np.empty(repeats)
    for i in range(repeats):
        start = clock()
        gaps[i] = clock() - start
    return float(np.median(gaps))


def _host_timed(fn: Callable[[], object], sync: Callable[[], object] | None) -> Callable[[], float]:
    clock = time.perf_counter_ns
    if sync is None:
        def timed() -> float:
            start = clock()
            fn()
            return (clock() - start) / 1e6
    else:
        # The sync belongs inside the timed region: an asynchronous launch returns before the
        # device has done the work, and its host time alone would be a lie.
        def timed() -> float:
            start = clock()
            fn()
            sync()
            return (clock() - start) / 1e6
    return timed


def _cuda_timed(fn: Callable[[], object]) -> Callable[[], float]:
    """Time on the device's own clock with CUDA events around the call (torch's CUDA API)."""
    import torch

    begin = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def timed() -> float:
        begin.record()
        fn()
        end.record()
        end.synchronize()
        return float(begin.elapsed_time(end))

    return timed


#: At most about this share of a timed window goes to deciding whether to stop. The checks run
#: between timed calls, inside the telemetry window, where their time would be charged to the model.
CHECK_SHARE = 0.01


class _StoppingCheck:
    """Whether a run may stop, asked between timed calls and kept cheap.

    Checks come at geometrically spaced sample counts (each at least 10% after the last), and
    only while the time spent checking, this check included (estimated by the last one's cost; for
    the first, by a check on stand-in data), stays within :data:`CHECK_SHARE` of the time elapsed.
    A check costs a few passes over the samples; spaced by count alone, checks at 100k samples of
    a 10 µs call took 15-25% of the window, and most of it for a no-op call. The samples are copied
    into an array as they come (only the new ones at each check), not converted whole each time.
    Which samples a check sees, and what it decides from them, is unchanged: only when it looks.
    """

    def __init__(self, target_rel_ci: float, min_iters: int,
                 required_quantiles: Sequence[float] = (), blocks: int = 1) -> None:
        self.target_rel_ci = target_rel_ci
        # The median's CI is checked anyway; any other required quantile must have one too, in
        # the pooled run: ``blocks`` blocks of this one's length and correlation.
        self.quantiles = [q for q in required_quantiles if q != 0.5]
        self.blocks = blocks
        self.next_n = min_iters
        self.seconds = 0.0  # spent in checks so far
        self._array = np.empty(max(1024, min_iters))
        self._filled = 0
        # Checks on stand-in data, before the window opens: the first runs scipy's and numpy's
        # first-call paths outside the window, the second measures what a check costs here.
        stand_in = np.linspace(1.0, 2.0, max(min_iters, 20))
        self._last_cost = math.inf
        for _ in range(2):
            start = time.perf_counter()
            median_rel_halfwidth(stand_in)
            halves_agree(stand_in)  # every part: a check that passes the first pays for all
            for quantile in self.quantiles:
                self._pooled_has_ci(stand_in, quantile)
            self._last_cost = min(self._last_cost, time.perf_counter() - start)

    def due(self, n: int, elapsed: float) -> bool:
        return n >= self.next_n and self.seconds + self._last_cost <= CHECK_SHARE * elapsed

    def passes(self, samples: list[float]) -> bool:
        """Check now: the median's CI is within the target and the run's halves agree."""
        start = time.perf_counter()
        n = len(samples)
        data = self._mirror(samples)
        # A precise median of a run whose halves disagree is precise about a mixture of two
        # machine states: keep measuring then, until the halves agree or time runs out.
        done = (median_rel_halfwidth(data) <= self.target_rel_ci and halves_agree(data)
                and all(self._pooled_has_ci(data, q) for q in self.quantiles))
        self._last_cost = time.perf_counter() - start
        self.seconds += self._last_cost
        self.next_n = n + max(10, n // 10)
        return done

    def _pooled_has_ci(self, data: np.ndarray, quantile: float) -> bool:
        """Whether ``blocks`` runs like ``data`` would give ``quantile`` a 95% interval: their
        effective sample count (n x blocks / the autocorrelation time) reaches its floor. With
        one block, exactly whether :func:`quantile_ci` has one."""
        if self.blocks == 1:
            return quantile_ci(data, quantile) is not None
        tau = autocorrelation_time(data, float(np.quantile(data, quantile)))
        return int(len(data) * self.blocks / tau) >= samples_for_ci(quantile)

    def _mirror(self, samples: list[float]) -> np.ndarray:
        n = len(samples)
        if n > len(self._array):
            grown = np.empty(max(n, 2 * len(self._array)))
            grown[: self._filled] = self._array[: self._filled]
            self._array = grown
        self._array[self._filled : n] = samples[self._filled :]
        self._filled = n
        return self._array[:n]


@dataclass(frozen=True)
class Warmup:
    iters: int
    seconds: float
    settled: bool


def _warm_up(timed: Callable[[], float], *, tolerance: float, max_iters: int,
             max_seconds: float) -> Warmup:
    """Call in chunks until two successive chunk medians agree within ``tolerance`` (caches,
    allocators, JITs and clocks have settled), or a cap is reached.

    The caps are checked before every call, so a slow call overruns ``max_seconds`` by one call
    at most; a chunk holds up to ten calls, fewer for slow calls (sized from the first warm-up
    call so that two chunks fit in a quarter of the cap each), and never fewer than three.
    """
    start = time.perf_counter()
    previous: float | None = None
    chunk: list[float] = []
    size = 10
    iters = 0
    while iters < max_iters and time.perf_counter() - start < max_seconds:
        chunk.append(timed())
        iters += 1
        if iters == 1:
            size = int(min(10, max(3, max_seconds / 4 / max(chunk[0] / 1e3, 1e-9))))
        if len(chunk) < size:
            continue
        median = float(np.median(chunk))
        chunk = []
        if previous is not None and abs(median - previous) <= tolerance * previous:
            return Warmup(iters, time.perf_counter() - start, True)
        previous = median
    return Warmup(iters, time.perf_counter() - start, False)


def _check_arguments(target_rel_ci: float, min_iters: int, max_iters: int, min_seconds: float,
                     max_seconds: float, warmup_max_iters: int, warmup_max_seconds: float,
                     warmup_tolerance: float, timer: str,
                     required_quantiles: Sequence[float]) -> int:
    """Raise ValueError naming the first bad argument; return the run's sample floor."""
    def number(name: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise ValueError(f"{name} must be a number, got {value!r}")
        return float(value)

    def count(name: str, value: object, least: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        return value

    if not 0 < number("target_rel_ci", target_rel_ci) < 1:
        raise ValueError(f"target_rel_ci must lie in (0, 1), got {target_rel_ci}")
    count("min_iters", min_iters, 1)
    count("max_iters", max_iters, min_iters)
    count("warmup_max_iters", warmup_max_iters, 0)
    if not 0 <= number("min_seconds", min_seconds) < math.inf:
        raise ValueError(f"min_seconds must be finite and >= 0, got {min_seconds}")
    if not min_seconds <= number("max_seconds", max_seconds) < math.inf or max_seconds <= 0:
        raise ValueError(f"max_seconds must be finite, > 0 and >= min_seconds ({min_seconds}), "
                         f"got {max_seconds}")
    if not 0 <= number("warmup_max_seconds", warmup_max_seconds) < math.inf:
        raise ValueError(f"warmup_max_seconds must be finite and >= 0, got {warmup_max_seconds}")
    if not 0 < number("warmup_tolerance", warmup_tolerance) < math.inf:
        raise ValueError(f"warmup_tolerance must be finite and > 0, got {warmup_tolerance}")
    if timer not in ("host", "cuda"):
        raise ValueError(f"timer must be 'host' or 'cuda', got {timer!r}")
    floor = min_iters
    for quantile in required_quantiles:
        if not 0 < number("required_quantiles", quantile) < 1:
            raise ValueError(f"required_quantiles must lie in (0, 1), got {quantile}")
        needed = samples_for_ci(quantile)
        if needed > max_iters:
            raise ValueError(f"max_iters = {max_iters} can never give the {quantile:g} quantile a "
                             f"95% confidence interval (that needs at least {needed} samples)")
        floor = max(floor, needed)
    return floor


def _check_seconds(name: str, value: object) -> None:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not 0 < value < math.inf):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")


def measure_latency(
    fn: Callable[[], object],
    *,
    target_rel_ci: float = 0.01,
    min_iters: int = 30,
    max_iters: int = 1_000_000,
    min_seconds: float = 0.2,
    max_seconds: float = 5.0,
    warmup_max_iters: int = 500,
    warmup_max_seconds: float = 1.0,
    warmup_tolerance: float = 0.03,
    required_quantiles: Sequence[float] = (0.5,),
    blocks: int = 1,
    block_gap_s: float = 0.0,
    sync: Callable[[], object] | None = None,
    timer: Timer = "host",
    on_window: Callable[[bool], object] | None = None,
    run_to_run: RunToRun | None = None,
) -> LatencyStats:
    """Time ``fn`` until the 95% CI of its median latency is within ±``target_rel_ci`` of it.

    Timing stops when the target is met, the two halves of the run agree (``stationary``), and
    the floors are reached: ``min_iters``, ``min_seconds``, and enough samples for a CI of every
    quantile in ``required_quantiles`` (368 for p99). ``max_iters`` / ``max_seconds`` are caps: a
    run they stop short of a floor is ``underpowered`` (and ``target_met`` or ``stationary`` may
    be False); the result says so. The first call is timed on its own (lazy initialisation,
    compilation) and never joins the samples; warm-up follows until the running median settles,
    within ``warmup_max_iters`` / ``warmup_max_seconds`` (checked before every call, so a slow
    call overruns a cap by one call at most). ``sync`` is called after each call inside the timed
    region (e.g. ``torch.cuda.synchronize``); ``timer="cuda"`` times with CUDA events instead.

    With ``blocks`` > 1 the run is that many independent blocks, each warmed up afresh and given
    an equal share of every floor and cap. The first block stops as a run would (its median
    within ``target_rel_ci`` x sqrt(blocks), so the pooled one reaches the target); the others
    take as many calls as it did, time caps allowing. The intervals then hold the blocks'
    disagreement too (see :func:`dse.measure.stats.run_quantile_ci`), which is what a later run
    will see. ``run_to_run``, the device's calibrated run-to-run variation (``dse calibrate``),
    floors every interval on top (:mod:`dse.measure.run_to_run`).

    ``on_window(True)`` / ``on_window(False)`` are called right before the first and right after
    the last timed call, so telemetry covers exactly the timed window (and, between blocks, the
    later blocks' warm-ups: ``window_calls`` counts them). The stopping checks between calls take
    at most about :data:`CHECK_SHARE` of the window (``check_seconds`` in the result).
    Raises ValueError for an argument out of range (one line naming it).
    """
    floor = _check_arguments(target_rel_ci, min_iters, max_iters, min_seconds, max_seconds,
                             warmup_max_iters, warmup_max_seconds, warmup_tolerance, timer,
                             required_quantiles)
    if isinstance(blocks, bool) or not isinstance(blocks, int) or not 1 <= blocks <= max_iters:
        raise ValueError(f"blocks must be an integer in [1, max_iters = {max_iters}], "
                         f"got {blocks!r}")
    if (isinstance(block_gap_s, bool) or not isinstance(block_gap_s, int | float)
            or not 0 <= block_gap_s < math.inf):
        raise ValueError(f"block_gap_s must be a finite number of seconds >= 0, got {block_gap_s!r}")
    timed = _cuda_timed(fn) if timer == "cuda" else _host_timed(fn, sync)
    overhead = timer_overhead_ns() if timer == "host" else float("nan")
    first_call_ms = timed()
    share = _BlockShare(
        # Each block must stand on its own: the pooled floors split between them.
        min_iters=max(1, math.ceil(floor / blocks)), max_iters=max_iters // blocks,
        min_seconds=min_seconds / blocks, max_seconds=max_seconds / blocks,
        # n samples in each of b blocks: the pooled median's CI is about 1/sqrt(b) as wide.
        target_rel_ci=min(0.99, target_rel_ci * math.sqrt(blocks)),
        required_quantiles=tuple(required_quantiles))
    # Set up (its cost measured) before the window opens, where only calls of ``fn`` should run.
    check: _StoppingCheck | None = _StoppingCheck(share.target_rel_ci, share.min_iters,
                                                  share.required_quantiles, blocks)
    samples: list[float] = []
    sizes: list[int] = []
    warm_iters, warm_seconds, check_seconds, timed_seconds, window_calls = 0, 0.0, 0.0, 0.0, 0
    for block in range(blocks):
        if block:
            window_calls += _keep_busy(fn, block_gap_s)
        warm = _warm_up(timed, tolerance=warmup_tolerance, max_iters=warmup_max_iters,
                        max_seconds=warmup_max_seconds)
        warm_iters += warm.iters
        warm_seconds += warm.seconds
        if block == 0:
            if on_window is not None:
                on_window(True)
        else:
            window_calls += warm.iters
        if block == 1:
            # Later blocks take as many calls as the first chose, within the same caps: equal
            # blocks weigh equally in the pooled percentiles (a noisy block that ran to its cap
            # would otherwise outweigh quiet ones) and need no stopping checks.
            share = replace(share, min_iters=len(samples), max_iters=len(samples),
                            min_seconds=0.0)
            check = None
        taken, seconds, checking = _timed_block(timed, share, check)
        samples.extend(taken)
        sizes.append(len(taken))
        timed_seconds += seconds
        check_seconds += checking
    window_calls += len(samples)
    if on_window is not None:
        on_window(False)
    return summarize(samples, seconds=timed_seconds, target_rel_ci=target_rel_ci,
                     warmup_iters=warm_iters, warmup_seconds=warm_seconds,
                     first_call_ms=first_call_ms, timer_overhead_ns=overhead,
                     check_seconds=check_seconds, min_samples=floor,
                     required_quantiles=required_quantiles, block_sizes=sizes,
                     window_calls=window_calls, run_to_run=run_to_run)


def _keep_busy(fn: Callable[[], object], seconds: float) -> int:
    """Call ``fn`` untimed for ``seconds``: the gap that spreads blocks in time keeps the device
    under the same load (its power, heat and clocks stay those of the measurement, and energy
    per call stays right); the number of calls made."""
    calls = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        fn()
        calls += 1
    return calls


@dataclass(frozen=True)
class _BlockShare:
    """One block's floors, caps and target."""

    min_iters: int
    max_iters: int
    min_seconds: float
    max_seconds: float
    target_rel_ci: float
    required_quantiles: tuple[float, ...]


def _timed_block(timed: Callable[[], float], share: _BlockShare,
                 check: _StoppingCheck | None) -> tuple[list[float], float, float]:
    """Time calls until the block's floors and target are met (``check``; without one, until
    a cap) or a cap is reached; its samples, its seconds and the seconds its checks took."""
    samples: list[float] = []
    start = time.perf_counter()
    while True:
        samples.append(timed())
        n = len(samples)
        elapsed = time.perf_counter() - start
        if n >= share.max_iters or elapsed >= share.max_seconds:
            break
        if (check is not None and elapsed >= share.min_seconds and check.due(n, elapsed)
                and check.passes(samples)):
            break
    return samples, time.perf_counter() - start, 0.0 if check is None else check.seconds


def measure_sustained(fn: Callable[[], object], *, seconds: float,
                      sync: Callable[[], object] | None = None,
                      on_window: Callable[[bool], object] | None = None) -> LatencyStats:
    """Call ``fn`` back to back for ``seconds`` (no warm-up, no early stop): the run in which a
    device heats up, for the latency drift between its first and last tenth."""
    _check_seconds("seconds", seconds)
    timed = _host_timed(fn, sync)
    samples: list[float] = []
    if on_window is not None:
        on_window(True)
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        samples.append(timed())
    elapsed = time.perf_counter() - start
    if on_window is not None:
        on_window(False)
    return summarize(samples, seconds=elapsed)


@dataclass(frozen=True)
class OfflineStats:
    """Offline scenario (after MLPerf): ``concurrency`` requests kept in flight for ``seconds``."""

    concurrency: int
    calls: int
    seconds: float
    throughput_sps: float


def measure_offline(fn: Callable[[], Any], *, batch_size: int, concurrency: int,
                    seconds: float) -> OfflineStats:
    """Keep ``concurrency`` calls of ``fn`` in flight (one per thread) for ``seconds``; the
    runtime must release the GIL while it works, as ONNX Runtime and torch do."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    _check_seconds("seconds", seconds)
    counts = [0] * concurrency
    errors: list[BaseException] = []
    barrier = threading.Barrier(concurrency + 1)
    stop = threading.Event()

    def worker(slot: int) -> None:
        barrier.wait()
        try:
            while not stop.is_set():
                fn()
                counts[slot] += 1
        except BaseException as exc:  # surfaced to the caller below, not swallowed
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise MeasurementError(f"offline run failed: {type(errors[0]).__name__}: {errors[0]}")
    calls = sum(counts)
    return OfflineStats(concurrency, calls, elapsed, calls * batch_size / elapsed)
