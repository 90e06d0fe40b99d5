"""A run short of its sample floor at ``max_seconds`` goes on, up to its ceiling, instead of
giving the objective up: what a slower machine needs. Real timed functions, counted calls."""

from __future__ import annotations

import math
import time

from dse.measure import measure_latency
from dse.measure.stats import samples_for_ci


def _spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def test_a_run_short_of_its_p99_floor_goes_on_until_it_has_it() -> None:
    """2 ms calls: 0.2 s holds at most 100 of them, far below the 368 a p99 interval needs; the
    ceiling (20 x 0.2 s) holds 2,000."""
    stats = measure_latency(lambda: _spin(2.0), min_iters=10, min_seconds=0.0, max_seconds=0.2,
                            warmup_max_seconds=0.02, required_quantiles=(0.5, 0.99),
                            target_rel_ci=0.5, max_extension=20.0)
    assert stats.extended and not stats.underpowered
    assert stats.n >= samples_for_ci(0.99) and stats.p99_ci_ms is not None


def test_without_extension_the_same_run_is_underpowered() -> None:
    stats = measure_latency(lambda: _spin(2.0), min_iters=10, min_seconds=0.0, max_seconds=0.2,
                            warmup_max_seconds=0.02, required_quantiles=(0.5, 0.99),
                            target_rel_ci=0.5, max_extension=1.0)
    assert not stats.extended and stats.underpowered
    assert stats.n <= 101 and stats.p99_ci_ms is None


def test_the_ceiling_bounds_the_extension_by_one_call() -> None:
    """5 ms calls, a ceiling of 3 x 0.1 s: at most 61 calls (each takes at least 5 ms), so the
    floor of 368 is never reached, and the run says so instead of running on."""
    calls = [0]

    def work() -> None:
        calls[0] += 1
        _spin(5.0)

    stats = measure_latency(work, min_iters=10, min_seconds=0.0, max_seconds=0.1,
                            warmup_max_seconds=0.0, required_quantiles=(0.5, 0.99),
                            max_extension=3.0)
    assert stats.extended and stats.underpowered
    assert stats.n <= math.ceil(0.3 / 0.005) + 1
    assert calls[0] == 1 + stats.warmup_iters + stats.n


def test_later_blocks_match_an_extended_first_block() -> None:
    """Three blocks: the first extended to reach its share of the floor; the later ones take
    as many calls as it did (they may run to the ceiling too), so the blocks weigh equally —
    except that the last goes on where the pooled run still lacks an interval (a burst of slow
    calls in a later block raised its correlation: the top-up)."""
    stats = measure_latency(lambda: _spin(2.0), min_iters=10, min_seconds=0.0, max_seconds=0.3,
                            warmup_max_seconds=0.02, required_quantiles=(0.5, 0.99),
                            target_rel_ci=0.5, blocks=3, max_extension=20.0)
    assert stats.extended
    first = stats.block_sizes[0]
    assert stats.block_sizes[:2] == [first] * 2
    assert stats.block_sizes[2] == first or (stats.block_sizes[2] > first
                                             and stats.p99_ci_ms is not None)
    # The first block of three stops once the pooled run would hold 1.25 x the floor (460
    # calls; more where its calls are correlated).
    assert 3 * first >= 1.25 * samples_for_ci(0.99)


def test_a_run_that_meets_its_floor_in_time_is_not_extended() -> None:
    stats = measure_latency(lambda: None, min_iters=10, min_seconds=0.0, max_seconds=1.0,
                            warmup_max_seconds=0.01, required_quantiles=(0.5, 0.99),
                            target_rel_ci=0.5)
    assert not stats.extended and not stats.underpowered
