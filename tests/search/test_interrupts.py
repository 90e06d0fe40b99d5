"""Ctrl-C is never lost: a SIGINT whose KeyboardInterrupt Python swallows (raised inside a
finaliser, as happened when it landed in SQLAlchemy's weakref callback mid-campaign) is still seen
by the search loop on its next turn."""

from __future__ import annotations

import os
import signal

import pytest

from dse.search.interrupts import StickyInterrupt, interrupt_remembered, wait_until


class _InterruptedInFinaliser:
    def __del__(self) -> None:
        # The handler runs here, inside the finaliser: its KeyboardInterrupt is printed as
        # "Exception ignored in ..." and dropped.
        os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_interrupt_a_finaliser_swallowed_is_raised_on_the_next_check() -> None:
    with StickyInterrupt() as interrupts:
        interrupts.check()  # nothing yet
        _InterruptedInFinaliser()  # dropped at once: __del__ runs now
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_the_caller_installed_is_left_alone() -> None:
    def mine(signum: int, frame: object) -> None:
        return None

    previous = signal.signal(signal.SIGINT, mine)
    try:
        with StickyInterrupt():
            assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_wait_raises_an_interrupt_a_finaliser_swallowed() -> None:
    turns = []

    def never_ready(seconds: float) -> bool:
        turns.append(seconds)
        if len(turns) == 1:
            _InterruptedInFinaliser()
        return False

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with interrupt_remembered() as interrupted, pytest.raises(KeyboardInterrupt):
            # Without the remembered interrupt this waits out its minute and returns False.
            wait_until(never_ready, 60.0, interrupted)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(turns) == 1
    assert signal.getsignal(signal.SIGINT) is previous


def test_a_wait_without_an_interrupt_ends_at_its_deadline_or_when_ready() -> None:
    with interrupt_remembered() as interrupted:
        assert not wait_until(lambda seconds: False, 0.05, interrupted)
        answers = iter([False, False, True])
        assert wait_until(lambda seconds: next(answers), None, interrupted)


def test_a_handler_that_does_not_raise_keeps_its_say_during_a_wait() -> None:
    calls = []

    def mine(signum: int, frame: object) -> None:
        calls.append(signum)

    previous = signal.signal(signal.SIGINT, mine)
    try:
        with interrupt_remembered() as interrupted:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):  # bytecode for the handler to run at
                pass
            assert calls == [signal.SIGINT]
            assert not interrupted()
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, previous)
