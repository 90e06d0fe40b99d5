"""The statistics of a duel, on constructed blocks: paired ratios, their intervals, the verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dse.measure.duel_stats import (
    A_FASTER,
    B_FASTER,
    TIE,
    PairedRatio,
    calls_for_tail,
    median_ratio,
    quantile_ratio,
    tail_groups,
    trimmed_t_interval,
    verdict,
    within,
)


def _blocks(rounds: int, calls: int, scale: float, drift: float = 0.0,
            seed: int = 0) -> tuple[list[list[float]], list[list[float]]]:
    """Rounds of a block of A and a block of B: B is A times ``scale``; each round's machine
    runs ``drift`` slower per round than the one before (both blocks alike), plus 1% noise."""
    rng = np.random.default_rng(seed)
    a, b = [], []
    for i in range(rounds):
        moment = 1.0 + drift * i
        a.append(list(moment * (1.0 + 0.01 * rng.standard_normal(calls))))
        b.append(list(moment * scale * (1.0 + 0.01 * rng.standard_normal(calls))))
    return a, b


def test_the_verdict_reads_the_interval_against_one_and_the_margin() -> None:
    assert verdict(PairedRatio(0.9, 0.85, 0.95)) == A_FASTER
    assert verdict(PairedRatio(1.1, 1.05, 1.2)) == B_FASTER
    assert verdict(PairedRatio(1.0, 0.97, 1.02)) == TIE
    # B 0.5% slower, shown for sure, but within the 1% two sessions of one model differ by.
    shown = PairedRatio(1.005, 1.003, 1.007)
    assert verdict(shown) == B_FASTER and verdict(shown, 0.01) == TIE
    assert within(shown, 0.01) and not within(PairedRatio(1.0, 0.97, 1.02), 0.01)
    assert verdict(PairedRatio(1.02, 1.015, 1.025), 0.01) == B_FASTER


def test_a_paired_median_ratio_holds_the_truth_and_decides_it() -> None:
    a, b = _blocks(rounds=12, calls=50, scale=1.03)
    found = median_ratio(a, b)
    assert found is not None
    assert found.low <= 1 / 1.03 <= found.high
    assert verdict(found) == A_FASTER  # A's latency is the lower one


def test_drift_shared_by_both_blocks_of_a_round_cancels() -> None:
    # The machine slows by 40% over the duel, far more than the 2% between the candidates;
    # the rounds' own ratios stay 2% apart, and so does the estimate.
    a, b = _blocks(rounds=12, calls=50, scale=1.02, drift=0.04)
    found = median_ratio(a, b)
    assert found is not None and verdict(found) == A_FASTER
    assert abs(found.ratio - 1 / 1.02) < 0.005
    # Two separate runs, A's early and B's late, would have found A faster by a fifth.
    separate = np.median(np.concatenate(a[:6])) / np.median(np.concatenate(b[6:]))
    assert separate < 0.85


def test_equal_candidates_tie() -> None:
    a, b = _blocks(rounds=10, calls=50, scale=1.0, seed=3)
    found = median_ratio(a, b)
    assert found is not None and verdict(found) == TIE
    assert found.low < 1 < found.high


def test_one_round_hit_by_other_work_is_trimmed_away() -> None:
    a, b = _blocks(rounds=10, calls=50, scale=1.03)
    a[4] = [3.0 * x for x in a[4]]  # a burst of other work slowed A's block of round 4 only
    found = median_ratio(a, b)
    assert found is not None and verdict(found) == A_FASTER
    assert abs(found.ratio - 1 / 1.03) < 0.01


def test_too_few_rounds_give_no_ratio() -> None:
    a, b = _blocks(rounds=2, calls=50, scale=1.5)
    assert median_ratio(a, b) is None
    assert quantile_ratio(a, b, 0.99) is None


def test_the_trimmed_interval_is_the_t_interval_without_trimming() -> None:
    from scipy.stats import t

    values = np.array([0.1, 0.3, 0.2, 0.5, 0.4])
    centre, half = trimmed_t_interval(values, 0.0, 0.95)
    assert centre == pytest.approx(0.3)
    assert half == pytest.approx(t.ppf(0.975, 4) * values.std(ddof=1) / math.sqrt(5))
    # With 20% trimmed from each end of ten values, two on each side are set aside.
    ten = np.array([0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 50.0, 80.0])
    assert trimmed_t_interval(ten, 0.2, 0.95)[0] == pytest.approx(1.0)


def test_tail_groups_hold_enough_calls_of_each_side() -> None:
    assert calls_for_tail(0.99) == 200
    assert calls_for_tail(0.9) == 20
    groups = tail_groups([60] * 10, [90] * 10, 0.99)
    assert groups == [(0, 4), (4, 10)]  # four rounds of A reach 200 calls; the rest join the last
    assert tail_groups([10] * 5, [10] * 5, 0.99) == []


def test_a_tail_ratio_orders_tails_that_differ() -> None:
    rng = np.random.default_rng(1)
    a, b = [], []
    for _ in range(24):
        base = 1.0 + 0.01 * rng.standard_normal(100)
        tail = rng.random(100) < 0.02
        a.append(list(np.where(tail, 2.0, base)))  # A's slowest calls take twice as long
        b.append(list(np.where(tail, 1.5, base)))  # B's one and a half times
    found = quantile_ratio(a, b, 0.99)
    assert found is not None
    assert verdict(found) == B_FASTER
    assert found.low <= 2.0 / 1.5 <= found.high + 0.2
    with pytest.raises(ValueError, match="pair up"):
        quantile_ratio(a, b[:-1], 0.99)
