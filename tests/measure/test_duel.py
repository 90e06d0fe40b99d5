"""A duel of two real calls whose order is known: the alternating protocol, its window, its
stopping, and its arguments."""

from __future__ import annotations

import pytest

from dse.measure.duel import run_duel
from dse.measure.duel_stats import A_FASTER, B_FASTER


def _work(n: int) -> object:
    return sum(i * i for i in range(n))


def test_the_call_with_more_work_is_found_slower_on_every_percentile() -> None:
    marks: list[bool] = []
    calls = {"a": 0, "b": 0}

    def light() -> object:
        calls["a"] += 1
        return _work(300)

    def heavy() -> object:  # three times the work: no machine state hides that
        calls["b"] += 1
        return _work(900)

    run = run_duel(light, heavy, quantiles=(0.5, 0.9), max_seconds=3.0, block_seconds=0.01,
                   min_rounds=6, on_window=marks.append)
    assert run.verdicts() == {0.5: A_FASTER, 0.9: A_FASTER}
    median = run.ratios[0.5]
    assert median is not None and median.low <= median.ratio <= median.high < 1
    # The window wraps the rounds once; both sides were called alike, block for block.
    assert marks == [True, False]
    assert run.rounds >= 6 and len(run.a_block_p50_ms) == len(run.b_block_p50_ms) == run.rounds
    assert calls["a"] > run.rounds * run.block_calls[0] and calls["b"] > run.rounds * run.block_calls[1]


def test_the_order_of_the_arguments_does_not_matter() -> None:
    run = run_duel(lambda: _work(900), lambda: _work(300), max_seconds=3.0, block_seconds=0.01)
    assert run.verdicts()[0.5] == B_FASTER
    assert run.ratios[0.5] is not None and run.ratios[0.5].ratio > 1


def test_a_decided_duel_stops_before_its_time_is_up() -> None:
    run = run_duel(lambda: _work(100), lambda: _work(2000), max_seconds=600.0,
                   block_seconds=0.005, min_rounds=4)
    assert run.stopped_early and run.rounds >= 4


def test_the_same_call_twice_is_shown_equal_within_the_margin_and_stops() -> None:
    work = _work
    run = run_duel(lambda: work(400), lambda: work(400), max_seconds=600.0, block_seconds=0.005,
                   min_rounds=6, margin=0.5)  # a margin no two equal calls can miss
    assert run.stopped_early and run.verdicts() == {0.5: "tie"}


def test_a_tail_percentile_of_too_few_calls_has_no_ratio() -> None:
    # p99 needs groups of 200 calls of each side; three-call blocks of three rounds hold nine.
    run = run_duel(lambda: _work(100), lambda: _work(200), quantiles=(0.5, 0.99),
                   max_seconds=1e-9, block_seconds=1e-9, min_rounds=3)
    assert run.rounds == 3 and run.block_calls == (3, 3)
    assert run.ratios[0.99] is None and run.verdicts()[0.99] == "tie"


@pytest.mark.parametrize(("arguments", "message"), [
    ({"quantiles": ()}, "quantiles must be"),
    ({"quantiles": (1.0,)}, "quantiles must be"),
    ({"max_seconds": 0.0}, "must be > 0"),
    ({"min_rounds": 2}, "min_rounds must be at least 3"),
])
def test_bad_arguments_are_refused(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        run_duel(lambda: None, lambda: None, **arguments)  # type: ignore[arg-type]
