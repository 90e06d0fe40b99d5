"""Stop signals that a long-running driver cannot lose: Ctrl-C, SIGTERM and SIGHUP recorded as
well as raised, checked on every turn of the search loop, and held back while a trial is created
and recorded."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dse.exceptions import Terminated


class StickyInterrupt:
    """Ctrl-C that cannot be lost. Python drops an exception raised inside a finaliser or a weakref
    callback (it prints "Exception ignored in ..."), so a SIGINT that lands while one runs (the
    database layer has some) would be forgotten and the run would go on. The handler records the
    interrupt as well as raising it, and the loop checks the record on every turn.

    SIGTERM and SIGHUP are handled the same way (raising :class:`~dse.exceptions.Terminated`):
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
