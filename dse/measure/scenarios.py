"""The runs beside the adaptive latency run: the sustained run (back to back, for the drift as a
device heats up) and the offline scenario (throughput with requests kept in flight).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dse.core import MeasurementError
from dse.measure.run_limits import check_seconds
from dse.measure.stats import LatencyStats, summarize
from dse.measure.timers import host_timed


def measure_sustained(fn: Callable[[], object], *, seconds: float,
                      sync: Callable[[], object] | None = None,
                      on_window: Callable[[bool], object] | None = None) -> LatencyStats:
    """Call ``fn`` back to back for ``seconds`` (no warm-up, no early stop): the run in which a
    device heats up, for the latency drift between its first and last tenth."""
    check_seconds("seconds", seconds)
    timed = host_timed(fn, sync)
    samples: list[float] = []
    if on_window is not None:
        on_window(True)
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        samples.append(timed())
    elapsed = time.perf_counter() - start
    if on_window is not None:
        on_window(False)
    return summarize(samples, seconds=elapsed)


@dataclass(frozen=True)
class OfflineStats:
    """Offline scenario (after MLPerf): ``concurrency`` requests kept in flight for ``seconds``.

    Attributes:
        concurrency: Calls kept in flight.
        calls: Calls completed in the window.
        seconds: The window's length as measured.
        throughput_sps: Samples per second: calls x batch size / seconds.
    """

    concurrency: int
    calls: int
    seconds: float
    throughput_sps: float


def measure_offline(fn: Callable[[], Any], *, batch_size: int, concurrency: int,
                    seconds: float) -> OfflineStats:
    """Keep ``concurrency`` calls of ``fn`` in flight (one per thread) for ``seconds``; the
    runtime must release the GIL while it works, as ONNX Runtime and torch do.

    Args:
        fn: One call of the runner on one batch.
        batch_size: Samples per call, for the throughput.
        concurrency: How many calls are kept in flight, one thread each.
        seconds: How long the threads keep calling.

    Returns:
        The calls made, the seconds they took and ``throughput_sps`` (calls x ``batch_size``
        per second) as :class:`OfflineStats`.

    Raises:
        ValueError: When ``concurrency`` or ``batch_size`` is not an integer >= 1, or
            ``seconds`` is not a finite number > 0.
        MeasurementError: When a call of ``fn`` raised (the first error, in one line).

    Examples:
        >>> import time
        >>> from dse import measure_offline
        >>> stats = measure_offline(lambda: time.sleep(0.001), batch_size=4, concurrency=2,
        ...                         seconds=0.05)
        >>> stats.concurrency, stats.calls > 0, stats.throughput_sps > 0
        (2, True, True)
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    check_seconds("seconds", seconds)
    counts = [0] * concurrency
    errors: list[BaseException] = []
    barrier = threading.Barrier(concurrency + 1)
    stop = threading.Event()

    def worker(slot: int) -> None:
        barrier.wait()
        try:
            while not stop.is_set():
                fn()
                counts[slot] += 1
        except BaseException as exc:  # surfaced to the caller below, not swallowed
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise MeasurementError(f"offline run failed: {type(errors[0]).__name__}: {errors[0]}")
    calls = sum(counts)
    return OfflineStats(concurrency, calls, elapsed, calls * batch_size / elapsed)
