"""The `Probe` interface: a sensor sampled by a background thread over a measurement window.

Life cycle: ``available()`` is asked first; when it says no, the probe's metrics are reported as
missing with its reason. Otherwise ``start()`` is called right before the timed window and
``stop()`` right after; ``stop()`` returns the samples taken in between as a :class:`Trace`, and
``metrics(trace)`` turns it into named metrics. A probe is used by one thread at a time.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Trace:
    """Timestamped samples of one quantity (``time.time()`` seconds, values in ``unit``)."""

    name: str
    unit: str
    timestamps: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


class Probe(abc.ABC):
    """A telemetry source; see the module docstring for its life cycle."""

    name: str = ""
    unit: str = ""
    #: Metric names this probe can fill; reported as missing when it is unavailable.
    provides: tuple[str, ...] = ()

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self._trace = Trace(self.name, self.unit)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abc.abstractmethod
    def available(self) -> tuple[bool, str]:
        """Whether the sensor can be read here, and if not, why."""

    @abc.abstractmethod
    def read(self) -> float:
        """One reading of the sensor, in ``unit``."""

    @abc.abstractmethod
    def metrics(self, trace: Trace) -> dict[str, float]:
        """The metrics of a finished trace."""

    def start(self) -> None:
        self._trace = Trace(self.name, self.unit)
        self._stop.clear()
        self._sample()  # a reading at the very start, so short windows still have one
        self._thread = threading.Thread(target=self._loop, name=f"probe-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> Trace:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._sample()  # and one at the very end
        return self._trace

    def _sample(self) -> None:
        self._trace.timestamps.append(time.time())
        self._trace.values.append(self.read())

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()


PROBES: dict[str, Callable[[], Probe]] = {}


def register_probe(name: str) -> Callable[[type[Probe]], type[Probe]]:
    """Class decorator: make a probe available to device profiles under ``name``."""

    def add(cls: type[Probe]) -> type[Probe]:
        PROBES[name] = cls
        return cls

    return add
