"""Ctrl-C is never lost: a SIGINT whose KeyboardInterrupt Python swallows (raised inside a
finaliser, as happened when it landed in SQLAlchemy's weakref callback mid-campaign) is still seen
by the search loop on its next turn."""

from __future__ import annotations

import os
import signal

import pytest

from dse.search.interrupts import StickyInterrupt


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
