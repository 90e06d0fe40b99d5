"""dse.report.traces: power, temperature and clock traces of front trials, throttling shaded.

The samples files are written here in the worker's key format (``trace.<probe>.time_s``,
``trace.<probe>.<channel> [<unit>]``), with the probes' own names and units; one test holds that
format to ``dse.trial.telemetry_window``'s own writer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from dse.measure.telemetry.base import Trace
from dse.measure.telemetry.memory import ProcessMemoryProbe
from dse.measure.telemetry.nvml import NvmlProbe
from dse.measure.telemetry.nvml_throttle import reason_bits
from dse.report.trace_series import KIND_TITLES, channel_kind, parse_trace_key
from dse.report.traces import TracesInfo, traces_figure, traces_info
from dse.results import trials_frame
from dse.testing import campaign_study, candidate, record_trial

OBJECTIVES = ["accuracy", "latency_p99_ms"]
T0 = 1_700_000_000.0  # readings carry time.time() seconds
BITS = reason_bits()


def trace_arrays(probe: str, times: Sequence[float], channels: Mapping[str, Sequence[float]],
                 units: Mapping[str, str]) -> dict[str, np.ndarray]:
    """One probe's readings as the worker keeps them beside the latencies."""
    out = {f"trace.{probe}.time_s": np.asarray(times, dtype=np.float64)}
    out.update({f"trace.{probe}.{name} [{units.get(name, '')}]": np.asarray(v, dtype=np.float64)
                for name, v in channels.items()})
    return out


def nvml_arrays(masks: Sequence[float], start: float = T0) -> dict[str, np.ndarray]:
    n = len(masks)
    times = [start + 0.5 * i for i in range(n)]
    return trace_arrays("nvml", times, {
        "power_w": [200.0 + 10 * i for i in range(n)],
        "energy_mj": [1000.0 * i for i in range(n)],
        "temperature_c": [60.0 + i for i in range(n)],
        "sm_clock_mhz": [1980.0] * n,
        "mem_clock_mhz": [2619.0] * n,
        "clock_event_reasons": list(masks),
        "memory_used_mb": [5000.0] * n,
    }, NvmlProbe.units)


def memory_arrays(n: int, start: float = T0, step: float = 0.005) -> dict[str, np.ndarray]:
    return trace_arrays("process_memory", [start + step * i for i in range(n)],
                        {"rss_mb": [300.0 + (i % 7) for i in range(n)]},
                        ProcessMemoryProbe.units)


class Campaign:
    """A study whose measured trials each have a samples file under a run folder."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.study = campaign_study("traces", OBJECTIVES)

    def add(self, accuracy: float, p99: float, arrays: Mapping[str, np.ndarray] | None,
            device: str = "local-cpu") -> int:
        number = len(self.study.trials)
        attrs = {}
        if arrays is not None:
            relative = f"samples/{device}-trial-{number:05d}.npz"
            (self.run_dir / "samples").mkdir(parents=True, exist_ok=True)
            np.savez_compressed(self.run_dir / relative,
                                latency_ms=np.full(20, p99), **dict(arrays))
            attrs["samples_file"] = relative
        cand = {**candidate("onnxruntime", "fp32", accuracy, 1), "device_profile": device}
        return record_trial(self.study, cand, extra_attrs=attrs,
                            metrics={"accuracy": accuracy, "latency_p99_ms": p99})

    def info(self, **kwargs: int) -> TracesInfo:
        return traces_info(self.trials(), OBJECTIVES, [self.study], self.run_dir, **kwargs)

    def trials(self) -> pd.DataFrame:
        return trials_frame(self.study)


@pytest.fixture
def campaign(tmp_path: Path) -> Campaign:
    return Campaign(tmp_path / "run")


def test_keys_match_the_workers_own_writer() -> None:
    from dse.trial.telemetry_window import TelemetryWindow

    trace = Trace("nvml", units=dict(NvmlProbe.units))
    trace.add(T0, {"power_w": 100.0, "clock_event_reasons": 4.0})
    window = TelemetryWindow([], {})
    window.traces = [(NvmlProbe(), trace)]
    written = window.trace_samples()
    ours = trace_arrays("nvml", trace.timestamps, trace.channels, trace.units)
    assert sorted(written) == sorted(ours)


@pytest.mark.parametrize(("key", "parsed", "kind"), [
    ("trace.nvml.time_s", ("nvml", "time_s", None), None),
    ("trace.nvml.power_w [W]", ("nvml", "power_w", "W"), "power"),
    ("trace.thermal_zones.thermal_zone0:x86_pkg_temp [°C]",
     ("thermal_zones", "thermal_zone0:x86_pkg_temp", "°C"), "temperature"),
    ("trace.cpufreq.cpu3/scaling_cur_freq [kHz]", ("cpufreq", "cpu3/scaling_cur_freq", "kHz"),
     "clock"),
    ("trace.cpufreq.cpu3/cpuinfo_max_freq [kHz]", ("cpufreq", "cpu3/cpuinfo_max_freq", "kHz"),
     None),
    ("trace.jetson_power.power.total [W]", ("jetson_power", "power.total", "W"), "power"),
    ("trace.jetson_clocks.gpu.max_mhz [MHz]", ("jetson_clocks", "gpu.max_mhz", "MHz"), None),
    ("trace.rapl.intel-rapl:0/energy_uj [uJ]", ("rapl", "intel-rapl:0/energy_uj", "uJ"), "power"),
    ("trace.nvml.clock_event_reasons [bitmask]", ("nvml", "clock_event_reasons", "bitmask"),
     None),
    ("trace.process_memory.rss_mb [MB]", ("process_memory", "rss_mb", "MB"), "memory"),
    ("trace.odd.channel []", ("odd", "channel", ""), None),
])
def test_trace_keys_parse_into_probe_channel_unit_and_kind(
        key: str, parsed: tuple[str, str, str | None], kind: str | None) -> None:
    assert parse_trace_key(key) == parsed
    assert channel_kind(parsed[1], parsed[2]) == kind


def test_latency_key_is_not_a_trace() -> None:
    assert parse_trace_key("latency_ms") is None


def test_nvml_trace_gives_power_temperature_clocks_and_throttled_intervals(
        campaign: Campaign) -> None:
    gpu_idle, power_cap = BITS["gpu_idle"], BITS["sw_power_cap"]
    thermal = BITS["sw_thermal_slowdown"]
    masks = [0, 0, power_cap, power_cap, 0, gpu_idle, thermal | power_cap, 0]
    campaign.add(0.9, 2.0, nvml_arrays(masks))
    info = campaign.info()
    assert info.empty_reason is None
    # The clocks and the memory hold still: said in words, not drawn as flat lines.
    assert info.kinds == ["power", "temperature"]
    assert info.row_titles == [KIND_TITLES[k] for k in info.kinds]
    (trial,) = info.trials
    assert (trial.device, trial.trial, trial.duration_s) == ("local-cpu", 0, 3.5)
    names = {s.name: s for s in trial.series}
    assert sorted(names) == ["nvml power_w", "nvml temperature_c"]
    assert "nvml mem_clock_mhz steady at 2,619 MHz on #0" in info.note
    assert "nvml memory_used_mb steady at 5,000 MB on #0" in info.note
    assert names["nvml power_w"].time_s[:3] == [0.0, 0.5, 1.0]
    assert names["nvml temperature_c"].values[-1] == 67.0
    # Each reading holds until the next; gpu_idle is not throttling.
    assert [(i.start_s, i.end_s, i.reason) for i in trial.throttled] == [
        (1.0, 2.0, "sw_power_cap"), (3.0, 3.5, "sw_power_cap, sw_thermal_slowdown")]
    assert "Shaded: intervals where a throttle reason was active" in info.note
    figure = traces_figure(info)
    assert len(figure.data) == len(trial.series) == 2
    assert len(figure.layout.shapes) == 2 * len(info.kinds)  # each interval shaded in every row
    reasons = [a.text for a in figure.layout.annotations if "sw_" in a.text]
    assert reasons == ["sw_power_cap", "sw_power_cap, sw_thermal_slowdown"]


def test_cpu_sensors_give_rapl_power_clocks_in_mhz_and_throttle_time(campaign: Campaign) -> None:
    times = [T0 + i for i in range(5)]
    wrap = 1_000_000_000.0
    arrays = {
        **trace_arrays("rapl", times, {
            # 10, 15, 5 W, then the counter wraps: 999_000_000 -> 9_000_000 is 10 J over a second.
            "intel-rapl:0/energy_uj": [969e6, 979e6, 994e6, 999e6, 9e6],
            "intel-rapl:0/max_energy_range_uj": [wrap] * 5},
            {"intel-rapl:0/energy_uj": "uJ", "intel-rapl:0/max_energy_range_uj": "uJ"}),
        **trace_arrays("cpufreq", times, {
            "cpu0/scaling_cur_freq": [3.0e6, 2.0e6, 2.0e6, 3.0e6, 3.0e6],
            "cpu0/cpuinfo_max_freq": [3.5e6] * 5},
            {"cpu0/scaling_cur_freq": "kHz", "cpu0/cpuinfo_max_freq": "kHz"}),
        **trace_arrays("thermal_zones", times, {"thermal_zone0:x86_pkg_temp": [50, 70, 90, 95, 80]},
                       {"thermal_zone0:x86_pkg_temp": "°C"}),
        **trace_arrays("cpu_throttle", times, {
            "cpu0/core_throttle_count": [3, 4, 4, 4, 4],
            "cpu0/core_throttle_total_time_ms": [100, 100, 600, 1100, 1100]},
            {"cpu0/core_throttle_count": "events", "cpu0/core_throttle_total_time_ms": "ms"}),
    }
    campaign.add(0.9, 2.0, arrays)
    info = campaign.info()
    (trial,) = info.trials
    names = {s.name: s for s in trial.series}
    assert sorted(names) == ["cpufreq cpu0/scaling_cur_freq", "rapl intel-rapl:0 (from energy counter)",
                             "thermal_zones thermal_zone0:x86_pkg_temp"]
    rapl = names["rapl intel-rapl:0 (from energy counter)"]
    assert rapl.time_s == [0.5, 1.5, 2.5, 3.5]
    assert rapl.values == pytest.approx([10.0, 15.0, 5.0, 10.0])
    assert names["cpufreq cpu0/scaling_cur_freq"].values == [3000, 2000, 2000, 3000, 3000]
    assert info.kinds == ["power", "temperature", "clock"]
    assert [(i.start_s, i.end_s, i.reason) for i in trial.throttled] == [
        (1.0, 3.0, "cpu thermal throttle (core)")]


def test_a_counter_drop_the_measurement_calls_a_gap_is_a_gap_in_the_power_trace(
        campaign: Campaign) -> None:
    """One rule for counter steps (dse.util.counters): a drop beyond the counter's wrap range (more
    than one wrap between readings) is no energy figure to the measurement, and no power point
    to the dashboard — it once drew a negative wattage there."""
    from dse.measure.telemetry.derived import TelemetryGapError, counter_delta

    times = [T0 + i for i in range(4)]
    readings = [500.0e6, 510.0e6, 20.0e6, 35.0e6]  # 510 -> 20 MJ: a drop of 490 M, range 100 M
    with pytest.raises(TelemetryGapError, match="more than its wrap range"):
        counter_delta(readings, 100.0e6)
    campaign.add(0.9, 2.0, trace_arrays("rapl", times, {
        "intel-rapl:0/energy_uj": readings, "intel-rapl:0/max_energy_range_uj": [100.0e6] * 4},
        {"intel-rapl:0/energy_uj": "uJ", "intel-rapl:0/max_energy_range_uj": "uJ"}))
    (trial,) = campaign.info().trials
    (rapl,) = trial.series
    assert rapl.time_s == [0.5, 2.5] and rapl.values == pytest.approx([10.0, 15.0])


def test_jetson_rails_clocks_and_overcurrent(campaign: Campaign) -> None:
    times = [T0 + 0.1 * i for i in range(4)]
    arrays = {
        **trace_arrays("jetson_power", times, {
            "power.total": [8.0, 12.0, 15.0, 9.0], "power.VDD_GPU_SOC": [3.0, 6.0, 8.0, 4.0],
            "oc_alarm.VDD_IN.crit": [0, 1, 1, 0]},
            {"power.total": "W", "power.VDD_GPU_SOC": "W", "oc_alarm.VDD_IN.crit": "flag"}),
        **trace_arrays("jetson_clocks", times, {
            "gpu.mhz": [1300, 1300, 900, 900], "gpu.max_mhz": [1300] * 4,
            "temp.gpu-thermal": [40, 41, 43, 44]},
            {"gpu.mhz": "MHz", "gpu.max_mhz": "MHz", "temp.gpu-thermal": "°C"}),
    }
    campaign.add(0.9, 2.0, arrays)
    (trial,) = campaign.info().trials
    assert {s.name: s.kind for s in trial.series} == {
        "jetson_clocks gpu.mhz": "clock", "jetson_clocks temp.gpu-thermal": "temperature",
        "jetson_power power.VDD_GPU_SOC": "power", "jetson_power power.total": "power"}
    (alarm,) = trial.throttled
    assert alarm.reason == "over-current alarm (VDD_IN.crit)"
    assert (alarm.start_s, alarm.end_s) == pytest.approx((0.1, 0.3))


def test_a_host_without_sensors_shows_memory_and_says_so(campaign: Campaign) -> None:
    campaign.add(0.9, 2.0, memory_arrays(50))
    info = campaign.info()
    assert info.empty_reason is None
    assert info.kinds == ["memory"]
    assert "No power, temperature or clock sensor was read on these trials (probes: " \
           "process_memory); only memory is shown" in info.note
    assert len(traces_figure(info).data) == 1


def steady_memory(n: int, level: float, start: float = T0) -> dict[str, np.ndarray]:
    """Process memory as a CPU host reads it over a short window: moving by 0.01 MB."""
    return trace_arrays("process_memory", [start + 0.01 * i for i in range(n)],
                        {"rss_mb": [level + 0.01 * (i % 2) for i in range(n)]},
                        ProcessMemoryProbe.units)


def test_memory_that_barely_moves_is_a_line_of_text_not_a_panel_of_flat_plots(
        campaign: Campaign) -> None:
    for level in (1184.0, 1139.0, 1131.6):
        campaign.add(0.8 + level / 1e4, level / 1000, steady_memory(200, level))
    info = campaign.info()
    assert info.trials == [] and info.kinds == []
    assert info.empty_reason == (
        "no telemetry trace moved during the measurement: process_memory rss_mb steady at "
        "1,184 MB on #0, 1,139 MB on #1, 1,132 MB on #2")
    assert "No power, temperature or clock sensor was read" in info.note


def test_only_traces_that_move_are_drawn_and_the_steady_ones_are_named(
        campaign: Campaign) -> None:
    campaign.add(0.95, 4.0, steady_memory(400, 1184.0))  # the longest, but flat
    campaign.add(0.90, 3.0, memory_arrays(100))  # 300 -> 306 MB: moves 2%
    info = campaign.info()
    assert [t.trial for t in info.trials] == [1]
    assert "process_memory rss_mb steady at 1,184 MB on #0" in info.note
    assert len(traces_figure(info).data) == 1


def test_trials_with_sensors_come_first_then_the_longest(campaign: Campaign) -> None:
    campaign.add(0.95, 4.0, memory_arrays(4000))  # 20 s, memory only
    campaign.add(0.90, 3.0, nvml_arrays([0] * 4))  # 1.5 s
    campaign.add(0.85, 2.0, nvml_arrays([0] * 10))  # 4.5 s
    campaign.add(0.80, 1.0, None)  # measured without samples
    info = campaign.info(max_trials=2)
    assert [t.trial for t in info.trials] == [2, 1]
    assert info.note.startswith("2 of the 3 front trial(s) with telemetry shown")


def test_long_series_are_thinned_keeping_their_peaks(campaign: Campaign) -> None:
    arrays = memory_arrays(10_000)
    arrays["trace.process_memory.rss_mb [MB]"][7_777] = 9_999.0
    campaign.add(0.9, 2.0, arrays)
    info = campaign.info()
    (series,) = info.trials[0].series
    assert len(series.values) <= 2000
    assert max(series.values) == 9_999.0 and min(series.values) == 300.0
    assert series.time_s == sorted(series.time_s)
    assert "thinned" in info.note


def test_channels_over_the_cap_are_counted(campaign: Campaign) -> None:
    times = [T0, T0 + 1]
    clocks = {f"cpu{i}/scaling_cur_freq": [2e6, 2.5e6] for i in range(12)}
    campaign.add(0.9, 2.0, trace_arrays("cpufreq", times, clocks, dict.fromkeys(clocks, "kHz")))
    info = campaign.info(max_series_per_kind=8)
    assert len(info.trials[0].series) == 8
    assert "4 channel(s) not drawn" in info.note


def test_empty_reasons(campaign: Campaign, tmp_path: Path) -> None:
    empty = traces_info(campaign.trials(), OBJECTIVES, [campaign.study], campaign.run_dir)
    assert empty.empty_reason is not None and "no front" in empty.empty_reason
    campaign.add(0.9, 2.0, {})  # latency samples, no telemetry
    campaign.add(0.8, 1.0, None)
    info = campaign.info()
    assert info.empty_reason == "none of the 2 front trial(s) recorded telemetry traces"
    assert info.trials == []
    unknown = traces_info(campaign.trials(), OBJECTIVES, [campaign.study], None)
    assert unknown.empty_reason is not None and "run folder" in unknown.empty_reason


def test_only_energy_counters_have_nothing_to_draw(campaign: Campaign) -> None:
    campaign.add(0.9, 2.0, trace_arrays("nvml", [T0, T0 + 1], {"energy_mj": [0, 5]},
                                        NvmlProbe.units))
    info = campaign.info()
    assert info.empty_reason is not None and "no power, temperature, clock or memory" in \
        info.empty_reason


def test_an_unreadable_samples_file_is_noted(campaign: Campaign) -> None:
    campaign.add(0.9, 2.0, nvml_arrays([0, 0]))
    campaign.add(0.8, 1.0, {})
    (campaign.run_dir / "samples" / "local-cpu-trial-00001.npz").write_bytes(b"not a zip")
    info = campaign.info()
    assert info.empty_reason is None
    assert "local-cpu #1" in info.note and "not a readable .npz" in info.note


def test_each_device_front_is_a_candidate(tmp_path: Path) -> None:
    first = Campaign(tmp_path / "run")
    first.add(0.9, 2.0, nvml_arrays([0] * 3), device="gpu-a")
    second = campaign_study("traces@gpu-b", OBJECTIVES)
    second_campaign = Campaign(tmp_path / "run")
    second_campaign.study = second
    second_campaign.add(0.9, 2.0, nvml_arrays([0] * 5), device="gpu-b")
    studies: list[optuna.Study] = [first.study, second]
    info = traces_info(trials_frame(studies), OBJECTIVES, studies, tmp_path / "run")
    assert [(t.device, t.trial) for t in info.trials] == [("gpu-b", 0), ("gpu-a", 0)]


def test_bad_limits_are_refused(campaign: Campaign) -> None:
    with pytest.raises(ValueError, match="max_trials"):
        campaign.info(max_trials=0)


def test_the_new_panels_import_no_heavy_runtime() -> None:
    import subprocess
    import sys

    code = ("import sys\n"
            "import dse.report.history, dse.report.distributions, dse.report.roofline\n"
            "import dse.report.traces\n"
            "from dse.report.throttling import nvml_throttled\n"
            "import numpy as np\n"
            "nvml_throttled(np.arange(2.0), np.array([4.0, 0.0]))\n"
            "print([m for m in ('torch', 'onnxruntime', 'tensorrt', 'ray') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
