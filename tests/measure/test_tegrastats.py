"""tegrastats: the line parser on real-format lines of JetPack 4, 5 and 6, and the fallback probe."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from dse.measure.telemetry.base import PROBES, Trace, Window
from dse.measure.telemetry.tegrastats import (
    CpuCore,
    RailPower,
    TegrastatsProbe,
    channel_unit,
    parse_tegrastats,
    sample_channels,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jetson" / "tegrastats"


def lines(name: str) -> list[str]:
    return (FIXTURES / f"{name}.txt").read_text().splitlines()


def trace_of(name: str, timestamps: list[float]) -> Trace:
    trace = Trace("tegrastats")
    for stamp, line in zip(timestamps, lines(name), strict=True):
        trace.add(stamp, sample_channels(parse_tegrastats(line)))
    return trace


def test_orin_jetpack5_agx() -> None:
    idle, busy = (parse_tegrastats(line) for line in lines("orin-jp5"))
    assert (idle.ram_used_mb, idle.ram_total_mb, idle.swap_total_mb) == (5096, 30536, 15268)
    assert idle.timestamp is None
    assert len(idle.cpus) == 12 and idle.cpus[0] == CpuCore(2.0, 729.0)
    assert idle.cpus[8:] == (CpuCore(None, None),) * 4  # "off"
    assert (idle.emc_load_pct, idle.emc_freq_mhz) == (0.0, 2133.0)
    assert (idle.gr3d_load_pct, idle.gr3d_freq_mhz) == (0.0, 305.0)  # "[305,0]": highest GPC
    assert idle.temperatures_c["tj"] == 49.593
    assert "CV0" not in idle.temperatures_c and "GPU" not in idle.temperatures_c  # -256C
    assert list(idle.rails) == ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"]
    assert busy.rails["VDD_GPU_SOC"] == RailPower(21043.0, 12310.0)
    assert (busy.gr3d_load_pct, busy.gr3d_freq_mhz, busy.emc_freq_mhz) == (99.0, 1300.0, 3199.0)
    assert busy.temperatures_c["GPU"] == 55.781


def test_orin_jetpack5_nano_single_gpc() -> None:
    sample = parse_tegrastats(lines("orin-nano-jp5")[0])
    assert sample.gr3d_freq_mhz == 624.0
    assert sample.rails["VDD_IN"] == RailPower(4999.0, 4999.0)


def test_orin_jetpack6_with_date_prefix() -> None:
    idle, busy = (parse_tegrastats(line) for line in lines("orin-jp6"))
    assert idle.timestamp == "11-30-2026 12:00:00"
    assert (idle.ram_used_mb, idle.ram_total_mb) == (1918, 7620)
    assert idle.emc_load_pct is None and idle.emc_freq_mhz is None  # not printed by r36
    assert (idle.gr3d_load_pct, idle.gr3d_freq_mhz) == (0.0, None)  # "GR3D_FREQ 0%"
    assert idle.temperatures_c == {"cpu": 46.968, "soc2": 45.343, "soc0": 46.093, "gpu": 45.062,
                                   "tj": 46.968, "soc1": 45.406}
    assert busy.timestamp == "11-30-2026 12:00:01"
    assert (busy.emc_load_pct, busy.emc_freq_mhz, busy.gr3d_freq_mhz) == (38.0, 3199.0, 1020.0)
    assert busy.rails == {"VDD_IN": RailPower(9873.0, 7076.0),
                          "VDD_CPU_GPU_CV": RailPower(4713.0, 2597.0),
                          "VDD_SOC": RailPower(2215.0, 1828.0)}


def test_xavier_jetpack4_rails_without_units() -> None:
    sample = parse_tegrastats(lines("xavier-jp4")[0])
    assert sample.rails == {"GPU": RailPower(0.0, 0.0), "CPU": RailPower(311.0, 311.0),
                            "SOC": RailPower(1243.0, 1243.0), "CV": RailPower(0.0, 0.0),
                            "VDDRQ": RailPower(155.0, 155.0), "SYS5V": RailPower(1577.0, 1577.0)}
    assert sample.temperatures_c["GPU"] == 37.0 and sample.temperatures_c["PMIC"] == 100.0
    assert (sample.gr3d_load_pct, sample.gr3d_freq_mhz) == (0.0, 1377.0)
    assert sample.cpus[:2] == (CpuCore(1.0, 1190.0), CpuCore(0.0, 1190.0))


def test_nano_jetpack4_iram_is_not_a_rail() -> None:
    sample = parse_tegrastats(lines("nano-jp4")[0])
    assert list(sample.rails) == ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"]
    assert sample_channels(sample)["power.total"] == pytest.approx(1.165)  # the input rail alone


def test_a_line_that_is_not_tegrastats() -> None:
    with pytest.raises(ValueError, match="not a tegrastats line"):
        parse_tegrastats("NVPM WARN: patching tpc_pg_mask\n")


def test_channels_and_units() -> None:
    agx = sample_channels(parse_tegrastats(lines("orin-jp5")[0]))
    # No module-input rail on AGX Orin: the sum of the connected rails.
    assert agx["power.total"] == pytest.approx(3.577 + 0.795 + 3.629 + 0.402)
    assert agx["gr3d.mhz"] == 305.0 and agx["ram.used_mb"] == 5096.0
    assert {channel_unit(name) for name in agx} == {"W", "°C", "MHz", "%", "MB"}


def test_summarize_orin_jetpack6() -> None:
    trace = trace_of("orin-jp6", [10.0, 12.0])
    result = TegrastatsProbe().summarize(trace, Window(start=10.0, end=12.0, inferences=10))
    # VDD_IN 4.279 W then 9.873 W: mean 7.076 W; x 2 s / 10 inferences = 1.4152 J each.
    assert result.metrics == {"power_mean_w": pytest.approx(7.076),
                              "energy_per_inference_mj": pytest.approx(1415.2),
                              "temperature_peak_c": 52.937}
    assert result.missing == {}


def test_summarize_xavier_jetpack4() -> None:
    trace = trace_of("xavier-jp4", [0.0, 1.0])
    result = TegrastatsProbe().summarize(trace, Window(0.0, 1.0, 1))
    # 3.286 W then 9.622 + 1.087 + 2.641 + 0 + 1.243 + 2.173 = 16.766 W.
    assert result.metrics["power_mean_w"] == pytest.approx((3.286 + 16.766) / 2)
    assert result.metrics["temperature_peak_c"] == 44.0  # PMIC's fixed 100 °C is not a reading


def test_summarize_without_lines() -> None:
    result = TegrastatsProbe().summarize(Trace("tegrastats"), Window(0.0, 0.05, 1))
    assert set(result.missing) == {"power_mean_w", "energy_per_inference_mj", "temperature_peak_c"}
    assert result.missing["power_mean_w"].startswith("tegrastats printed no line in the window")


@pytest.mark.skipif(shutil.which("tegrastats") is not None, reason="this machine has tegrastats")
def test_not_available_here(tmp_path: Path) -> None:
    assert PROBES["tegrastats"] is TegrastatsProbe
    assert TegrastatsProbe().available() == (False, "tegrastats not found in PATH")
    missing = tmp_path / "tegrastats"
    assert TegrastatsProbe(executable=missing).available() == (
        False, f"tegrastats not found or not executable at {missing}")


def test_life_cycle_with_a_stand_in_executable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A script in the real install place prints recorded lines, as tegrastats would, then waits.
    executable = tmp_path / "usr/bin/tegrastats"
    executable.parent.mkdir(parents=True)
    arguments = tmp_path / "arguments"
    executable.write_text(f'#!/bin/sh\necho "$@" > {arguments}\necho "NVPM WARN: not a report"\n'
                          f"cat {FIXTURES / 'orin-jp6.txt'}\nexec sleep 30\n")
    executable.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin")
    probe = TegrastatsProbe(root=tmp_path, interval_s=0.25)
    assert probe.available() == (True, "")
    probe.start()
    deadline = time.monotonic() + 10
    while len(probe.read()) == 0 or probe.read()["power.VDD_IN"] != 9.873:
        assert time.monotonic() < deadline, "the stand-in tegrastats printed nothing"
        time.sleep(0.01)
    trace = probe.stop()
    assert arguments.read_text().split() == ["--interval", "250"]
    assert trace.channels["power.VDD_IN"] == [4.279, 9.873]
    assert trace.units["power.VDD_IN"] == "W" and trace.units["temp.tj"] == "°C"
    assert probe.skipped_lines == 1
