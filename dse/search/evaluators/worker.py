"""The worker process that runs an importable evaluator's calls (:class:`ProcessRunner`): a fresh
Python that imports the function and answers one call at a time over a socket, killed when a call
passes its deadline or the driver dies, and replaced for the next call.

The worker ignores SIGINT: Ctrl-C belongs to the driver, which stops the worker itself.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from dse.search.evaluators.calls import Outcome, call_outcome, load_reference, timed_out
from dse.search.interrupts import interrupt_remembered, wait_until

if TYPE_CHECKING:
    from dse.core import Candidate

# How long a worker process may take to start and import its evaluator (a module that loads a
# large predictor may take a while); not part of any trial's timeout.
START_TIMEOUT_S = 120.0


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
            return timed_out(timeout_s or 0.0, "its worker process was killed; a fresh one "
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
        # Not `-m`: that would load this module a second time as __main__, beside the copy
        # that the evaluator's own imports of dse load.
        command = [sys.executable, "-c", _BOOT, str(theirs.fileno()), str(lifeline_read)]
        try:
            # stdout and stderr are the driver's, so the evaluator's prints show as in-process.
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
        with interrupt_remembered() as interrupted:
            self.channel.send(candidate)
            if not wait_until(self.channel.poll, timeout_s, interrupted):
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


_BOOT = "from dse.search.evaluators.worker import main; main()"


def main(argv: list[str] | None = None) -> None:
    """The worker process: ``python -c _BOOT CHANNEL_FD LIFELINE_FD``."""
    channel_fd, lifeline = (int(arg) for arg in (argv if argv is not None else sys.argv[1:]))
    # Ctrl-C in the terminal reaches the whole process group; the driver handles it and stops
    # this worker itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_driver, args=(lifeline,), daemon=True).start()
    _serve(Connection(channel_fd))
