"""Clocks and temperatures of a Jetson: CPU cpufreq, GPU devfreq, EMC, thermal zones.

Sources (paths relative to ``root``; layouts common to L4T r32, r35 and r36 unless noted):

* CPU: ``sys/devices/system/cpu/cpu<N>/cpufreq/scaling_cur_freq`` and ``cpuinfo_max_freq`` (kHz).
  Offline cores have no ``cpufreq`` folder and are not read.
* GPU: the devfreq node ``sys/class/devfreq/<node>/cur_freq`` and ``max_freq`` (Hz). The node is
  ``17000000.ga10b`` on Orin with r35, ``17000000.gpu`` on Orin with r36, ``17000000.gv11b`` on
  Xavier, ``17000000.gp10b`` on TX2, ``57000000.gpu`` on Nano (r32). ``max_freq`` is devfreq's
  policy ceiling: the cap of the nvpmodel power mode (and, on r35/r36 kernels, of thermal QoS).
* EMC: ``sys/kernel/debug/bpmp/debug/clk/emc/rate`` (Hz; Xavier and Orin) or
  ``sys/kernel/debug/clk/emc/clk_rate`` (Nano, TX1 on r32). Both are debugfs, readable by root only;
  when neither reads, :attr:`JetsonClocksProbe.notes` says so. ``/sys/kernel/actmon_avg_activity``
  (r32) is an activity figure, not a clock, and is not read.
* Thermal: ``sys/class/thermal/thermal_zone<N>/type`` and ``temp`` (m°C).

``clock_drop_pct`` uses the GPU clock where the GPU devfreq node exists (the compute clock of a
model on the GPU), else the mean over the CPUs of each CPU's drop against its own maximum; each
drop is :func:`~dse.measure.telemetry.derived.clock_drop_pct` (mean of the readings, not clipped).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import ClassVar

from dse.measure.telemetry.base import (
    Probe,
    ProbeResult,
    ProbeSettings,
    Trace,
    Window,
    interval_setting,
    register_probe,
)
from dse.measure.telemetry.derived import TelemetryGapError, clock_drop_pct
from dse.measure.telemetry.jetson import peak_temperature, read_number, read_text

#: Devfreq nodes of Jetson GPUs (see the module docstring): the Tegra GPU's bus address or its core
#: name. A bare "gpu" would also match other SoCs' GPUs (Mali "ff9a0000.gpu").
_GPU_NODE = re.compile(r"^(17000000|57000000)\.|ga10b|gv11b|gp10b|gm20b")
_EMC_RATES = ("sys/kernel/debug/bpmp/debug/clk/emc/rate", "sys/kernel/debug/clk/emc/clk_rate")


def _cpu_index(path: Path) -> int:
    return int(path.parent.name.removeprefix("cpu"))


def _first_readable(paths: list[Path]) -> Path | None:
    return next((p for p in paths if not math.isnan(read_number(p))), None)


class JetsonClocksSettings(ProbeSettings):
    interval_s: float = interval_setting(0.1)


@register_probe
class JetsonClocksProbe(Probe):
    """Channels ``cpu<N>.mhz``/``cpu<N>.max_mhz``, ``gpu.mhz``/``gpu.max_mhz``, ``emc.mhz`` and
    ``temp.<zone type>`` (°C). Summarizes to ``clock_drop_pct`` and ``temperature_peak_c``."""

    name = "jetson_clocks"
    provides = ("clock_drop_pct", "temperature_peak_c")
    units: ClassVar[dict[str, str]] = {"gpu.mhz": "MHz", "gpu.max_mhz": "MHz", "emc.mhz": "MHz"}
    settings_model = JetsonClocksSettings

    def __init__(self, root: Path = Path("/"), interval_s: float = 0.1) -> None:
        super().__init__(interval_s)
        self.root = root
        cpufreq = root / "sys/devices/system/cpu"
        self._cpus = {_cpu_index(p): p for p in sorted(cpufreq.glob("cpu[0-9]*/cpufreq"), key=_cpu_index)}
        devfreq = sorted(p for p in (root / "sys/class/devfreq").glob("*") if _GPU_NODE.search(p.name))
        self.gpu_node: Path | None = devfreq[0] if devfreq else None
        self._emc = _first_readable([root / p for p in _EMC_RATES])
        self._zones = self._thermal_zones(root)
        #: Channels this probe would like but cannot read here, with why (for provenance).
        self.notes: dict[str, str] = {}
        if self._emc is None:
            self.notes["emc.mhz"] = (f"no readable EMC rate ({', '.join(_EMC_RATES)}; debugfs is "
                                     "readable by root only)")

    @staticmethod
    def _thermal_zones(root: Path) -> dict[str, Path]:
        zones: dict[str, Path] = {}
        for zone in sorted(root.glob("sys/class/thermal/thermal_zone*"),
                           key=lambda p: int(p.name.removeprefix("thermal_zone") or 0)):
            kind = read_text(zone / "type") or zone.name
            # Two zones of one type (rare) stay apart by their zone number.
            zones[f"temp.{kind}" if f"temp.{kind}" not in zones else f"temp.{kind}.{zone.name}"] = zone
        return zones

    @property
    def clock_source(self) -> str:
        """Which clock ``clock_drop_pct`` describes, for provenance."""
        return f"GPU devfreq {self.gpu_node.name}" if self.gpu_node is not None else "CPU cpufreq"

    def available(self) -> tuple[bool, str]:
        # cpufreq and thermal zones exist on any Linux box; only a Jetson's own marks make this the
        # Jetson probe's business (the generic cpufreq/thermal probe covers the rest).
        if self.gpu_node is None and not (self.root / "etc/nv_tegra_release").exists():
            return False, (f"no Jetson GPU devfreq node under {self.root / 'sys/class/devfreq'} and no "
                           f"{self.root / 'etc/nv_tegra_release'} (not a Jetson?)")
        if not self._cpus and self.gpu_node is None and not self._zones:
            return False, f"no cpufreq, GPU devfreq or thermal zone under {self.root / 'sys'}"
        return True, ""

    def channel_units(self) -> dict[str, str]:
        units = dict(self.units)
        for n in self._cpus:
            units.update({f"cpu{n}.mhz": "MHz", f"cpu{n}.max_mhz": "MHz"})
        units.update(dict.fromkeys(self._zones, "°C"))
        return units

    def provenance(self, trace: Trace) -> dict[str, str]:
        """``clock_source`` (the clock ``clock_drop_pct`` describes) and ``note.<channel>`` for
        each channel this probe could not read here (see :attr:`notes`)."""
        return {"clock_source": self.clock_source,
                **{f"note.{channel}": why for channel, why in self.notes.items()}}

    def read(self) -> dict[str, float]:
        reading: dict[str, float] = {}
        for n, folder in self._cpus.items():
            reading[f"cpu{n}.mhz"] = read_number(folder / "scaling_cur_freq") / 1e3
            reading[f"cpu{n}.max_mhz"] = read_number(folder / "cpuinfo_max_freq") / 1e3
        if self.gpu_node is not None:
            reading["gpu.mhz"] = read_number(self.gpu_node / "cur_freq") / 1e6
            reading["gpu.max_mhz"] = read_number(self.gpu_node / "max_freq") / 1e6
        if self._emc is not None:
            reading["emc.mhz"] = read_number(self._emc) / 1e6
        for channel, zone in self._zones.items():
            reading[channel] = read_number(zone / "temp") / 1e3
        return reading

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        result = ProbeResult()
        drop = self._clock_drop(trace)
        if isinstance(drop, str):
            result.missing["clock_drop_pct"] = drop
        else:
            result.metrics["clock_drop_pct"] = drop
        peak = peak_temperature(trace, self._zones)
        if peak is not None:
            result.metrics["temperature_peak_c"] = peak
        elif self._zones:
            result.missing["temperature_peak_c"] = (
                f"no valid reading from thermal zones {', '.join(self._zones)} "
                "(unreadable, -256 °C 'no sensor', or not a sensor)")
        else:
            result.missing["temperature_peak_c"] = f"no thermal zone under {self.root / 'sys/class/thermal'}"
        return result

    def _clock_drop(self, trace: Trace) -> float | str:
        """The drop in percent, or why it cannot be computed."""
        if self.gpu_node is not None:
            try:
                return _drop(trace, "gpu")
            except TelemetryGapError as gap:
                return f"{self.gpu_node}: {gap}"
        if not self._cpus:
            return f"no GPU devfreq node and no cpufreq under {self.root / 'sys/devices/system/cpu'}"
        drops: list[float] = []
        gaps: list[str] = []
        for n in self._cpus:
            try:
                drops.append(_drop(trace, f"cpu{n}"))
            except TelemetryGapError as gap:
                gaps.append(f"cpu{n}: {gap}")
        if not drops:
            return "; ".join(gaps)
        # A CPU that failed every reading is left out: the others' clocks were still measured.
        return sum(drops) / len(drops)


def _drop(trace: Trace, domain: str) -> float:
    """``clock_drop_pct`` of one clock domain against the highest maximum seen in the trace (a cap
    lowered mid-window must not make a slower clock look unthrottled)."""
    maxima = [v for v in trace.channels.get(f"{domain}.max_mhz", []) if math.isfinite(v) and v > 0]
    clocks = trace.channels.get(f"{domain}.mhz", [])
    return clock_drop_pct(clocks, max(maxima, default=math.nan))
