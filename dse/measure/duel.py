"""A duel: two calls timed in alternating short blocks, in one process at one moment, until the
order of their latency percentiles is decided or the time is up (statistics:
:mod:`dse.measure.duel_stats`).

The protocol:

1. each call once on its own (lazy initialisation), then both warmed up, alternately;
2. rounds of one block of each, back to back, the order alternating between rounds (A then B,
   then B then A: whatever the first block of a round does to the second — a cache the other
   left cold, a clock still rising — falls on each side equally often); every block starts once
   the process is idle (:func:`dse.measure.quiet.wait_until_quiet`: the other side's worker
   threads, still spinning after its block, would otherwise share the cores with this one — an
   ONNX Runtime pool of two threads spins about 50 ms, longer than a block), is warmed by
   untimed calls for about a quarter of its length (waking its own threads again) and times
   enough calls to last about ``block_seconds``;
3. at ``min_rounds`` rounds, and then each time the rounds have grown by half again, stop once
   every asked percentile's interval at :data:`LOOK_CONFIDENCE` lies wholly beyond ``margin``
   on one side of 1, or wholly within it (looking after every round, even at 99%, finds a
   difference between two equal candidates about one duel in seven over 150 rounds, in
   simulation; these fewer, stricter looks and the final one together, about one in fifteen);
   else go on until ``max_seconds`` of rounds have passed (and at least 3);
4. the final ratios and intervals at :data:`~dse.measure.duel_stats.CONFIDENCE`.

The caller holds the device (the node lock) and watches the window (``on_window``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dse.measure.duel_stats import (
    CONFIDENCE,
    TIE,
    PairedRatio,
    median_ratio,
    quantile_ratio,
    verdict,
    within,
)
from dse.measure.quiet import wait_until_quiet
from dse.measure.timers import Timer, cuda_timed, host_timed

#: The confidence at which a duel may stop before its time is up, and how much the rounds grow
#: between two looks.
LOOK_CONFIDENCE, LOOK_GROWTH = 0.995, 1.5
#: Fewest untimed calls at the start of every block, and the share of its timed calls they are
#: at least (its own threads asleep after the idle wait, the first calls wake them).
BLOCK_WARM_CALLS, BLOCK_WARM_SHARE = 2, 0.25
#: Fewest and most timed calls in a block.
MIN_BLOCK_CALLS, MAX_BLOCK_CALLS = 3, 2000
#: Share of ``max_seconds`` the warm-up may take, and its cap in seconds.
WARMUP_SHARE, WARMUP_MAX_S = 0.1, 1.0
#: Longest wait before a block for the process to go idle (the rest of the time it would take is
#: spent timing beside the spinning threads, as before the wait).
QUIET_MAX_S = 0.2


@dataclass(frozen=True)
class DuelRun:
    """What a duel measured: per asked quantile, A's percentile over B's with its interval
    (None where the calls were too few for one, as for a p99 of a few hundred calls); the
    rounds, the timed window's seconds, the warm-up's, each side's calls per block, and the
    blocks that started before the process was idle (:data:`QUIET_MAX_S` was not enough)."""

    ratios: dict[float, PairedRatio | None]
    margin: float
    rounds: int
    seconds: float
    warmup_seconds: float
    block_calls: tuple[int, int]
    stopped_early: bool
    a_block_p50_ms: list[float] = field(default_factory=list)
    b_block_p50_ms: list[float] = field(default_factory=list)
    blocks_not_quiet: int = 0

    def verdicts(self) -> dict[float, str]:
        """Per quantile: ``a_faster``, ``b_faster`` or ``tie`` (a tie where no interval), by
        :func:`~dse.measure.duel_stats.verdict` with the duel's ``margin``."""
        return {q: TIE if r is None else verdict(r, self.margin) for q, r in self.ratios.items()}


def run_duel(call_a: Callable[[], object], call_b: Callable[[], object], *,
             quantiles: Sequence[float] = (0.5,), max_seconds: float = 4.0,
             block_seconds: float = 0.02, min_rounds: int = 6, margin: float = 0.0,
             timer: Timer = "host",
             sync: Callable[[], object] | None = None,
             on_window: Callable[[bool], object] | None = None) -> DuelRun:
    """Time ``call_a`` and ``call_b`` against each other (the module's protocol) and return
    A's latency percentiles over B's, each with its interval.

    Args:
        call_a: One call of candidate A (one batch through its runner).
        call_b: One call of candidate B.
        quantiles: The percentiles to order (0.5: the median; 0.99: p99).
        max_seconds: The most seconds of rounds (warm-up comes on top, at most a tenth of it).
        block_seconds: About how long one block of timed calls lasts.
        min_rounds: Rounds before the duel may stop early (at least 3).
        margin: The relative difference a verdict must show beyond (see
            :func:`dse.measure.duel_stats.verdict`); the duel also stops early once every
            percentile is shown to lie within it.
        timer: ``"host"`` (the host clock) or ``"cuda"`` (CUDA events).
        sync: Called after each call inside the timed region (host timer only).
        on_window: Called with True right before the first timed round, False after the last.

    Returns:
        The duel's :class:`DuelRun`.

    Raises:
        ValueError: For an argument out of range.
        Exception: Whatever a call raises, unchanged.

    Examples:
        >>> from dse.measure.duel import run_duel
        >>> run = run_duel(lambda: sum(range(2000)), lambda: sum(range(200)), max_seconds=0.5,
        ...                block_seconds=0.005)
        >>> run.verdicts()[0.5], run.ratios[0.5].ratio > 1
        ('b_faster', True)
    """
    _check(quantiles, max_seconds, block_seconds, min_rounds)
    timed = [cuda_timed(call) if timer == "cuda" else host_timed(call, sync)
             for call in (call_a, call_b)]
    warm_start = time.perf_counter()
    for side in timed:  # lazy initialisation: never a sample
        side()
    typical = _warm_up(timed, min(WARMUP_MAX_S, WARMUP_SHARE * max_seconds))
    warmup_seconds = time.perf_counter() - warm_start
    sizes = tuple(int(np.clip(round(block_seconds * 1e3 / max(ms, 1e-6)), MIN_BLOCK_CALLS,
                              MAX_BLOCK_CALLS)) for ms in typical)
    blocks: tuple[list[list[float]], list[list[float]]] = ([], [])
    not_quiet = 0
    if on_window is not None:
        on_window(True)
    start = time.perf_counter()
    stopped_early = False
    look = min_rounds
    while True:
        order = (0, 1) if len(blocks[0]) % 2 == 0 else (1, 0)
        for turn in order:
            # Every block from the same state: the process idle, both sides' threads asleep.
            not_quiet += not wait_until_quiet(QUIET_MAX_S)
            blocks[turn].append(_block(timed[turn], sizes[turn]))
        rounds = len(blocks[0])
        if rounds >= look:
            if _decided(blocks, quantiles, margin):
                stopped_early = True
                break
            look = max(rounds + 1, math.ceil(rounds * LOOK_GROWTH))
        if time.perf_counter() - start >= max_seconds and rounds >= 3:
            break
    seconds = time.perf_counter() - start
    if on_window is not None:
        on_window(False)
    ratios = {q: _ratio(blocks, q, CONFIDENCE) for q in quantiles}
    return DuelRun(ratios, margin, len(blocks[0]), seconds, warmup_seconds, (sizes[0], sizes[1]),
                   stopped_early, [float(np.median(b)) for b in blocks[0]],
                   [float(np.median(b)) for b in blocks[1]], not_quiet)


def _check(quantiles: Sequence[float], max_seconds: float, block_seconds: float,
           min_rounds: int) -> None:
    if not quantiles or not all(0 < q < 1 for q in quantiles):
        raise ValueError(f"quantiles must be one or more values in (0, 1), got {list(quantiles)}")
    if not max_seconds > 0 or not block_seconds > 0:
        raise ValueError(f"max_seconds and block_seconds must be > 0, got {max_seconds}, "
                         f"{block_seconds}")
    if min_rounds < 3:
        raise ValueError(f"min_rounds must be at least 3, got {min_rounds}")


def _warm_up(timed: Sequence[Callable[[], float]], seconds: float) -> tuple[float, float]:
    """Call both sides alternately for ``seconds``, and at least :data:`MIN_BLOCK_CALLS` times
    each; each side's median warm call in ms, which sizes its blocks."""
    calls: tuple[list[float], list[float]] = ([], [])
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(calls[0]) < MIN_BLOCK_CALLS:
        for side in (0, 1):
            calls[side].append(timed[side]())
    return float(np.median(calls[0])), float(np.median(calls[1]))


def _block(timed: Callable[[], float], calls: int) -> list[float]:
    """One block: untimed calls (the other side's block may have left caches cold, and the idle
    wait this side's threads asleep), then ``calls`` timed ones."""
    for _ in range(max(BLOCK_WARM_CALLS, math.ceil(BLOCK_WARM_SHARE * calls))):
        timed()
    return [timed() for _ in range(calls)]


def _decided(blocks: tuple[list[list[float]], list[list[float]]], quantiles: Sequence[float],
             margin: float) -> bool:
    """Whether every asked percentile's interval at :data:`LOOK_CONFIDENCE` lies wholly beyond
    ``margin`` on one side, or wholly within it."""
    for q in sorted(quantiles):  # the median first: it decides soonest
        found = _ratio(blocks, q, LOOK_CONFIDENCE)
        if found is None or (verdict(found, margin) == TIE and not within(found, margin)):
            return False
    return True


def _ratio(blocks: tuple[list[list[float]], list[list[float]]], q: float,
           confidence: float) -> PairedRatio | None:
    if q == 0.5:
        return median_ratio(blocks[0], blocks[1], confidence)
    return quantile_ratio(blocks[0], blocks[1], q, confidence)
