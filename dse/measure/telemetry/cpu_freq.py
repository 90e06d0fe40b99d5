"""How far the CPU clocks sat below their maximum, from cpufreq.

Layout (Documentation/admin-guide/pm/cpufreq.rst, ABI sysfs-devices-system-cpu):
``/sys/devices/system/cpu/cpuN/cpufreq/`` holds ``scaling_cur_freq`` (the current frequency as
the driver reports it; on x86 usually derived from the APERF/MPERF counters) and
``cpuinfo_max_freq`` (the highest frequency the hardware can run at, turbo included where the
driver counts it), both in kHz. Virtual machines rarely have a cpufreq driver.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from dse.measure.telemetry.base import (
    ProbeResult,
    ProbeSettings,
    Trace,
    Window,
    interval_setting,
    register_probe,
)
from dse.measure.telemetry.cpu_sysfs import SysfsError, SysfsProbe, numbered, read_int, read_or_nan
from dse.measure.telemetry.derived import TelemetryGapError, bracketing_rows, clock_drop_pct

CPUS = "sys/devices/system/cpu"
CURRENT = "scaling_cur_freq"
MAXIMUM = "cpuinfo_max_freq"


@dataclass(frozen=True)
class _Cpu:
    name: str  # ``cpu0``; channels are named after it
    folder: Path  # its cpufreq folder


class CpufreqSettings(ProbeSettings):
    interval_s: float = interval_setting(0.1)


@register_probe
class CpufreqProbe(SysfsProbe[_Cpu]):
    """Current and maximum frequency of every CPU; ``clock_drop_pct`` is, per CPU,
    ``100 * (1 - mean(current) / maximum)`` over the window's readings, averaged over CPUs.

    What it measures is the frequency below the hardware maximum, whatever the cause: thermal or
    power-limit throttling, but also a power-saving governor or idle cores clocked down. Read it
    as "the clock the work got", not as throttling alone (``throttled_fraction`` is that). The
    maximum is read with every sample (turning turbo off lowers it) and the highest seen is used.
    Channels ``cpuN/scaling_cur_freq`` and ``cpuN/cpuinfo_max_freq``, in kHz.
    """

    name = "cpufreq"
    provides = ("clock_drop_pct",)
    units: ClassVar[dict[str, str]] = {}
    settings_model = CpufreqSettings

    def __init__(self, root: Path = Path("/"), interval_s: float = 0.1) -> None:
        super().__init__(root, interval_s)

    def channel_units(self) -> dict[str, str]:
        return {f"{cpu.name}/{file}": "kHz" for cpu in self.sources() for file in (CURRENT, MAXIMUM)}

    def read(self) -> dict[str, float]:
        reading: dict[str, float] = {}
        for cpu in self.sources():
            for file in (CURRENT, MAXIMUM):
                reading[f"{cpu.name}/{file}"] = read_or_nan(cpu.folder / file)
        return reading

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        try:
            rows = bracketing_rows(trace, window)
        except TelemetryGapError as exc:
            return ProbeResult(missing={"clock_drop_pct": f"cpufreq: {exc}"})
        drops: list[float] = []
        gaps: list[str] = []
        for name in sorted(n for n in trace.channels if n.endswith(f"/{CURRENT}")):
            cpu = name.removesuffix(f"/{CURRENT}")
            current = [trace.channels[name][i] for i in rows]
            maxima = trace.channels.get(f"{cpu}/{MAXIMUM}", [math.nan] * len(trace.timestamps))
            highest = max((maxima[i] for i in rows if math.isfinite(maxima[i])), default=math.nan)
            try:
                drops.append(clock_drop_pct(current, highest))
            except TelemetryGapError as exc:
                gaps.append(f"{cpu}: {exc}")
        if not drops:
            reason = "; ".join(gaps) or "no cpufreq channel in the trace"
            return ProbeResult(missing={"clock_drop_pct": f"cpufreq: {reason}"})
        # A CPU that failed every reading is left out: the others' clocks were still measured.
        return ProbeResult(metrics={"clock_drop_pct": sum(drops) / len(drops)})

    def discover(self) -> list[_Cpu]:
        base = self.root / CPUS
        folders = [cpu / "cpufreq" for cpu in numbered(base, r"cpu(\d+)")]
        folders = [folder for folder in folders if folder.is_dir()]
        if not folders:
            raise SysfsError(f"no cpufreq folder under {base}/cpu*/ (no cpufreq driver: usual in a "
                             f"virtual machine)")
        cpus, unreadable = [], []
        for folder in folders:
            try:
                read_int(folder / CURRENT)
                read_int(folder / MAXIMUM)
            except SysfsError as exc:
                unreadable.append(str(exc))
                continue
            cpus.append(_Cpu(folder.parent.name, folder))
        if not cpus:
            raise SysfsError(f"no readable cpufreq frequencies: {'; '.join(unreadable)}")
        return cpus
