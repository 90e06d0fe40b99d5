"""Measurement isolation on one node: while a device measures, no other dse work runs there.

Every dse process on a node (device workers, and the driver when it shares the node) takes the
node's lock: *shared* for work that may overlap other work (building, compiling, the accuracy
pass, the driver's sampling), *exclusive* for a measurement. The lock is ``flock`` on a file named
after the Ray node, so it holds across processes and is released by the kernel when a holder
dies — a killed worker can never leave its node locked.

A measurement is a writer that must not starve behind a stream of overlapping builds, so a second
file acts as a turnstile: a measurement holds it while it waits for the builds in progress to end,
and a new build passes through it before taking its shared lock.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Under the system temp dir, so every dse process of a node finds the same files.
LOCK_DIR = Path(tempfile.gettempdir()) / "dse-node-locks"


def current_node_id() -> str:
    """The Ray node this process runs on ("local" outside Ray)."""
    try:
        import ray
    except ImportError:
        return "local"
    if not ray.is_initialized():
        return "local"
    return str(ray.get_runtime_context().get_node_id())


class NodeLock:
    """The readers-writer lock of one node (see the module docstring)."""

    def __init__(self, node_id: str, lock_dir: Path = LOCK_DIR) -> None:
        lock_dir.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self._main = lock_dir / f"{node_id}.lock"
        self._gate = lock_dir / f"{node_id}.gate"

    @contextmanager
    def _held(self, path: Path, mode: int) -> Iterator[None]:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, mode)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the node for work that may overlap other builds, but no measurement."""
        with self._held(self._gate, fcntl.LOCK_EX):
            pass  # a waiting measurement holds the gate: queue behind it
        with self._held(self._main, fcntl.LOCK_SH):
            yield

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the node alone, for a measurement."""
        with self._held(self._gate, fcntl.LOCK_EX), self._held(self._main, fcntl.LOCK_EX):
            yield


class Span:
    """Wall-clock start and end of a piece of work, recorded in provenance so isolation can be
    checked afterwards from the trials alone."""

    def __init__(self) -> None:
        self.start = float("nan")
        self.end = float("nan")

    @contextmanager
    def timing(self) -> Iterator[None]:
        self.start = time.time()
        try:
            yield
        finally:
            self.end = time.time()
