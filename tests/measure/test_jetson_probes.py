"""Jetson sysfs probes driven through their life cycle on fixture trees in the real L4T layouts."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from dse.measure.telemetry.base import PROBES, Trace, Window
from dse.measure.telemetry.jetson import l4t_release, parse_nvpmodel_query, power_mode
from dse.measure.telemetry.jetson_clocks import JetsonClocksProbe
from dse.measure.telemetry.jetson_power import JetsonPowerProbe, overcurrent_events

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jetson"
ORIN_INA = "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1"
XAVIER_INA = "sys/bus/i2c/drivers/ina3221x"
NEVER = 3600.0  # sampler interval: only the start and stop readings are taken


def tree(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def write(root: Path, relative: str, value: int) -> None:
    (root / relative).write_text(f"{value}\n")


def test_probes_are_registered() -> None:
    assert PROBES["jetson_power"] is JetsonPowerProbe
    assert PROBES["jetson_clocks"] is JetsonClocksProbe


def test_other_socs_gpus_are_not_a_jetson(tmp_path: Path) -> None:
    (tmp_path / "sys/class/devfreq/ff9a0000.gpu").mkdir(parents=True)  # a Mali GPU (Rockchip)
    ok, why = JetsonClocksProbe(tmp_path).available()
    assert not ok and "not a Jetson?" in why


def test_nothing_here_is_a_jetson(tmp_path: Path) -> None:
    for root in (Path("/"), tmp_path):
        ok, why = JetsonPowerProbe(root).available()
        assert not ok and "no INA3221 power monitor" in why and "not a Jetson?" in why
        ok, why = JetsonClocksProbe(root).available()
        assert not ok and "no Jetson GPU devfreq node" in why and "not a Jetson?" in why


def test_orin_power_life_cycle(tmp_path: Path) -> None:
    root = tree("orin-jp6", tmp_path)
    probe = JetsonPowerProbe(root, interval_s=NEVER)
    assert probe.available() == (True, "")
    assert probe.total_source == "rail VDD_IN (module input)"
    probe.start()
    write(root, f"{ORIN_INA}/curr1_input", 2000)  # VDD_IN: 5 V x 1 A -> 5 V x 2 A
    write(root, "sys/class/hwmon/hwmon0/oc1_event_cnt", 2)
    write(root, f"{ORIN_INA}/curr1_crit_alarm", 1)
    trace = probe.stop()

    assert trace.channels["power.VDD_IN"] == [5.0, 10.0]
    assert trace.channels["power.VDD_SOC"] == [1.5, 1.5]
    assert trace.units["power.VDD_IN"] == "W"
    # Energy comes from the readings that bracket the window (derived.window_indices); the start
    # and stop readings carry wall-clock stamps, so put them at this window's edges.
    trace.timestamps[:] = [100.0, 102.0]
    result = probe.summarize(trace, Window(start=100.0, end=102.0, inferences=50))
    # Trapezoid over two readings: (5 + 10) / 2 W; 7.5 W x 2 s / 50 inferences = 0.3 J.
    assert result.metrics == {"power_mean_w": pytest.approx(7.5),
                              "energy_per_inference_mj": pytest.approx(300.0)}
    assert result.missing == {}
    events = overcurrent_events(trace)
    assert events["oc1_event_cnt"] == 2 and events["oc2_event_cnt"] == 0
    assert events["VDD_IN.crit"] == 1 and events["VDD_IN.max"] == 0 and events["VDD_SOC.crit"] == 0


def test_xavier_power_sums_its_rails(tmp_path: Path) -> None:
    root = tree("xavier-jp4", tmp_path)
    probe = JetsonPowerProbe(root, interval_s=NEVER)
    assert probe.available() == (True, "")
    assert probe.total_source.startswith("sum of rails GPU, CPU, SOC, CV, VDDRQ, SYS5V")
    probe.start()
    write(root, f"{XAVIER_INA}/1-0040/iio:device0/in_power0_input", 5000)  # GPU rail 0 -> 5 W
    trace = probe.stop()
    # 0 + 0.311 + 1.243 + 0 + 0.155 + 1.577 = 3.286 W at start, 8.286 W at stop.
    assert trace.channels["power.total"] == pytest.approx([3.286, 8.286])
    trace.timestamps[:] = [0.0, 4.0]  # the start and stop readings at the window's edges
    result = probe.summarize(trace, Window(start=0.0, end=4.0, inferences=1000))
    assert result.metrics["power_mean_w"] == pytest.approx(5.786)
    assert result.metrics["energy_per_inference_mj"] == pytest.approx(5.786 * 4 / 1000 * 1e3)
    assert overcurrent_events(trace) == {}


def test_xavier_power_from_voltage_and_current(tmp_path: Path) -> None:
    root = tree("xavier-jp4", tmp_path)
    for power_file in root.glob(f"{XAVIER_INA}/*/iio:device*/in_power*_input"):
        power_file.unlink()
    reading = JetsonPowerProbe(root).read()
    # mV x mA / 1e6: CPU 19152 x 16, SOC 19152 x 65, VDDRQ 19152 x 8, SYS5V 4988 x 316.
    assert reading["power.CPU"] == pytest.approx(0.306432)
    assert reading["power.total"] == pytest.approx(0.306432 + 1.24488 + 0.153216 + 1.576208)


def test_input_rail_without_current_is_missing_not_summed(tmp_path: Path) -> None:
    root = tree("orin-jp6", tmp_path)
    (root / ORIN_INA / "curr1_input").unlink()
    probe = JetsonPowerProbe(root, interval_s=NEVER)
    assert probe.available() == (True, "")  # the other rails still read
    probe.start()
    trace = probe.stop()
    assert "power.total" not in trace.channels and "power.VDD_IN" not in trace.channels
    result = probe.summarize(trace, Window(0.0, 1.0, 10))
    why = "rail VDD_IN has no current file; board power (rail VDD_IN (module input)) unknown"
    assert result.metrics == {}
    assert result.missing == {"power_mean_w": why, "energy_per_inference_mj": why}


def test_no_readable_rail_is_unavailable(tmp_path: Path) -> None:
    root = tree("orin-jp6", tmp_path)
    for current in (root / ORIN_INA).glob("curr?_input"):
        current.unlink()
    ok, why = JetsonPowerProbe(root).available()
    assert not ok and why.startswith("rail VDD_IN has no current file; rail VDD_CPU_GPU_CV")


def test_agx_orin_hwmon_skips_unconnected_channels(tmp_path: Path) -> None:
    # AGX Orin (L4T r35): two INA3221 chips, no module-input rail, "NC" channels on the second.
    layout = {"1-0040": ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"],
              "1-0041": ["NC", "VDDQ_VDD2_1V8AO", "NC"]}
    for address, labels in layout.items():
        hwmon = tmp_path / f"sys/bus/i2c/drivers/ina3221/{address}/hwmon/hwmon{address[-1]}"
        hwmon.mkdir(parents=True)
        for n, label in enumerate(labels, start=1):
            (hwmon / f"in{n}_label").write_text(f"{label}\n")
            (hwmon / f"in{n}_input").write_text("5000\n")
            (hwmon / f"curr{n}_input").write_text("400\n")
    probe = JetsonPowerProbe(tmp_path)
    assert [rail.name for rail in probe.rails] == ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0",
                                                    "VDDQ_VDD2_1V8AO"]
    assert probe.read()["power.total"] == pytest.approx(4 * 2.0)


def test_power_mean_is_time_weighted_and_skips_gaps(tmp_path: Path) -> None:
    trace = Trace("jetson_power", timestamps=[0.0, 1.0, 3.0, 4.0],
                  channels={"power.total": [2.0, 4.0, math.nan, 4.0]})
    result = JetsonPowerProbe(tree("orin-jp6", tmp_path)).summarize(trace, Window(0.0, 4.0, 3))
    # Gap at t=3 interpolated: area 1 x (2+4)/2 + 3 x (4+4)/2 = 15 J over 4 s.
    assert result.metrics["power_mean_w"] == pytest.approx(3.75)
    assert result.metrics["energy_per_inference_mj"] == pytest.approx(3.75 * 4 / 3 * 1e3)


def test_one_reading_is_not_a_mean(tmp_path: Path) -> None:
    probe = JetsonPowerProbe(tree("orin-jp6", tmp_path))
    trace = Trace("jetson_power", timestamps=[0.0, 1.0], channels={"power.total": [5.0, math.nan]})
    result = probe.summarize(trace, Window(0.0, 1.0, 1))
    # The only valid reading is at the start, none at or after the end: the window is not
    # bracketed, and the gap is the reason (derived's rule for energy and mean power).
    assert result.missing["power_mean_w"] == (
        "power.total: the valid readings do not bracket the window: the first is +0.000000 s from "
        "its start and the last -1.000000 s from its end (need <= 0 and >= 0)")
    assert result.missing["energy_per_inference_mj"] == result.missing["power_mean_w"]


def test_no_rail_at_all_is_missing_with_its_reason(tmp_path: Path) -> None:
    trace = Trace("jetson_power", timestamps=[0.0, 1.0], channels={"power.total": [5.0, 5.0]})
    result = JetsonPowerProbe(tmp_path).summarize(trace, Window(0.0, 1.0, 1))
    assert result.missing["power_mean_w"] == "no INA3221 rail found (not a Jetson?)"


def test_orin_clocks_life_cycle(tmp_path: Path) -> None:
    root = tree("orin-jp6", tmp_path)
    probe = JetsonClocksProbe(root, interval_s=NEVER)
    assert probe.available() == (True, "")
    assert probe.clock_source == "GPU devfreq 17000000.gpu"
    assert "debugfs" in probe.notes["emc.mhz"]
    probe.start()
    write(root, "sys/class/devfreq/17000000.gpu/cur_freq", 1020000000)  # 510 -> 1020 MHz
    write(root, "sys/class/thermal/thermal_zone3/temp", 61250)  # tj-thermal
    trace = probe.stop()

    assert trace.channels["gpu.mhz"] == [510.0, 1020.0]
    assert trace.channels["cpu1.mhz"] == [729.6, 729.6]
    assert trace.channels["temp.cv0-thermal"] == [-256.0, -256.0]
    assert trace.units["temp.tj-thermal"] == "°C" and trace.units["cpu0.mhz"] == "MHz"
    result = probe.summarize(trace, Window(0.0, 1.0, 1))
    # Mean GPU clock (510 + 1020) / 2 = 765 MHz against 1020 MHz: 25 % below.
    assert result.metrics == {"clock_drop_pct": pytest.approx(25.0), "temperature_peak_c": 61.25}


def test_clock_drop_falls_back_to_cpus(tmp_path: Path) -> None:
    root = tree("orin-jp6", tmp_path)
    shutil.rmtree(root / "sys/class/devfreq/17000000.gpu")
    write(root, "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", 864000)
    write(root, "sys/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq", 1728000)
    probe = JetsonClocksProbe(root, interval_s=NEVER)
    assert probe.available() == (True, "")  # nv_tegra_release still marks a Jetson
    assert probe.clock_source == "CPU cpufreq"
    probe.start()
    write(root, "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", 1728000)
    result = probe.summarize(probe.stop(), Window(0.0, 1.0, 1))
    # cpu0 averages 1296/1728 = 0.75 of its max, cpu1 1.0: mean 0.875, so 12.5 % below.
    assert result.metrics["clock_drop_pct"] == pytest.approx(12.5)


def test_xavier_clocks_skip_zones_that_are_not_sensors(tmp_path: Path) -> None:
    probe = JetsonClocksProbe(tree("xavier-jp4", tmp_path), interval_s=NEVER)
    probe.start()
    trace = probe.stop()
    assert trace.channels["emc.mhz"] == [2133.0, 2133.0]
    assert "emc.mhz" not in probe.notes
    result = probe.summarize(trace, Window(0.0, 1.0, 1))
    # PMIC-Die's fixed 100 °C and thermal-fan-est's estimate are left out; Tdiode_tegra is hottest.
    assert result.metrics["temperature_peak_c"] == 39.5
    assert result.metrics["clock_drop_pct"] == pytest.approx(100 * (1 - 114.75 / 1377))


def test_no_valid_temperature_is_missing(tmp_path: Path) -> None:
    root = tree("orin-jp6", tmp_path)
    for temp in root.glob("sys/class/thermal/thermal_zone*/temp"):
        temp.write_text("-256000\n")
    probe = JetsonClocksProbe(root, interval_s=NEVER)
    probe.start()
    result = probe.summarize(probe.stop(), Window(0.0, 1.0, 1))
    assert "temperature_peak_c" not in result.metrics
    assert result.missing["temperature_peak_c"].startswith("no valid reading from thermal zones")


def test_provenance_of_the_board(tmp_path: Path) -> None:
    orin, xavier = tree("orin-jp6", tmp_path), tree("xavier-jp4", tmp_path)
    assert l4t_release(orin) == "R36.4.0"
    assert l4t_release(xavier) == "R32.7.1"
    assert power_mode(orin) == "MAXN_SUPER"
    assert power_mode(xavier) == "MAXN"
    (xavier / "var/lib/nvpmodel/status").write_text("pmode:0007\n")
    assert power_mode(xavier) == "7"  # a mode the configuration does not name
    assert l4t_release(tmp_path) is None and power_mode(tmp_path) is None
    assert parse_nvpmodel_query("NV Power Mode: MAXN\n0\n") == "MAXN"
    assert parse_nvpmodel_query("NVPM ERROR: failed to read") is None


def test_power_units_and_provenance(tmp_path: Path) -> None:
    root = tree("orin-jp6", tmp_path)
    probe = JetsonPowerProbe(root, interval_s=NEVER)
    probe.start()
    write(root, "sys/class/hwmon/hwmon0/oc1_event_cnt", 2)
    write(root, f"{ORIN_INA}/curr1_crit_alarm", 1)
    trace = probe.stop()
    assert trace.units["power.total"] == "W" and trace.units["power.VDD_SOC"] == "W"
    assert trace.units["oc_count.oc1_event_cnt"] == "count"
    assert trace.units["oc_alarm.VDD_IN.crit"] == "flag"
    assert set(trace.units) == set(trace.channels)
    # Zero counts (oc2, oc3, the other alarms) are left out.
    assert probe.provenance(trace) == {"total_source": "rail VDD_IN (module input)",
                                       "overcurrent.oc1_event_cnt": "2",
                                       "overcurrent.VDD_IN.crit": "1"}


def test_xavier_power_provenance_has_no_overcurrent(tmp_path: Path) -> None:
    probe = JetsonPowerProbe(tree("xavier-jp4", tmp_path), interval_s=NEVER)
    probe.start()
    assert probe.provenance(probe.stop()) == {"total_source": probe.total_source}


def test_clocks_units_and_provenance(tmp_path: Path) -> None:
    orin = JetsonClocksProbe(tree("orin-jp6", tmp_path), interval_s=NEVER)
    orin.start()
    trace = orin.stop()
    assert set(trace.channels) <= set(trace.units)
    assert trace.units["cpu1.max_mhz"] == "MHz" and trace.units["gpu.mhz"] == "MHz"
    assert orin.provenance(trace) == {"clock_source": "GPU devfreq 17000000.gpu",
                                      "note.emc.mhz": orin.notes["emc.mhz"]}
    xavier = JetsonClocksProbe(tree("xavier-jp4", tmp_path), interval_s=NEVER)
    xavier.start()
    assert xavier.provenance(xavier.stop()) == {"clock_source": "GPU devfreq 17000000.gv11b"}


def test_clock_above_its_maximum_is_not_clipped(tmp_path: Path) -> None:
    root = tree("orin-jp6", tmp_path)
    write(root, "sys/class/devfreq/17000000.gpu/cur_freq", 1122000000)  # 1122 MHz, max 1020 MHz
    probe = JetsonClocksProbe(root, interval_s=NEVER)
    probe.start()
    result = probe.summarize(probe.stop(), Window(0.0, 1.0, 1))
    assert result.metrics["clock_drop_pct"] == pytest.approx(-10.0)  # 100 x (1 - 1122 / 1020)
