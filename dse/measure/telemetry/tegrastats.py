"""The ``tegrastats`` fallback: parse its lines, and a probe that runs it during the window.

Use it where sysfs is out of reach (a container without ``/sys/bus/i2c``); the sysfs probes in
:mod:`~dse.measure.telemetry.jetson_power` and :mod:`~dse.measure.telemetry.jetson_clocks` read
the same sensors more often and more precisely.

Line formats handled by :func:`parse_tegrastats`:

* L4T r32 (JetPack 4; Nano, TX2, Xavier): ``RAM 2448/31919MB (lfb 6807x4MB) SWAP ... CPU
  [1%@1190,off,...] EMC_FREQ 0%@2133 GR3D_FREQ 0%@1377 ... CPU@37.5C ... GPU 0/0 CPU 311/311 ...``
  — rails as ``NAME current/average`` in mW without a unit.
* L4T r35 (JetPack 5; Orin): rails as ``VDD_IN 4999mW/4999mW``; ``GR3D_FREQ 0%@[624]`` or, with
  two GPCs, ``GR3D_FREQ 0%@[305,0]`` (one frequency per GPC; 0 when the GPC is power-gated).
* L4T r36 (JetPack 6; Orin): a ``MM-DD-YYYY HH:MM:SS`` prefix, lower-case temperature names
  (``cpu@47.5C``), and, when not run as root, ``GR3D_FREQ 0%`` without a frequency and no EMC_FREQ.

A temperature of -256 °C is tegrastats' mark for a sensor of a power-gated block and is dropped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, ClassVar

from pydantic import Field

from dse.core import MeasurementError
from dse.measure.telemetry.base import (
    Probe,
    ProbeResult,
    ProbeSettings,
    Trace,
    Window,
    interval_setting,
    register_probe,
)
from dse.measure.telemetry.jetson import board_rails, is_real_temperature, peak_temperature, power_result

TOTAL = "power.total"


@dataclass(frozen=True)
class CpuCore:
    """One entry of ``CPU [...]``: load and clock, or ``off`` (core offline: both None)."""

    load_pct: float | None
    freq_mhz: float | None


@dataclass(frozen=True)
class RailPower:
    """A rail's power as tegrastats prints it: now, and averaged since tegrastats started (mW)."""

    current_mw: float
    average_mw: float


@dataclass(frozen=True)
class TegrastatsSample:
    """One tegrastats line. Fields the line does not print are None (or empty)."""

    timestamp: str | None = None  # "11-30-2026 12:00:00", as printed by r36
    ram_used_mb: int | None = None
    ram_total_mb: int | None = None
    swap_used_mb: int | None = None
    swap_total_mb: int | None = None
    cpus: tuple[CpuCore, ...] = ()
    emc_load_pct: float | None = None
    emc_freq_mhz: float | None = None
    gr3d_load_pct: float | None = None
    gr3d_freq_mhz: float | None = None  # the highest GPC clock when printed per GPC
    temperatures_c: dict[str, float] = field(default_factory=dict)
    rails: dict[str, RailPower] = field(default_factory=dict)


_STAMP = re.compile(r"^(\d{2}-\d{2}-\d{4} \d{2}:\d{2}:\d{2})\s")
_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_SWAP = re.compile(r"\bSWAP (\d+)/(\d+)MB")
_CPUS = re.compile(r"\bCPU \[([^\]]*)\]")
_CORE = re.compile(r"(\d+)%(?:@(\d+))?")
_EMC = re.compile(r"\bEMC_FREQ (\d+)%(?:@(\d+))?")
_GR3D = re.compile(r"\bGR3D_FREQ (\d+)%(?:@(?:\[([\d,]+)\]|(\d+)))?")
_TEMP = re.compile(r"(?<![\w%])([A-Za-z][\w-]*)@(-?\d+(?:\.\d+)?)C\b")
_RAIL_MW = re.compile(r"\b([A-Za-z]\w*) (\d+)mW/(\d+)mW")
# r32 rails carry no unit; the lookahead keeps "RAM 1/2MB" and "IRAM 0/252kB" out.
_RAIL_R32 = re.compile(r"\b([A-Za-z]\w*) (\d+)/(\d+)(?=\s|$)")


def _core(text: str) -> CpuCore:
    match = _CORE.fullmatch(text.strip())
    if match is None:  # "off"
        return CpuCore(None, None)
    return CpuCore(float(match[1]), float(match[2]) if match[2] else None)


def parse_tegrastats(line: str) -> TegrastatsSample:
    """Parse one line of tegrastats output (any of the formats in the module docstring).

    Raises ValueError for a line that is not a tegrastats report (no ``RAM used/totalMB``).
    """
    ram = _RAM.search(line)
    if ram is None:
        raise ValueError(f"not a tegrastats line (no 'RAM used/totalMB'): {line!r}")
    stamp, swap, cpus = _STAMP.match(line), _SWAP.search(line), _CPUS.search(line)
    emc, gr3d = _EMC.search(line), _GR3D.search(line)
    gpc = [float(f) for f in gr3d[2].split(",")] if gr3d and gr3d[2] else []
    gr3d_freq = max(gpc) if gpc else float(gr3d[3]) if gr3d and gr3d[3] else None
    rail_matches = _RAIL_MW.findall(line) or _RAIL_R32.findall(line)
    return TegrastatsSample(
        timestamp=stamp[1] if stamp else None,
        ram_used_mb=int(ram[1]),
        ram_total_mb=int(ram[2]),
        swap_used_mb=int(swap[1]) if swap else None,
        swap_total_mb=int(swap[2]) if swap else None,
        cpus=tuple(_core(item) for item in cpus[1].split(",")) if cpus else (),
        emc_load_pct=float(emc[1]) if emc else None,
        emc_freq_mhz=float(emc[2]) if emc and emc[2] else None,
        gr3d_load_pct=float(gr3d[1]) if gr3d else None,
        gr3d_freq_mhz=gr3d_freq,
        temperatures_c={name: float(value) for name, value in _TEMP.findall(line)
                        if is_real_temperature("", float(value))},
        rails={name: RailPower(float(now), float(avg))
               for name, now, avg in rail_matches if name != "NC"},
    )


def sample_channels(sample: TegrastatsSample) -> dict[str, float]:
    """The trace channels of one sample: ``power.<rail>`` and ``power.total`` (W, total by
    :func:`~dse.measure.telemetry.jetson.board_rails`), ``temp.<name>`` (°C), ``gr3d.mhz``,
    ``gr3d.load_pct``, ``emc.mhz``, ``emc.load_pct``, ``ram.used_mb``."""
    channels = {f"power.{name}": rail.current_mw / 1e3 for name, rail in sample.rails.items()}
    if sample.rails:
        total, _ = board_rails(list(sample.rails))
        channels[TOTAL] = sum(channels[f"power.{name}"] for name in total)
    channels.update({f"temp.{name}": value for name, value in sample.temperatures_c.items()})
    optional = {"gr3d.mhz": sample.gr3d_freq_mhz, "gr3d.load_pct": sample.gr3d_load_pct,
                "emc.mhz": sample.emc_freq_mhz, "emc.load_pct": sample.emc_load_pct,
                "ram.used_mb": None if sample.ram_used_mb is None else float(sample.ram_used_mb)}
    channels.update({name: value for name, value in optional.items() if value is not None})
    return channels


def channel_unit(channel: str) -> str:
    """The unit of a channel named by :func:`sample_channels`."""
    prefix, _, rest = channel.partition(".")
    return {"power": "W", "temp": "°C"}.get(prefix) or {"mhz": "MHz", "load_pct": "%",
                                                         "used_mb": "MB"}[rest]


class TegrastatsSettings(ProbeSettings):
    interval_s: float = interval_setting(0.1)
    executable: Path | None = Field(
        default=None,
        description="Path of the tegrastats program; none: looked up in PATH.")


@register_probe
class TegrastatsProbe(Probe):
    """Runs ``tegrastats --interval <ms>`` from ``start()`` to ``stop()``; one reading per line,
    stamped when the line arrives. ``start()`` returns once the first line is in and ``stop()``
    waits for one more line (each at most a few intervals), so readings bracket the window as the
    energy rule needs. Summarizes to ``power_mean_w``, ``energy_per_inference_mj`` and
    ``temperature_peak_c``."""

    name = "tegrastats"
    provides = ("power_mean_w", "energy_per_inference_mj", "temperature_peak_c")
    units: ClassVar[dict[str, str]] = {}
    settings_model = TegrastatsSettings

    def __init__(self, root: Path = Path("/"), interval_s: float = 0.1,
                 executable: Path | None = None) -> None:
        super().__init__(interval_s)
        self.root = root
        self.executable = executable
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Condition()  # guards _last and the trace; notified on each line
        self._last: dict[str, float] = {}
        #: Lines of the last run that were not tegrastats reports (warnings, blank lines).
        self.skipped_lines = 0

    def _find(self) -> Path | None:
        if self.executable is not None:
            return self.executable if os.access(self.executable, os.X_OK) else None
        # PATH is searched under root, so a fixture tree can hold a stand-in tegrastats.
        for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
            candidate = self.root / folder.lstrip("/") / "tegrastats"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        return None

    def available(self) -> tuple[bool, str]:
        if self._find() is not None:
            return True, ""
        if self.executable is not None:
            return False, f"tegrastats not found or not executable at {self.executable}"
        where = "" if self.root == Path("/") else f" under {self.root}"
        return False, f"tegrastats not found in PATH{where}"

    def start(self) -> None:
        executable = self._find()
        if executable is None:
            raise MeasurementError(self.available()[1])
        self._trace = Trace(self.name)
        self._last, self.skipped_lines = {}, 0
        command = [str(executable), "--interval", str(max(1, round(self.interval_s * 1000)))]
        # tegrastats writes through stdio, which buffers whole blocks into a pipe; line buffering
        # (stdbuf) makes each line arrive when printed, so its arrival time is its reading time.
        stdbuf = shutil.which("stdbuf")
        if stdbuf is not None:
            command = [stdbuf, "-oL", *command]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         text=True)
        assert self._process.stdout is not None  # for mypy: stdout=PIPE was asked
        self._thread = threading.Thread(target=self._follow, args=(self._process.stdout,),
                                        name=f"probe-{self.name}", daemon=True)
        self._thread.start()
        # Energy needs a reading at or before the window's start (derived.window_indices), so the
        # window opens only once the first line is in; if none comes, summarize says so.
        self._wait_for_line(after=0)

    def _wait_for_line(self, after: int) -> None:
        """Block until the trace holds more than ``after`` lines, or a few intervals have passed."""
        with self._lock:
            self._lock.wait_for(lambda: len(self._trace.timestamps) > after,
                                timeout=1.0 + 3 * self.interval_s)

    def _follow(self, stream: IO[str]) -> None:
        for line in stream:
            try:
                channels = sample_channels(parse_tegrastats(line))
            except ValueError:
                self.skipped_lines += 1
                continue
            with self._lock:
                self._last = channels
                self._trace.add(time.time(), channels)
                # The channels are known only from the lines (rails and zones vary by board and
                # power mode), so units come with them rather than from channel_units().
                self._trace.units.update({name: channel_unit(name) for name in channels})
                self._lock.notify_all()

    def stop(self) -> Trace:
        if self._process is not None:
            # Likewise a reading at or after the window's end: the next line.
            with self._lock:
                seen = len(self._trace.timestamps)
            self._wait_for_line(after=seen)
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self._trace

    def read(self) -> dict[str, float]:
        """The channels of the latest line (tegrastats pushes lines; nothing to poll)."""
        with self._lock:
            return dict(self._last)

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        if not trace.timestamps:
            why = "tegrastats printed no line in the window (window shorter than its interval?)"
            return ProbeResult(missing=dict.fromkeys(self.provides, why))
        absent = None if TOTAL in trace.channels else "tegrastats printed no power rail"
        result = power_result(trace, window, TOTAL, absent)
        temperatures = [name for name in trace.channels if name.startswith("temp.")]
        peak = peak_temperature(trace, temperatures)
        if peak is None:
            result.missing["temperature_peak_c"] = "tegrastats printed no valid temperature"
        else:
            result.metrics["temperature_peak_c"] = peak
        return result
