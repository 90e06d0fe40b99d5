"""Waiting for this process's own threads to go idle, and duels that time each block only once
the other side's spinning worker threads have stopped (a real thread spinning on the CPU after
each call, as a runtime's pool does)."""

from __future__ import annotations

import threading
import time

import pytest

import dse.measure.duel as duel
from dse.measure.duel import run_duel
from dse.measure.quiet import wait_until_quiet


class SpinningPool:
    """A runtime's worker pool as the next code in the process meets it: after each call, a
    thread that spins on the CPU for ``spin_s`` of its own CPU time before it sleeps (a later
    call renews the spin, as a call keeps a pool awake)."""

    def __init__(self, spin_s: float) -> None:
        self.spin_s = spin_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._renew = False

    def call(self) -> object:
        result = sum(i * i for i in range(300))
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._spin, daemon=True)
                self._thread.start()
            else:
                self._renew = True
        return result

    def spinning(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _spin(self) -> None:
        start = time.thread_time()
        while time.thread_time() - start < self.spin_s:
            with self._lock:
                if self._renew:
                    start, self._renew = time.thread_time(), False


def test_a_spinning_thread_keeps_the_process_busy_until_it_stops() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        assert not wait_until_quiet(0.05)
    finally:
        stop.set()
        spinner.join()
    assert wait_until_quiet(1.0)


def _overlaps(monkeypatch: pytest.MonkeyPatch, quiet_max_s: float) -> tuple[int, int]:
    """A duel of a plain call against a call with a spinning pool: how many of the plain
    call's calls ran while the pool still spun, and the blocks that started before the process
    was idle."""
    monkeypatch.setattr(duel, "QUIET_MAX_S", quiet_max_s)
    pool = SpinningPool(0.01)
    overlapped = [0]
    # Only the rounds count: the warm-up alternates the two call by call, spinning or not.
    rounds = [False]

    def plain() -> object:
        overlapped[0] += rounds[0] and pool.spinning()
        return sum(i * i for i in range(300))

    run = run_duel(plain, pool.call, max_seconds=0.4, block_seconds=0.005, min_rounds=3,
                   on_window=lambda started: rounds.__setitem__(0, started))
    pool.stop()
    return overlapped[0], run.blocks_not_quiet


def test_a_duel_times_no_call_beside_the_other_sides_spinning_threads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert _overlaps(monkeypatch, 1.0) == (0, 0)
    # Without the wait (the protocol before it), the block after the pool's is timed beside it.
    overlapped, not_quiet = _overlaps(monkeypatch, 0.0)
    assert overlapped > 0 and not_quiet > 0
