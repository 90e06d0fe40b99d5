"""The `Probe` interface: a sensor sampled by a background thread over a measurement window.

Life cycle (one thread drives a probe; its sampler thread is private):

1. ``available()`` is asked once, before any measurement. When it says no, every metric in
   ``provides`` is reported missing with its reason, and the probe is not used.
2. ``start()`` right before the timed window: takes a first reading, then samples every
   ``interval_s`` on a daemon thread.
3. ``stop()`` right after the window: stops the thread, takes a last reading and returns the
   :class:`Trace` (so even a window shorter than the interval has two readings, start and end).
4. ``summarize(trace, window)`` turns the trace into metrics; what it cannot compute from this
   trace (a counter absent, a rail without current) goes to ``missing`` with the reason.

``read()`` must be cheap and must not raise for a sensor that ``available()`` accepted; a reading
that fails mid-window may return NaN for that channel. Probes read sysfs relative to ``root`` so
tests can point them at fixture trees in the real layouts.

Settings: each probe declares what a device profile may set on it in ``settings_model``, a
:class:`ProbeSettings` subclass whose fields are keyword arguments of the probe's constructor, with
the same defaults. Parameters only tests need (``root``, a stand-in sensor library) stay out of it.
"""

from __future__ import annotations

import abc
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

# The registry lives at the bottom of the layers; probes keep importing it from here.
from dse.plugins import PROBES as PROBES
from dse.plugins import register_probe as register_probe


@dataclass
class Trace:
    """Timestamped readings of one probe: ``channels[name][i]`` was read at ``timestamps[i]``
    (``time.time()`` seconds); ``units[name]`` is the channel's unit."""

    probe: str
    timestamps: list[float] = field(default_factory=list)
    channels: dict[str, list[float]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)

    def add(self, timestamp: float, reading: dict[str, float]) -> None:
        index = len(self.timestamps)
        self.timestamps.append(timestamp)
        for name, value in reading.items():
            # A channel first seen late is padded so every list stays aligned with timestamps.
            self.channels.setdefault(name, [math.nan] * index).append(value)
        for values in self.channels.values():
            if len(values) < index + 1:
                values.append(math.nan)


@dataclass(frozen=True)
class Window:
    """The measurement window a trace belongs to: wall-clock bounds and the work done in it."""

    start: float
    end: float
    inferences: int  # samples processed (iterations x batch size), for per-inference figures

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class ProbeResult:
    metrics: dict[str, float] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def interval_setting(default: float) -> Any:
    """The ``interval_s`` field of a probe's settings, with the probe's own default."""
    return Field(default=default, gt=0, description="Seconds between two readings.")


class ProbeSettings(BaseModel):
    """What a device profile may set on a probe (``telemetry: [{name: {setting: value}}]``).

    A probe's subclass adds its own fields; each is a keyword argument of the probe's constructor
    and carries the constructor's default (a test holds every probe to that).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_s: float = interval_setting(0.01)


class Probe(abc.ABC):
    """A telemetry source; see the module docstring for its life cycle."""

    name: str = ""
    #: Metric names this probe can fill; all reported missing when it is unavailable.
    provides: tuple[str, ...] = ()
    #: Units of the channels ``read()`` returns.
    units: ClassVar[dict[str, str]] = {}
    #: What a device profile may set on this probe: keyword arguments of its constructor.
    settings_model: ClassVar[type[ProbeSettings]] = ProbeSettings

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self._trace = Trace(self.name)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abc.abstractmethod
    def available(self) -> tuple[bool, str]:
        """Whether the sensor can be read here, and if not, why (no sensor, no permission...)."""

    @abc.abstractmethod
    def read(self) -> dict[str, float]:
        """One reading of every channel."""

    @abc.abstractmethod
    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        """The metrics of a finished trace, and what could not be derived from it, with why."""

    def provenance(self, trace: Trace) -> dict[str, str]:
        """Facts about this window worth keeping beside the metrics (where an energy figure came
        from, over-current events...), as text. Called after ``summarize``."""
        return {}

    def channel_units(self) -> dict[str, str]:
        """Units of the channels ``read()`` returns. Override when the channels depend on what
        the host has (rails, zones, CPUs); the default is the class-level ``units`` table."""
        return dict(self.units)

    def read_at_ends(self) -> dict[str, float]:
        """Channels read only at the window's two ends, merged into those readings: figures too
        costly to read every interval inside the window (none by default)."""
        return {}

    def start(self) -> None:
        self._trace = Trace(self.name, units=self.channel_units())
        self._stop.clear()
        self._sample(at_end=True)
        self._thread = threading.Thread(target=self._loop, name=f"probe-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> Trace:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._sample(at_end=True)
        return self._trace

    def _sample(self, at_end: bool = False) -> None:
        reading = self.read()
        if at_end:
            reading = {**reading, **self.read_at_ends()}
        self._trace.add(time.time(), reading)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()
