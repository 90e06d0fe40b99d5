"""Where a custom evaluator's calls run, so that none of them can stop the campaign.

An evaluator is user code: it may hang, call ``sys.exit``, raise ``KeyboardInterrupt`` or kill its
process. Each call's fate becomes an :class:`Outcome`, which the search records as the trial's
result. Three runners, chosen per evaluator by ``dse.search.evaluators``:

- :class:`ProcessRunner`, for a function its module and name find again (``evaluator:
  module:function``, or such a function handed to ``run_campaign``): one long-lived worker
  process (a fresh Python running :func:`main`) imports it and takes calls one at a time.
  A call past its deadline gets the worker killed; a fresh one takes the next call. The module is
  imported afresh there: what the driver set on it at run time is not seen, and what the function
  records there is not seen by the driver.
- :class:`ThreadRunner`, for any other callable (a closure, a lambda, a bound method, a function
  of ``__main__``): each call runs in a daemon thread of the driver, so it shares the caller's
  state. A thread cannot be stopped: a call past its deadline is abandoned — its trial fails, the
  campaign goes on, and the thread runs on until the call returns or the driver exits.
- :class:`InlineRunner`, for dse's own replay tables: a lookup in the caller's thread (it cannot
  hang, and a campaign replays hundreds of rows).

Ctrl-C belongs to the driver: it interrupts the wait for a call (the worker process ignores
SIGINT and is stopped by the driver), while a ``KeyboardInterrupt`` or ``SystemExit`` raised by
the evaluator itself fails only its trial.
"""

from __future__ import annotations

import importlib
import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from dse.candidate import Candidate

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

# How long a worker process may take to start and import its evaluator (a module that loads a
# large predictor may take a while); not part of any trial's timeout.
START_TIMEOUT_S = 120.0

# Raised by the evaluator itself, never by a Ctrl-C, away from the driver's main thread: Python
# delivers signals to the main thread only, and the worker process ignores SIGINT.
_USER_STOPS: tuple[type[BaseException], ...] = (SystemExit, KeyboardInterrupt)


class InfeasibleCandidate(Exception):
    """Raised by an evaluator for a candidate that cannot exist (a replay table has no row for
    it): the trial is recorded ``infeasible`` with the message, and the campaign goes on."""


@dataclass(frozen=True)
class Outcome:
    """What one evaluator call came to.

    ``kind``: ``returned`` (``result`` is what it returned, ``seconds`` how long the call took),
    ``infeasible`` (``error`` is the :class:`InfeasibleCandidate` message) or ``failed``
    (``error`` says why, worded to follow "evaluator <name> ": "raised ValueError: ...").
    """

    kind: Literal["returned", "infeasible", "failed"]
    result: object = None
    error: str = ""
    seconds: float = 0.0


def call_outcome(function: Callable[[Candidate], object], candidate: Candidate,
                 contain: tuple[type[BaseException], ...] = _USER_STOPS) -> Outcome:
    """Call ``function(candidate)``; whatever it returns or raises, as an Outcome.

    ``contain``: the exceptions beyond ``Exception`` that fail the call rather than propagate.
    Off the driver's main thread they can only come from the evaluator; in the main thread a
    KeyboardInterrupt may be the user's Ctrl-C, which must stop the run (pass ``()``).
    """
    started = time.perf_counter()
    try:
        result = function(candidate)
    except InfeasibleCandidate as exc:
        return Outcome("infeasible", error=str(exc))
    except Exception as exc:  # the house failure policy: a candidate's failure is a result
        return Outcome("failed", error=f"raised {type(exc).__name__}: {exc}")
    except contain as exc:
        return Outcome("failed", error=_stop_reason(exc))
    return Outcome("returned", result=result, seconds=time.perf_counter() - started)


def _stop_reason(exc: BaseException) -> str:
    detail = f" (exit code {exc.code!r})" if isinstance(exc, SystemExit) else ""
    return (f"raised {type(exc).__name__}{detail}: an evaluator cannot stop the campaign, so "
            f"only this trial fails")


def _timed_out(timeout_s: float, what_then: str) -> Outcome:
    return Outcome("failed", error=f"timed out after {timeout_s:g} s (budget.trial_timeout_s); "
                                   f"{what_then}")


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
    call costs ten times the hand-over); a call past its deadline is abandoned with its thread.

    ``abandoned`` counts the calls left running: their threads leak until the calls return.
    """

    where = "driver thread"

    def __init__(self, function: Callable[[Candidate], object]) -> None:
        self.function = function
        self.abandoned = 0
        self._thread: _CallThread | None = None

    def call(self, candidate: Candidate, timeout_s: float | None) -> Outcome:
        if self._thread is None:
            self._thread = _CallThread(self.function)
        thread = self._thread
        thread.requests.put(candidate)
        try:
            return thread.outcomes.get(timeout=timeout_s)
        except queue.Empty:
            self.abandoned += 1
            self.close()
            return _timed_out(timeout_s or 0.0, "it runs in a thread of dse, which cannot be "
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


def importable_reference(function: object) -> str | None:
    """``module:qualname`` when importing that finds ``function`` itself, else None (a closure,
    a lambda, a bound method, a callable object, anything of ``__main__``)."""
    module_name = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        return None
    # The driver's __main__ is another module in a worker process; "<locals>", "<lambda>" are
    # not reachable by attribute.
    if module_name == "__main__" or "<" in qualname:
        return None
    module = sys.modules.get(module_name)
    try:
        found = _resolve(module, qualname) if module is not None else None
    except AttributeError:
        return None
    return f"{module_name}:{qualname}" if found is function else None


def _resolve(owner: object, qualname: str) -> object:
    for part in qualname.split("."):
        owner = getattr(owner, part)
    return owner


def load_reference(reference: str) -> Callable[[Candidate], object]:
    """The callable ``module:qualname`` names (as :func:`importable_reference` wrote it)."""
    module_name, _, qualname = reference.partition(":")
    function = _resolve(importlib.import_module(module_name), qualname)
    if not callable(function):
        raise TypeError(f"{reference} is a {type(function).__name__}, not a function")
    return function


# -- the worker process ----------------------------------------------------------------------------

class ProcessRunner:
    """Calls in a long-lived worker process that imports ``reference`` (``module:qualname``);
    the worker is killed when a call passes its deadline, and replaced for the next call."""

    where = "worker process"

    def __init__(self, reference: str, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.reference = reference
        self.start_timeout_s = start_timeout_s
        self._worker: _Worker | None = None
        self.started = 0  # worker processes started so far

    def call(self, candidate: Candidate, timeout_s: float | None) -> Outcome:
        if self._worker is None:
            worker = _Worker(self.reference)
            self.started += 1
            problem = worker.wait_ready(self.start_timeout_s)
            if problem:
                worker.stop()
                return Outcome("failed", error=problem)
            self._worker = worker
        worker = self._worker
        try:
            outcome = worker.call(candidate, timeout_s)
        except BaseException:
            # Interrupted (Ctrl-C) mid-call: the worker still runs the call, and its answer
            # would be taken for the next one's.
            self.close()
            raise
        if outcome is None:
            self.close()
            return _timed_out(timeout_s or 0.0, "its worker process was killed; a fresh one "
                                                "takes the next trial")
        if worker.process.poll() is not None:
            self.close()  # it died: the next call starts a fresh one
        return outcome

    def close(self) -> None:
        """Stop the worker process, if one runs."""
        if self._worker is not None:
            self._worker.stop()
            self._worker = None


def _kill(process: subprocess.Popen[bytes], channel: Connection, lifeline: int) -> None:
    channel.close()
    os.close(lifeline)
    if process.poll() is None:
        process.kill()
    process.wait()


class _Worker:
    """One worker process and the driver's ends of its two pipes: ``channel`` carries calls and
    outcomes; ``lifeline`` is never written, so the worker sees it close when the driver dies."""

    def __init__(self, reference: str) -> None:
        mine, theirs = socket.socketpair()
        lifeline_read, self.lifeline = os.pipe()
        # Not `-m`: that would load this module a second time as __main__, with an
        # InfeasibleCandidate class other than the one evaluators raise.
        command = [sys.executable, "-c", _BOOT, str(theirs.fileno()), str(lifeline_read)]
        try:
            # stdout and stderr are the driver's, so the evaluator's prints show as before.
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                            pass_fds=(theirs.fileno(), lifeline_read))
        except OSError:
            mine.close()
            os.close(self.lifeline)
            raise
        finally:
            theirs.close()
            os.close(lifeline_read)
        self.channel = Connection(mine.detach())
        # The worker goes with this object, or at the driver's exit, even if nobody calls stop.
        self.stop = weakref.finalize(self, _kill, self.process, self.channel, self.lifeline)
        # The module is found where the driver finds it.
        self.channel.send((list(sys.path), reference))

    def wait_ready(self, timeout_s: float) -> str:
        """Empty once the worker has imported its evaluator, else why it did not."""
        if not self.channel.poll(timeout_s):
            return f"did not start in its worker process within {timeout_s:g} s"
        try:
            problem: str = self.channel.recv()
        except (EOFError, OSError):
            return f"did not start: its worker process ended ({self._ended()})"
        return problem and f"cannot be loaded in its worker process: {problem}"

    def _ended(self) -> str:
        """How the worker ended, once its end of the channel has closed."""
        try:
            return f"exit code {self.process.wait(timeout=5.0)}"
        except subprocess.TimeoutExpired:  # it closed the channel but lives on
            self.stop()
            return "it closed its channel to dse and was killed"

    def call(self, candidate: Candidate, timeout_s: float | None) -> Outcome | None:
        """The call's outcome; None when it ran past ``timeout_s``."""
        self.channel.send(candidate)
        if not self.channel.poll(timeout_s):
            return None
        try:
            data = self.channel.recv_bytes()
        except (EOFError, OSError):
            return Outcome("failed", error=f"ended its worker process ({self._ended()}); a "
                                           f"fresh one takes the next trial")
        try:
            outcome: Outcome = pickle.loads(data)
        except Exception as exc:  # unpickling runs the classes' own code, which may raise anything
            return Outcome("failed", error=f"returned a result dse cannot read back from its "
                                           f"worker process: {type(exc).__name__}: {exc}")
        return outcome


def _serve(channel: Connection) -> None:
    """The worker's life: import the evaluator, then answer calls until the driver hangs up."""
    try:
        path, reference = channel.recv()
    except EOFError:  # the driver went before it asked anything
        return
    sys.path[:] = path
    try:
        function = load_reference(reference)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # its import may end the process
        channel.send(f"{type(exc).__name__}: {exc}")
        return
    channel.send("")
    while True:
        try:
            candidate = channel.recv()
        except EOFError:
            return
        channel.send_bytes(_pickled(call_outcome(function, candidate)))


def _pickled(outcome: Outcome) -> bytes:
    if isinstance(outcome.result, Mapping):
        # A plain dict travels wherever the mapping's class would not.
        outcome = Outcome(outcome.kind, dict(outcome.result), outcome.error, outcome.seconds)
    try:
        return pickle.dumps(outcome)
    except Exception as exc:  # pickling runs the result's own code, which may raise anything
        return pickle.dumps(Outcome("failed", error=f"returned a {type(outcome.result).__name__} "
                                                    f"that cannot leave its worker process: "
                                                    f"{type(exc).__name__}: {exc}"))


def _exit_with_driver(lifeline: int) -> None:
    """End this worker when the driver is gone, even while a call hangs (nothing is written to
    the lifeline, so the read returns only when the driver's end closes)."""
    os.read(lifeline, 1)
    os._exit(1)


_BOOT = "from dse.search.evaluator_runner import main; main()"


def main(argv: list[str] | None = None) -> None:
    """The worker process: ``python -c _BOOT CHANNEL_FD LIFELINE_FD``."""
    channel_fd, lifeline = (int(arg) for arg in (argv if argv is not None else sys.argv[1:]))
    # Ctrl-C in the terminal reaches the whole process group; the driver handles it and stops
    # this worker itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_driver, args=(lifeline,), daemon=True).start()
    _serve(Connection(channel_fd))

