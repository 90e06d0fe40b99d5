"""Stop signals that a long-running driver cannot lose: Ctrl-C, SIGTERM and SIGHUP recorded as
well as raised, checked on every turn of the search loop, and held back while a trial is created
and recorded."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dse.core import Terminated

# How often a wait looks whether a Ctrl-C was lost on its way (see interrupt_remembered).
INTERRUPT_CHECK_S = 0.2


class StickyInterrupt:
    """Ctrl-C that cannot be lost. Python drops an exception raised inside a finaliser or a weakref
    callback (it prints "Exception ignored in ..."), so a SIGINT that lands while one runs (the
    database layer has some) would be forgotten and the run would go on. The handler records the
    interrupt as well as raising it, and the loop checks the record on every turn.

    SIGTERM and SIGHUP are handled the same way (raising :class:`~dse.core.exceptions.Terminated`):
    Ray's driver handler would otherwise turn SIGTERM into ``sys.exit`` mid-trial and abort on the
    way out. Installed only in the main thread, and only over Python's default handler or Ray's
    (never over one the caller set)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.seen: KeyboardInterrupt | None = None
        self._previous: dict[int, Any] = {}
        self._deferring = 0

    def __enter__(self) -> StickyInterrupt:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in self.SIGNALS:
            if _replaceable(signal.getsignal(signum)):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.seen = KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)
        if not self._deferring:
            raise self.seen

    def check(self) -> None:
        if self.seen is not None:
            raise self.seen

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold an interrupt back until the block is done (then raise it): a trial is created
        and recorded as this run's in one step, so an interrupt never leaves one RUNNING that
        the run does not know it owns."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if not self._deferring:
            self.check()

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


def _replaceable(handler: Any) -> bool:
    """Python's defaults, and Ray's driver handler; not a handler the caller installed."""
    if handler in (signal.default_int_handler, signal.SIG_DFL):
        return True
    return str(getattr(handler, "__module__", "")).startswith("ray.")


@contextmanager
def interrupt_remembered() -> Iterator[Callable[[], bool]]:
    """Whether a Ctrl-C came while the block ran, even one whose KeyboardInterrupt Python dropped.

    Python runs a signal handler at the next bytecode of the main thread, which may be inside a
    weakref callback or a ``__del__`` (a garbage collection while the candidate is pickled):
    an exception raised there is printed as "Exception ignored" and lost, and the driver would
    wait out a blocking call as if nobody had pressed Ctrl-C. The handler in force keeps its
    say; a KeyboardInterrupt it raises is remembered here, so a wait that polls can raise it
    again. (:class:`StickyInterrupt` does the same for the search loop's turns.)
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield lambda: False  # no handler of ours can run: signals reach the main thread only
        return
    raised = threading.Event()

    def remember(signum: int, frame: object) -> None:
        try:
            previous(signum, frame)  # type: ignore[arg-type]
        except KeyboardInterrupt:
            raised.set()
            raise

    signal.signal(signal.SIGINT, remember)
    try:
        yield raised.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


def wait_until(ready: Callable[[float], bool], timeout_s: float | None,
               interrupted: Callable[[], bool]) -> bool:
    """Whether ``ready(seconds)`` (a wait of at most that long) came true within ``timeout_s``
    (None: no limit), waiting in short turns so that a Ctrl-C ``interrupted`` remembers, though
    Python dropped it, raises KeyboardInterrupt here."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        if interrupted():
            raise KeyboardInterrupt
        left = INTERRUPT_CHECK_S if deadline is None else deadline - time.monotonic()
        if ready(max(0.0, min(left, INTERRUPT_CHECK_S))):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
