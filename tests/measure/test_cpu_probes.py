"""CPU probes driven through their life cycle on copies of sysfs fixture trees.

Each test copies a tree from ``tests/fixtures/sysfs`` to ``tmp_path``, starts the probe, rewrites
the counter files the way the kernel would advance them, stops it and checks the summary against
numbers worked out by hand. The probes' sampler interval is long, so a trace holds exactly the
readings of ``start()`` and ``stop()``; multi-step sequences are checked on hand-built traces.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dse.measure.telemetry.base import PROBES, Probe, Trace, Window
from dse.measure.telemetry.cpu import CpufreqProbe, CpuThrottleProbe, RaplProbe, ThermalZonesProbe
from dse.measure.telemetry.cpu_sysfs import SysfsProbe

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
SLOW = 3600.0  # sampler interval: no reading between start() and stop()
PROBE_CLASSES: list[type[SysfsProbe[Any]]] = [RaplProbe, ThermalZonesProbe, CpufreqProbe, CpuThrottleProbe]
RAPL = "sys/class/powercap"
THERMAL = "sys/class/thermal"
CPUS = "sys/devices/system/cpu"


def host(tmp_path: Path, fixture: str) -> Path:
    root = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, root)
    return root


def put(path: Path, value: int | str) -> None:
    """Write a sysfs attribute as the kernel shows it: the value and a newline."""
    path.write_text(f"{value}\n")


def measure(probe: Probe, change: Callable[[], None], inferences: int = 1000) -> tuple[Trace, Window]:
    """The life cycle: available, start, the window (during which ``change`` runs), stop."""
    ok, why = probe.available()
    assert ok, why
    probe.start()
    start = time.time()
    change()
    end = time.time()
    trace = probe.stop()
    assert len(trace.timestamps) == 2
    return trace, Window(start=start, end=end, inferences=inferences)


def span(trace: Trace) -> float:
    return trace.timestamps[-1] - trace.timestamps[0]


def test_probes_are_registered() -> None:
    assert PROBES["rapl"] is RaplProbe
    assert PROBES["thermal_zones"] is ThermalZonesProbe
    assert PROBES["cpufreq"] is CpufreqProbe
    assert PROBES["cpu_throttle"] is CpuThrottleProbe


# --- rapl ---------------------------------------------------------------------------------------


def test_rapl_sums_packages_across_a_wraparound(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel")
    zones = root / RAPL

    def work() -> None:
        put(zones / "intel-rapl:0/energy_uj", 3_500_000)  # +2.5 J
        # Wraps at 262143328850: 171150 + 262143328850 - 262143000000 = +0.5 J.
        put(zones / "intel-rapl:1/energy_uj", 171_150)
        # Subdomains are not added: core is inside its package, dram only on some hosts.
        put(zones / "intel-rapl:0:0/energy_uj", 900_000_000)
        put(zones / "intel-rapl:1:1/energy_uj", 900_000_000)

    probe = RaplProbe(root, interval_s=SLOW)
    trace, window = measure(probe, work, inferences=1000)
    assert set(trace.channels) == {"intel-rapl:0/energy_uj", "intel-rapl:0/max_energy_range_uj",
                                   "intel-rapl:1/energy_uj", "intel-rapl:1/max_energy_range_uj"}
    assert trace.units["intel-rapl:1/energy_uj"] == "uJ"
    result = probe.summarize(trace, window)
    assert result.missing == {}
    # 3 J over the readings' span; the window's inferences are charged only the window's share
    # (mean power x window length), not the idle margins around it.
    assert result.metrics["energy_per_inference_mj"] == pytest.approx(
        3.0 * window.seconds / span(trace))  # (3 J / span) x window / 1000 inferences, in mJ
    assert result.metrics["power_mean_w"] == pytest.approx(3.0 / span(trace))


def test_rapl_multi_step_trace_with_wrap_and_failed_reading() -> None:
    trace = Trace("rapl", timestamps=[0.0, 1.0, 2.0, 3.0, 4.0], channels={
        "intel-rapl:0/energy_uj": [100, 200, math.nan, 50, 150],
        "intel-rapl:0/max_energy_range_uj": [1000] * 5,
    })
    # Complete readings 0, 1, 3, 4: +100, wrap 50 + 1000 - 200 = +850, +100: 1050 uJ over 4 s.
    result = RaplProbe().summarize(trace, Window(start=0.0, end=4.0, inferences=3))
    assert result.metrics == {"energy_per_inference_mj": pytest.approx(0.35),
                              "power_mean_w": pytest.approx(1050e-6 / 4)}


def test_rapl_counts_only_msr_packages_on_a_client(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel-client")
    zones = root / RAPL

    def work() -> None:
        put(zones / "intel-rapl:0/energy_uj", 6_000_000)  # +1 J
        put(zones / "intel-rapl:1/energy_uj", 59_000_000)  # psys: contains the package
        put(zones / "intel-rapl-mmio:0/energy_uj", 6_000_000)  # the same counter over MMIO

    probe = RaplProbe(root, interval_s=SLOW)
    trace, window = measure(probe, work, inferences=10)
    assert {name.split("/")[0] for name in trace.channels} == {"intel-rapl:0"}
    assert probe.summarize(trace, window).metrics["energy_per_inference_mj"] == pytest.approx(
        100.0 * window.seconds / span(trace))  # 1 J / 10 inferences, window's share of the span


def test_rapl_on_amd_uses_the_same_zones(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-amd")
    probe = RaplProbe(root, interval_s=SLOW)
    trace, window = measure(probe, lambda: put(root / RAPL / "intel-rapl:0/energy_uj", 72_000_000), 4)
    assert probe.summarize(trace, window).metrics["energy_per_inference_mj"] == pytest.approx(
        500.0 * window.seconds / span(trace))  # 2 J / 4 inferences, window's share of the span


def test_rapl_without_inferences_still_gives_power(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-amd")
    probe = RaplProbe(root, interval_s=SLOW)
    trace, window = measure(probe, lambda: put(root / RAPL / "intel-rapl:0/energy_uj", 71_000_000), 0)
    result = probe.summarize(trace, window)
    assert result.metrics == {"power_mean_w": pytest.approx(1.0 / span(trace))}
    assert "no inference" in result.missing["energy_per_inference_mj"]


def test_rapl_counter_lost_mid_window_is_missing_not_guessed(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel")
    probe = RaplProbe(root, interval_s=SLOW)
    trace, window = measure(probe, lambda: (root / RAPL / "intel-rapl:1/energy_uj").unlink())
    assert math.isnan(trace.channels["intel-rapl:1/energy_uj"][-1])
    result = probe.summarize(trace, window)
    assert result.metrics == {}
    assert "do not bracket the window" in result.missing["power_mean_w"]


def test_rapl_trace_that_starts_late_is_missing() -> None:
    trace = Trace("rapl", timestamps=[1.0, 2.0], channels={"intel-rapl:0/energy_uj": [1, 2]})
    result = RaplProbe().summarize(trace, Window(start=0.5, end=2.0, inferences=1))
    assert "first is +0.500000 s from its start" in result.missing["energy_per_inference_mj"]


def test_rapl_without_package_domain(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel-client")
    shutil.rmtree(root / RAPL / "intel-rapl:0")
    ok, why = RaplProbe(root).available()
    assert not ok
    assert why == (f"no RAPL package domain under {root / RAPL} "
                   f"(found only intel-rapl:1 (psys), not package domains)")


def deny_energy_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``energy_uj`` unreadable as on Linux >= 5.10 for non-root users (mode 0400 root)."""
    real = Path.read_text

    def read_text(path: Path, *args: Any, **kwargs: Any) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_rapl_permission_denied_by_file_mode(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel")
    energy = root / RAPL / "intel-rapl:0/energy_uj"
    energy.chmod(0)
    ok, why = RaplProbe(root).available()
    assert not ok
    assert why.startswith(f"permission denied reading {energy} (RAPL energy is root-only since "
                          f"Linux 5.10 for security")


def test_rapl_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Runs as root too, where chmod cannot make a file unreadable.
    root = host(tmp_path, "cpu-intel")
    deny_energy_reads(monkeypatch)
    ok, why = RaplProbe(root).available()
    assert not ok
    assert why.startswith(f"permission denied reading {root / RAPL / 'intel-rapl:0/energy_uj'} "
                          f"(RAPL energy is root-only since Linux 5.10 for security")


# --- thermal zones ------------------------------------------------------------------------------


def test_thermal_peak_over_zones_and_readings(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel")
    zones = root / THERMAL

    def work() -> None:
        put(zones / "thermal_zone1/temp", 71_000)
        put(zones / "thermal_zone0/temp", 30_000)

    probe = ThermalZonesProbe(root, interval_s=SLOW)
    trace, window = measure(probe, work)
    assert trace.channels == {"thermal_zone0:acpitz": [27.8, 30.0],
                              "thermal_zone1:x86_pkg_temp": [45.0, 71.0]}
    assert trace.units["thermal_zone1:x86_pkg_temp"] == "°C"
    assert probe.summarize(trace, window).metrics == {"temperature_peak_c": 71.0}


def test_thermal_zones_restrict_the_peak(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel")
    probe = ThermalZonesProbe(root, interval_s=SLOW, zones=["cpu-thermal", "acpi.*"])
    trace, window = measure(probe, lambda: put(root / THERMAL / "thermal_zone1/temp", 99_000))
    assert list(trace.channels) == ["thermal_zone0:acpitz"]
    assert probe.summarize(trace, window).metrics == {"temperature_peak_c": 27.8}


def test_thermal_peak_between_edges_and_zone_failing_mid_window() -> None:
    trace = Trace("thermal_zones", timestamps=[0.0, 1.0, 2.0, 3.0], channels={
        "thermal_zone0:acpitz": [40.0, 80.5, 50.0, math.nan],
        "thermal_zone1:x86_pkg_temp": [math.nan, math.nan, math.nan, 60.0],
    })
    result = ThermalZonesProbe().summarize(trace, Window(start=0.0, end=3.0, inferences=1))
    assert result.metrics == {"temperature_peak_c": 80.5}


def test_unreadable_thermal_zone_is_skipped(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel")
    zone = root / THERMAL / "thermal_zone2"
    zone.mkdir()
    put(zone / "type", "iwlwifi_1")
    (zone / "temp").mkdir()  # reading it fails with an OSError, as ENODATA does on a real zone
    probe = ThermalZonesProbe(root, interval_s=SLOW)
    trace, window = measure(probe, lambda: None)
    assert "thermal_zone2:iwlwifi_1" not in trace.channels
    assert probe.summarize(trace, window).metrics == {"temperature_peak_c": 45.0}


def test_thermal_zone_lost_mid_window_keeps_the_others(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel")
    probe = ThermalZonesProbe(root, interval_s=SLOW)
    trace, window = measure(probe, lambda: (root / THERMAL / "thermal_zone1/temp").unlink())
    assert math.isnan(trace.channels["thermal_zone1:x86_pkg_temp"][-1])
    assert probe.summarize(trace, window).metrics == {"temperature_peak_c": 45.0}


def test_thermal_unavailable_reasons(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel")
    ok, why = ThermalZonesProbe(root, zones=["cpu-thermal"]).available()
    assert not ok
    assert why == (f"no thermal zone under {root / THERMAL} has a type matching ['cpu-thermal'] "
                   f"(types: acpitz, x86_pkg_temp)")
    for zone in ("thermal_zone0", "thermal_zone1"):
        (root / THERMAL / zone / "temp").unlink()
    ok, why = ThermalZonesProbe(root).available()
    assert not ok
    assert why.startswith(f"no readable thermal zone under {root / THERMAL}: ")
    assert f"{root / THERMAL / 'thermal_zone1/temp'} does not exist" in why


def test_thermal_zones_must_be_types_or_regexes() -> None:
    with pytest.raises(ValueError, match=r"zones\[1\] must be a zone type or a regular expression, "
                                         r"got '\('"):
        ThermalZonesProbe(zones=["acpitz", "("])


# --- cpufreq ------------------------------------------------------------------------------------


def test_cpufreq_clock_drop_per_cpu_then_averaged(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel")
    cpus = root / CPUS

    def work() -> None:
        put(cpus / "cpu0/cpufreq/scaling_cur_freq", 4_800_000)
        put(cpus / "cpu1/cpufreq/scaling_cur_freq", 1_200_000)

    probe = CpufreqProbe(root, interval_s=SLOW)
    trace, window = measure(probe, work)
    assert trace.units["cpu0/scaling_cur_freq"] == "kHz"
    # cpu0: mean(2.4, 4.8) GHz = 3.6 of 4.8, 25 % below; cpu1: mean(3.6, 1.2) = 2.4, 50 % below.
    assert probe.summarize(trace, window).metrics == {"clock_drop_pct": pytest.approx(37.5)}


def test_cpufreq_on_amd_skips_a_cpu_it_cannot_read(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-amd")
    put(root / CPUS / "cpu1/cpufreq/scaling_cur_freq", "<unknown>")
    probe = CpufreqProbe(root, interval_s=SLOW)
    trace, window = measure(probe, lambda: None)
    assert set(trace.channels) == {"cpu0/scaling_cur_freq", "cpu0/cpuinfo_max_freq"}
    # 3.0 of 6.0 GHz.
    assert probe.summarize(trace, window).metrics == {"clock_drop_pct": pytest.approx(50.0)}


def test_cpufreq_uses_the_highest_maximum_seen() -> None:
    trace = Trace("cpufreq", timestamps=[0.0, 1.0], channels={
        "cpu0/scaling_cur_freq": [1000.0, 1000.0], "cpu0/cpuinfo_max_freq": [4000.0, 2000.0]})
    result = CpufreqProbe().summarize(trace, Window(start=0.0, end=1.0, inferences=1))
    assert result.metrics == {"clock_drop_pct": 75.0}


# --- thermal throttle ---------------------------------------------------------------------------


def test_throttle_without_throttling_is_zero(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel")
    probe = CpuThrottleProbe(root, interval_s=SLOW)
    trace, window = measure(probe, lambda: None)
    assert trace.units["cpu0/core_throttle_total_time_ms"] == "ms"
    assert trace.units["cpu0/core_throttle_count"] == "events"
    assert probe.summarize(trace, window).metrics == {"throttled_fraction": 0.0}


def test_throttle_time_credited_from_before_the_window_is_clipped(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel")
    probe = CpuThrottleProbe(root, interval_s=SLOW)
    path = root / CPUS / "cpu1/thermal_throttle/package_throttle_total_time_ms"
    trace, window = measure(probe, lambda: put(path, 900 + 60_000))
    assert probe.summarize(trace, window).metrics == {"throttled_fraction": 1.0}


def test_throttle_fraction_is_the_largest_share() -> None:
    trace = Trace("cpu_throttle", timestamps=[0.0, 1.0, 2.0], channels={
        "cpu0/core_throttle_total_time_ms": [250, 500, 750],  # 500 ms of 2 s
        "cpu1/package_throttle_total_time_ms": [900, 1400, 1900],  # 1000 ms of 2 s
        "cpu1/package_throttle_count": [7, 8, 9],
    })
    result = CpuThrottleProbe().summarize(trace, Window(start=0.5, end=1.5, inferences=1))
    assert result.metrics == {"throttled_fraction": 0.5}


def test_throttle_counts_only_gives_no_fraction(tmp_path: Path) -> None:
    root = host(tmp_path, "cpu-intel")
    for path in (root / CPUS).glob("cpu*/thermal_throttle/*_time_ms"):
        path.unlink()  # an older kernel: event counts only
    folder = root / CPUS

    def work() -> None:
        put(folder / "cpu0/thermal_throttle/core_throttle_count", 5)
        put(folder / "cpu1/thermal_throttle/core_throttle_count", 4)
        put(folder / "cpu0/thermal_throttle/package_throttle_count", 8)
        put(folder / "cpu1/thermal_throttle/package_throttle_count", 8)

    probe = CpuThrottleProbe(root, interval_s=SLOW)
    trace, window = measure(probe, work)
    result = probe.summarize(trace, window)
    assert result.metrics == {}
    assert result.missing == {"throttled_fraction": (
        "kernel reports throttle event counts but not time; 3 events in window "
        "(2 core and 1 package events, the most seen by one CPU)")}


def test_throttle_counter_reset_is_missing() -> None:
    trace = Trace("cpu_throttle", timestamps=[0.0, 1.0],
                  channels={"cpu0/core_throttle_total_time_ms": [500, 20]})
    result = CpuThrottleProbe().summarize(trace, Window(start=0.0, end=1.0, inferences=1))
    assert "went down from 500 to 20" in result.missing["throttled_fraction"]


# --- every probe --------------------------------------------------------------------------------


@pytest.mark.parametrize(("probe_class", "reason"), [
    (RaplProbe, "no RAPL powercap domain under {root}/sys/class/powercap"),
    (ThermalZonesProbe, "no thermal zone under {root}/sys/class/thermal"),
    (CpufreqProbe, "no cpufreq folder under {root}/sys/devices/system/cpu/cpu*/"),
    (CpuThrottleProbe, "no thermal_throttle folder under {root}/sys/devices/system/cpu/cpu*/"),
])
def test_absent_sources_say_so(tmp_path: Path, probe_class: type[SysfsProbe[Any]], reason: str) -> None:
    root = host(tmp_path, "cpu-absent")
    ok, why = probe_class(root).available()
    assert not ok
    assert why.startswith(reason.format(root=root))
    assert probe_class(root).read() == {}  # read() never raises, even when unavailable


@pytest.mark.parametrize("probe_class", PROBE_CLASSES)
def test_on_this_host(probe_class: type[SysfsProbe[Any]]) -> None:
    """On the real ``/``: a specific reason when the sensor is absent (as on a bare VM), else a
    short real window where every metric is either measured or missing with a reason."""
    probe = probe_class()
    ok, why = probe.available()
    if not ok:
        assert why.strip()
        assert "/sys/" in why
        return
    probe.start()
    start = time.time()
    time.sleep(0.05)
    end = time.time()
    result = probe.summarize(probe.stop(), Window(start=start, end=end, inferences=1))
    for metric in probe.provides:
        assert metric in result.metrics or result.missing[metric].strip()
