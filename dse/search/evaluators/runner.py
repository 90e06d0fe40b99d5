"""Where a custom evaluator's calls run, so that none of them can stop the campaign.

An evaluator is user code: it may hang, call ``sys.exit``, raise ``KeyboardInterrupt`` or kill its
process. Each call's fate becomes an :class:`Outcome`, which the search records as the trial's
result. Three runners, chosen per evaluator by ``dse.search.evaluators.dispatchers``:

- :class:`ProcessRunner`, for a function its module and name find again (``evaluator:
  module:function``, or such a function handed to ``run_campaign``): one long-lived worker
  process (a fresh Python running :func:`dse.search.evaluators.worker.main`) imports it and
  takes calls one at a time.
  A call past its deadline gets the worker killed; a fresh one takes the next call. The module is
  imported afresh there: what the driver set on it at run time is not seen, and what the function
  records there is not seen by the driver.
- :class:`ThreadRunner`, for any other callable (a closure, a lambda, a bound method, a function
  of ``__main__``): each call runs in a daemon thread of the driver, so it shares the caller's
  state. A thread cannot be stopped: a call past its deadline is abandoned — its trial fails, the
  campaign goes on, and the thread runs on until the call returns or the driver exits.
- :class:`InlineRunner`, for dse's own replay tables: a lookup in the caller's thread (it cannot
  hang, and a campaign replays hundreds of rows).

Each call's fate and the ``module:qualname`` references are :mod:`dse.search.evaluators.calls`;
the worker process is :mod:`dse.search.evaluators.worker`. This module holds the runners' protocol
and the two that run in the driver.

Ctrl-C belongs to the driver: it interrupts the wait for a call (the worker process ignores
SIGINT and is stopped by the driver), while a ``KeyboardInterrupt`` or ``SystemExit`` raised by
the evaluator itself fails only its trial.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from dse.search.evaluators.calls import (
    InfeasibleCandidate,
    Outcome,
    call_outcome,
    importable_reference,
    timed_out,
)
from dse.search.evaluators.worker import ProcessRunner
from dse.search.interrupts import interrupt_remembered, wait_until

if TYPE_CHECKING:
    from dse.core import Candidate

# The names the evaluators (and their users) take from here, wherever they are defined.
__all__ = [
    "InfeasibleCandidate",
    "InlineRunner",
    "Outcome",
    "ProcessRunner",
    "Runner",
    "ThreadRunner",
    "call_outcome",
    "importable_reference",
]


class Runner(Protocol):
    """Runs one evaluator's calls, one at a time, from the driver's thread.

    ``call`` returns the call's Outcome, a ``failed`` one when it ran past ``timeout_s`` seconds
    (None: no deadline); it raises only what interrupts the caller (Ctrl-C). ``close`` releases
    what the runner holds (a worker process); a later ``call`` starts afresh. ``where`` names
    where calls run, for the trial's provenance.
    """

    where: str

    def call(self, candidate: Candidate, timeout_s: float | None) -> Outcome: ...

    def close(self) -> None: ...


class InlineRunner:
    """Calls in the caller's thread, with no deadline: for dse's replay tables only."""

    where = "driver"

    def __init__(self, function: Callable[[Candidate], object]) -> None:
        self.function = function

    def call(self, candidate: Candidate, timeout_s: float | None) -> Outcome:
        return call_outcome(self.function, candidate, contain=())

    def close(self) -> None:
        """Nothing held."""


class ThreadRunner:
    """Calls in a daemon thread of the driver, kept for the next call (starting a thread per
    call costs ten times the hand-over); a call past its deadline is abandoned with its thread,
    which leaks until the call returns.
    """

    where = "driver thread"

    def __init__(self, function: Callable[[Candidate], object]) -> None:
        self.function = function
        self._thread: _CallThread | None = None

    def call(self, candidate: Candidate, timeout_s: float | None) -> Outcome:
        if self._thread is None:
            self._thread = _CallThread(self.function)
        thread = self._thread
        answers: list[Outcome] = []

        def answered(seconds: float) -> bool:
            try:
                answers.append(thread.outcomes.get(timeout=seconds))
            except queue.Empty:
                return False
            return True

        try:
            with interrupt_remembered() as interrupted:
                thread.requests.put(candidate)
                if wait_until(answered, timeout_s, interrupted):
                    return answers[0]
            self.close()
            return timed_out(timeout_s or 0.0, "it runs in a thread of dse, which cannot be "
                             "stopped, so the call was abandoned and runs on (give the "
                             "evaluator as an importable module:function to have it stopped)")
        except BaseException:
            # Interrupted (Ctrl-C) mid-call: the call's answer would be taken for the next one's.
            self.close()
            raise

    def close(self) -> None:
        """Let the thread end once its call (if any) returns; a later call starts another."""
        if self._thread is not None:
            self._thread.requests.put(None)
            self._thread = None


class _CallThread:
    """A daemon thread calling ``function`` on each candidate put in ``requests`` (None ends
    it), answering in ``outcomes``."""

    def __init__(self, function: Callable[[Candidate], object]) -> None:
        self.function = function
        self.requests: queue.SimpleQueue[Candidate | None] = queue.SimpleQueue()
        self.outcomes: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="dse-evaluator", daemon=True).start()

    def _serve(self) -> None:
        while (candidate := self.requests.get()) is not None:
            self.outcomes.put(call_outcome(self.function, candidate))
