"""The adaptive latency run: the first call timed apart, warm-up until the median settles, then
timed calls, in one block or several, until the stopping rule is met or a cap is reached.

The same code times a candidate on every device; the worker calls it inside its measurement window.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from dse.measure.run_limits import BlockShare, check_latency_arguments
from dse.measure.stats import LatencyStats, run_quantile_ci, summarize
from dse.measure.stopping import StoppingCheck
from dse.measure.timers import (
    RuntimeClockTap,
    Timer,
    cuda_timed,
    host_timed,
    timer_overhead_ns,
)
from dse.spec import MeasureSpec

if TYPE_CHECKING:
    from dse.measure.run_to_run import RunToRun

# The defaults of a campaign's `measurement:` block are the one source of this function's
# defaults (warm-up's iteration cap and tolerance have no YAML setting).
_CAMPAIGN = MeasureSpec()


@dataclass(frozen=True)
class Warmup:
    """What one warm-up took, and whether the median settled before a cap stopped it."""

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


def measure_latency(
    fn: Callable[[], object],
    *,
    target_rel_ci: float = _CAMPAIGN.target_rel_ci,
    min_iters: int = _CAMPAIGN.min_iters,
    max_iters: int = _CAMPAIGN.max_iters,
    min_seconds: float = _CAMPAIGN.min_seconds,
    max_seconds: float = _CAMPAIGN.max_seconds,
    warmup_max_iters: int = 500,
    warmup_max_seconds: float = _CAMPAIGN.warmup_max_seconds,
    warmup_tolerance: float = 0.03,
    required_quantiles: Sequence[float] = (0.5,),
    blocks: int = 1,  # a direct call times one block; a campaign's `measurement.blocks` is 3
    block_gap_s: float = _CAMPAIGN.block_gap_s,
    sync: Callable[[], object] | None = None,
    timer: Timer = _CAMPAIGN.timer,
    on_window: Callable[[bool], object] | None = None,
    run_to_run: RunToRun | None = None,
    max_extension: float = _CAMPAIGN.max_extension,
    precision: Mapping[float, float] | None = None,
    runtime_clock: Callable[[], float] | None = None,
) -> LatencyStats:
    """Time ``fn`` until the 95% CI of its median latency is within ±``target_rel_ci`` of it.

    Timing stops when the target is met, the two halves of the run agree (``stationary``), each
    quantile of ``precision`` is projected within its relative half-width, and the floors are
    reached: ``min_iters``, ``min_seconds``, and enough samples for a CI of every quantile in
    ``required_quantiles`` (368 for p99). ``max_seconds`` caps the time spent on the target and
    precision; a run still short of its floors then goes on, up to ``max_extension`` times
    ``max_seconds`` (``extended`` in the result), since on a slower machine the samples an
    interval needs take longer to come. ``max_iters`` and that ceiling are hard caps: a run they
    stop short of a floor is ``underpowered`` (and ``target_met`` or ``stationary`` may be
    False); the result says so. The first call is timed on its own (lazy initialisation,
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
    at most about :data:`dse.measure.stopping.CHECK_SHARE` of the window (``check_seconds`` in
    the result).

    Args:
        fn: The call to time (one batch through the runner).
        target_rel_ci: The relative half-width the median's 95% CI must reach.
        min_iters: The fewest timed calls.
        max_iters: The most timed calls (a cap).
        min_seconds: The least timed time, in seconds.
        max_seconds: The most timed time spent on the target and precision, in seconds (the
            floors may extend it, up to ``max_extension`` times).
        warmup_max_iters: The most warm-up calls.
        warmup_max_seconds: The most warm-up time, in seconds.
        warmup_tolerance: How close (relative) two successive warm-up chunk medians must be
            for the warm-up to count as settled.
        required_quantiles: Quantiles that must get a CI (0.99 for p99): they raise the floor.
        blocks: How many independent blocks to time, each warmed up afresh.
        block_gap_s: Seconds of untimed calls between blocks, which keep the device under load.
        sync: Called after each call inside the timed region (e.g. ``torch.cuda.synchronize``);
            host timer only: with ``timer="cuda"`` it is not called (the end event is waited on).
        timer: ``"host"`` (the host clock) or ``"cuda"`` (CUDA events).
        on_window: Called with True right before the first and with False right after the last
            timed call.
        run_to_run: The device's calibrated run-to-run variation, which floors every interval.
        max_extension: How many times ``max_seconds`` a run may take to reach its floors.
        precision: Quantile -> the relative half-width its interval should reach; the run
            stops before ``max_seconds`` only once each is projected met (see
            :class:`dse.measure.stopping.StoppingCheck`).
        runtime_clock: The runtime's own duration of the call just made, in ms, where the
            runtime keeps one (:meth:`dse.backends.base.Runner.runtime_clock`): read after
            each timed call, outside the timed region, into ``runtime_p50_ms`` and
            ``runtime_overhead_us`` (host clock only).

    Returns:
        The run's statistics (:class:`LatencyStats`): percentiles with their CIs, whether the
        target was met, whether the run was stationary or underpowered, and the warm-up, first
        call and check time apart.

    Raises:
        ValueError: For an argument out of range (one line naming it).
        Exception: Whatever ``fn`` (or ``sync``) raises, unchanged: a failing call ends the run.

    Examples:
        >>> from dse import measure_latency
        >>> stats = measure_latency(lambda: sum(range(100)), target_rel_ci=0.5, min_iters=5,
        ...                         min_seconds=0.001, max_seconds=0.5, warmup_max_seconds=0.01)
        >>> stats.n >= 5, stats.p50_ms <= stats.p99_ms, stats.blocks
        (True, True, 1)
        >>> measure_latency(lambda: None, target_rel_ci=0)
        Traceback (most recent call last):
        ...
        ValueError: target_rel_ci must lie in (0, 1), got 0
    """
    floor = check_latency_arguments(target_rel_ci, min_iters, max_iters, min_seconds, max_seconds,
                                    warmup_max_iters, warmup_max_seconds, warmup_tolerance, timer,
                                    required_quantiles, blocks, block_gap_s, max_extension,
                                    precision)
    timed: Callable[[], float] = cuda_timed(fn) if timer == "cuda" else host_timed(fn, sync)
    tap = RuntimeClockTap(timed, runtime_clock) if runtime_clock and timer == "host" else None
    if tap is not None:
        timed = tap
    overhead = timer_overhead_ns() if timer == "host" else float("nan")
    first_call_ms = timed()
    share = BlockShare.of_run(floor=floor, blocks=blocks, max_iters=max_iters,
                              min_seconds=min_seconds, max_seconds=max_seconds,
                              target_rel_ci=target_rel_ci, required_quantiles=required_quantiles,
                              max_extension=max_extension)
    # Set up (its cost measured) before the window opens, where only calls of ``fn`` should run.
    check: StoppingCheck | None = StoppingCheck(share.target_rel_ci, share.min_iters,
                                                share.required_quantiles, blocks, precision)
    samples: list[float] = []
    sizes: list[int] = []
    warm_iters, warm_seconds, check_seconds, timed_seconds, window_calls = 0, 0.0, 0.0, 0.0, 0
    extended = False
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
            share = share.with_calls(len(samples))
            check = None
        if tap is not None:
            tap.recording = True
        taken, seconds, checking, past_cap = _timed_block(timed, share, check)
        if tap is not None:
            tap.recording = False
        extended = extended or past_cap
        samples.extend(taken)
        sizes.append(len(taken))
        timed_seconds += seconds
        check_seconds += checking
    if len(sizes) > 1 and share.required_quantiles:
        if tap is not None:
            tap.recording = True
        added, seconds = _top_up(timed, samples, sizes, share.required_quantiles,
                                 share.ceiling_seconds, max_iters - len(samples))
        extended = extended or added > 0
        timed_seconds += seconds
    if tap is not None:
        tap.recording = False
    window_calls += len(samples)
    if on_window is not None:
        on_window(False)
    stats = summarize(samples, seconds=timed_seconds, target_rel_ci=target_rel_ci,
                     warmup_iters=warm_iters, warmup_seconds=warm_seconds,
                     first_call_ms=first_call_ms, timer_overhead_ns=overhead,
                     check_seconds=check_seconds, min_samples=floor,
                     required_quantiles=required_quantiles, block_sizes=sizes,
                     window_calls=window_calls, run_to_run=run_to_run, extended=extended)
    if tap is None:
        return stats
    return replace(stats, runtime_p50_ms=tap.runtime_p50_ms(),
                   runtime_overhead_us=tap.overhead_us())


def _top_up(timed: Callable[[], float], samples: list[float], sizes: list[int],
            quantiles: Sequence[float], ceiling_seconds: float,
            calls_left: int) -> tuple[int, float]:
    """Time more calls into the last block while the pooled run lacks a required interval, up to
    one block's ceiling: the pooled run's correlation is known only once every block is in, and
    a burst of slow calls in a later block can leave it short of a floor that the first block's
    projection met. Extends ``samples`` and ``sizes[-1]`` in place; the calls added and their
    seconds."""
    start = time.perf_counter()
    added = 0
    step = max(10, len(samples) // 10)
    while added < calls_left and any(
            run_quantile_ci(np.asarray(samples), quantile, sizes) is None
            for quantile in {0.5, *quantiles}):
        if time.perf_counter() - start >= ceiling_seconds:
            break
        for _ in range(min(step, calls_left - added)):
            samples.append(timed())
            added += 1
            sizes[-1] += 1
    return added, time.perf_counter() - start


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


def _timed_block(timed: Callable[[], float], share: BlockShare,
                 check: StoppingCheck | None) -> tuple[list[float], float, float, bool]:
    """Time calls until the block is done (``check``: floors, target and precision; without one,
    until its call count) or a cap is reached; past ``max_seconds`` only the floors are awaited,
    up to the ceiling. Its samples, its seconds, the seconds its checks took, and whether it
    went past ``max_seconds`` to reach its floors."""
    samples: list[float] = []
    extended = False
    start = time.perf_counter()
    while True:
        samples.append(timed())
        n = len(samples)
        elapsed = time.perf_counter() - start
        if n >= share.max_iters or elapsed >= share.ceiling_seconds:
            break
        if check is None:  # a later block: until its share of calls, or the ceiling
            continue
        if elapsed >= share.max_seconds:
            # At the cap, asked at once; past it, as checks fall due.
            if (not extended or check.due(n, elapsed)) and check.floors_met(samples):
                break
            extended = True
        elif (elapsed >= share.min_seconds and check.due(n, elapsed)
                and check.passes(samples)):
            break
    return samples, time.perf_counter() - start, 0.0 if check is None else check.seconds, extended
