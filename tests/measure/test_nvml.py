"""The NVML probe: its summary maths on replayed NVML readings, its GPU choice, the clocks-event
decoding against pynvml's real constants, and, where a GPU exists, a real measurement."""

from __future__ import annotations

import ctypes.util
import json
import math
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dse.measure.telemetry.base import PROBES, Trace, Window
from dse.measure.telemetry.derived import power_energy
from dse.measure.telemetry.nvml import NvmlProbe
from dse.measure.telemetry.nvml_throttle import (
    FALLBACK_BITS,
    THROTTLING_REASONS,
    bits_from_module,
    decode_clock_event_reasons,
    reason_bits,
    snake_case,
    throttling_mask,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvml"


class NVMLError(Exception):
    pass


# NVML's own spellings, so the probe finds them as it finds pynvml's.
class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_FunctionNotFound(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class NvmlReplay:
    """Answers the pynvml calls the probe makes with readings stored in NVML's units; ``advance()``
    moves to the next reading. Handles are NVML indices."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVML_TEMPERATURE_GPU = 0  # nvml.h values; test_replay_constants_are_nvmls checks them
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, fixture: str, *, event_reasons_function: bool = True) -> None:
        recording = json.loads((FIXTURES / fixture).read_text())
        self.devices: list[dict[str, str]] = recording["devices"]
        self.max_sm_clock_mhz: int = recording["max_sm_clock_mhz"]
        self.energy_counter: bool = recording["energy_counter"]
        self.readings: list[dict[str, Any]] = recording["readings"]
        self.event_reasons_function = event_reasons_function
        self.migs: dict[str, int] = {}  # MIG UUID -> parent GPU index
        self.failing: set[str] = set()  # fields whose next reads fail as on a lost GPU
        self.step = 0

    def advance(self) -> None:
        self.step += 1

    def _value(self, field: str) -> Any:
        if field in self.failing:
            raise NVMLError(f"{field}: GPU is lost")
        return self.readings[self.step][field]

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self.devices[handle]["uuid"]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid not in self.migs:
            raise NVMLError(f"no device {uuid}")
        return uuid

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, mig: str) -> int:
        return self.migs[mig]

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return int(self._value("power_mw"))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        if not self.energy_counter:
            raise NVMLError_NotSupported("Not Supported")
        return int(self._value("energy_mj"))

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return int(self._value("temperature_c"))

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        field = {self.NVML_CLOCK_SM: "sm_clock_mhz", self.NVML_CLOCK_MEM: "mem_clock_mhz"}[clock]
        return int(self._value(field))

    def nvmlDeviceGetMaxClockInfo(self, handle: int, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return self.max_sm_clock_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        if not self.event_reasons_function:
            raise NVMLError_FunctionNotFound("Function Not Found")  # a driver older than r535
        return int(self._value("clocks_event_reasons"))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        return int(self._value("clocks_event_reasons"))

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(used=int(self._value("memory_used_bytes")))


def replay_trace(probe: NvmlProbe, replay: NvmlReplay, count: int | None = None) -> Trace:
    """The trace the probe would have sampled, stamped with the recorded times."""
    trace = Trace("nvml", units=dict(NvmlProbe.units))
    for reading in replay.readings[:count]:
        trace.add(reading["t"], probe.read())
        replay.advance()
    return trace


def opened(replay: NvmlReplay, index: int | None = 0) -> NvmlProbe:
    probe = NvmlProbe(index=index, nvml=replay)
    assert probe.available() == (True, "")
    return probe


# -- summary maths on replayed readings ----------------------------------------------------------------


def test_counter_energy_and_the_other_metrics() -> None:
    replay = NvmlReplay("h100_counter.json")
    probe = opened(replay)
    result = probe.summarize(replay_trace(probe, replay), Window(0.0, 2.0, inferences=1000))

    assert result.missing == {}
    assert probe.last_energy_source == "energy_counter"
    # The counter refreshes every 0.2 s; between its first change (0.2 s) and its last (2.0 s) it
    # gained four refreshes at 300 W (60 J each) and five at 400 W (80 J each).
    power = (4 * 60.0 + 5 * 80.0) / 1.8
    assert result.metrics["power_mean_w"] == pytest.approx(power)
    assert result.metrics["energy_per_inference_mj"] == pytest.approx(power * 2.0 / 1000 * 1000)
    assert result.metrics["temperature_peak_c"] == 61.0
    assert result.metrics["gpu_memory_used_peak_mb"] == pytest.approx(8500.0)
    # Readings 10-15 ran at 1755 MHz, the other fifteen at the 1980 MHz maximum.
    mean_clock = (15 * 1980 + 6 * 1755) / 21
    assert result.metrics["clock_drop_pct"] == pytest.approx((1 - mean_clock / 1980) * 100)
    # Power cap held from 1.0 s to 1.6 s (readings 10-15, each held 0.1 s); the idle bit at the ends
    # is not throttling.
    assert result.metrics["throttled_fraction"] == pytest.approx(0.6 / 2.0)


def test_short_window_falls_back_to_integrated_power() -> None:
    replay = NvmlReplay("h100_counter.json")
    probe = opened(replay)
    # 0.4 s: the counter changes only twice, too coarse to trust.
    result = probe.summarize(replay_trace(probe, replay, count=5), Window(0.0, 0.4, inferences=40))

    assert probe.last_energy_source == "integrated_power"
    assert result.metrics["power_mean_w"] == pytest.approx(300.0)
    assert result.metrics["energy_per_inference_mj"] == pytest.approx(300.0 * 0.4 / 40 * 1000)


def test_gpu_without_energy_counter_integrates_power() -> None:
    replay = NvmlReplay("p100_no_counter.json")
    probe = opened(replay)
    trace = replay_trace(probe, replay)
    result = probe.summarize(trace, Window(0.0, 0.5, inferences=10))

    assert "energy_mj" not in trace.channels
    assert probe.last_energy_source == "integrated_power"
    # Trapezoids of 0.1 s over 50,150,250,250,150,50 W: 85 J over 0.5 s.
    assert result.metrics["power_mean_w"] == pytest.approx(170.0)
    assert result.metrics["energy_per_inference_mj"] == pytest.approx(85.0 / 10 * 1000)
    assert result.metrics["clock_drop_pct"] == pytest.approx(0.0)
    assert result.metrics["throttled_fraction"] == 0.0


def test_unsupported_counter_and_failed_power_give_the_reason() -> None:
    replay = NvmlReplay("p100_no_counter.json")
    probe = opened(replay)
    replay.failing.add("power_mw")
    result = probe.summarize(replay_trace(probe, replay), Window(0.0, 0.5, inferences=10))

    reason = result.missing["energy_per_inference_mj"]
    assert reason.startswith("GPU 0 does not support the total-energy counter (Volta or newer needed)")
    assert "no valid power_w reading" in reason
    assert result.missing["power_mean_w"] == reason
    assert probe.last_energy_source == ""


def test_a_failed_read_is_nan_and_skipped() -> None:
    replay = NvmlReplay("p100_no_counter.json")
    probe = opened(replay)
    trace = Trace("nvml")
    for step, reading in enumerate(replay.readings):
        # The GPU stops answering power for the middle reading only.
        if step == 3:
            replay.failing.add("power_mw")
        trace.add(reading["t"], probe.read())
        replay.failing.discard("power_mw")
        replay.advance()

    assert math.isnan(trace.channels["power_w"][3])
    result = probe.summarize(trace, Window(0.0, 0.5, inferences=10))
    # Trapezoids now bridge 0.2 s to 0.4 s directly: 10 + 20 + 40 + 10 = 80 J.
    assert result.metrics["power_mean_w"] == pytest.approx(80.0 / 0.5)


def test_old_driver_reads_throttle_reasons() -> None:
    replay = NvmlReplay("h100_counter.json", event_reasons_function=False)
    probe = opened(replay)
    result = probe.summarize(replay_trace(probe, replay), Window(0.0, 2.0, inferences=1000))
    assert result.metrics["throttled_fraction"] == pytest.approx(0.3)


def test_start_and_stop_sample_every_channel() -> None:
    replay = NvmlReplay("h100_counter.json")
    probe = NvmlProbe(index=0, interval_s=0.005, nvml=replay)
    probe.start()
    time.sleep(0.03)
    trace = probe.stop()

    assert len(trace.timestamps) >= 2
    assert set(trace.channels) == set(NvmlProbe.units)
    assert trace.channels["power_w"][0] == 300.0
    assert trace.channels["memory_used_mb"][0] == 2000.0


def test_registered() -> None:
    assert PROBES["nvml"] is NvmlProbe


# -- which GPU -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("visible", "index"), [
    (None, 0),
    ("1,0", 1),
    ("GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff", 1),
    ("GPU-9f8e7d6c,GPU-3a1b2c3d", 1),  # CUDA accepts a unique UUID prefix
    ("MIG-0c1d2e3f-4444-5555-6666-777788889999", 1),
])
def test_gpu_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch, visible: str | None,
                                          index: int) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    replay = NvmlReplay("h100_counter.json")
    replay.migs["MIG-0c1d2e3f-4444-5555-6666-777788889999"] = 1
    probe = opened(replay, index=None)
    assert probe.index == index


def test_explicit_index_is_an_nvml_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert opened(NvmlReplay("h100_counter.json"), index=1).index == 1


@pytest.mark.parametrize(("visible", "index", "reason"), [
    ("", None, "CUDA_VISIBLE_DEVICES is empty: no GPU is visible to this process"),
    ("GPU-00000000", None, "no GPU matches UUID 'GPU-00000000' from CUDA_VISIBLE_DEVICES"),
    ("GPU-", None, "more than one GPU matches UUID 'GPU-'"),
    ("0", 2, "GPU index 2 out of range: NVML sees 2 GPU(s)"),
    ("gpu0", None, "cannot read GPU 'gpu0' (from CUDA_VISIBLE_DEVICES)"),
])
def test_gpu_that_cannot_be_found_says_why(monkeypatch: pytest.MonkeyPatch, visible: str,
                                           index: int | None, reason: str) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    ok, why = NvmlProbe(index=index, nvml=NvmlReplay("h100_counter.json")).available()
    assert not ok
    assert why.startswith(reason)


# -- the real pynvml on this host ----------------------------------------------------------------------


def test_real_nvml_availability_names_what_is_missing() -> None:
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    probe = NvmlProbe()
    ok, why = probe.available()
    if ctypes.util.find_library("nvidia-ml") is None:
        assert (ok, why) == (False, "NVML library not found (no NVIDIA driver on this host)")
    elif ok:
        assert probe.read()["power_w"] > 0
    else:
        assert why


def test_without_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    assert NvmlProbe().available() == (False, "nvidia-ml-py is not installed (pip install nvidia-ml-py)")


# -- clocks-event reasons ------------------------------------------------------------------------------


def test_decoding_real_masks() -> None:
    nv = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    mask = nv.nvmlClocksEventReasonGpuIdle | nv.nvmlClocksEventReasonSwPowerCap
    assert decode_clock_event_reasons(mask) == ["gpu_idle", "sw_power_cap"]
    mask = (nv.nvmlClocksEventReasonHwSlowdown | nv.nvmlClocksEventReasonHwThermalSlowdown
            | nv.nvmlClocksEventReasonHwPowerBrakeSlowdown | nv.nvmlClocksEventReasonSwThermalSlowdown)
    assert decode_clock_event_reasons(mask) == [
        "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]
    mask = (nv.nvmlClocksEventReasonApplicationsClocksSetting | nv.nvmlClocksEventReasonSyncBoost
            | nv.nvmlClocksEventReasonDisplayClockSetting)
    assert decode_clock_event_reasons(mask) == [
        "applications_clocks_setting", "sync_boost", "display_clock_setting"]
    # UserDefinedClocks is pynvml's deprecated alias of the same bit: decoded once, by the current name.
    assert decode_clock_event_reasons(nv.nvmlClocksEventReasonUserDefinedClocks) == [
        "applications_clocks_setting"]
    assert decode_clock_event_reasons(nv.nvmlClocksThrottleReasonBoardLimit) == ["board_limit"]
    assert decode_clock_event_reasons(nv.nvmlClocksEventReasonNone) == []
    assert decode_clock_event_reasons(1 << 40 | nv.nvmlClocksEventReasonGpuIdle) == [
        "gpu_idle", "unknown_0x10000000000"]


def test_fallback_table_equals_pynvml() -> None:
    nv = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    assert bits_from_module(nv) == FALLBACK_BITS


def test_without_pynvml_the_fallback_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert reason_bits() == {snake_case(suffix): bit for suffix, bit in FALLBACK_BITS.items()}
    assert decode_clock_event_reasons(0x24) == ["sw_power_cap", "sw_thermal_slowdown"]


def test_throttling_mask_is_the_five_limits() -> None:
    nv = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    assert throttling_mask() == (
        nv.nvmlClocksEventReasonSwPowerCap | nv.nvmlClocksEventReasonHwSlowdown
        | nv.nvmlClocksEventReasonSwThermalSlowdown | nv.nvmlClocksEventReasonHwThermalSlowdown
        | nv.nvmlClocksEventReasonHwPowerBrakeSlowdown)
    assert set(decode_clock_event_reasons(throttling_mask())) == set(THROTTLING_REASONS)


def test_replay_constants_are_nvmls() -> None:
    nv = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    for name in ("NVML_TEMPERATURE_GPU", "NVML_CLOCK_SM", "NVML_CLOCK_MEM"):
        assert getattr(NvmlReplay, name) == getattr(nv, name)


# -- a real GPU ----------------------------------------------------------------------------------------


def _matmul_for(seconds: float, torch: Any, a: Any) -> int:
    """Runs a matmul loop on the GPU for ``seconds``; returns the number of matmuls done."""
    done = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a  # the work is the point; the product is thrown away
        torch.cuda.synchronize()
        done += 10
    return done


@pytest.mark.gpu
def test_real_gpu_counter_and_integrated_power_agree() -> None:
    torch = pytest.importorskip("torch")
    probe = NvmlProbe()
    ok, why = probe.available()
    if not ok or not torch.cuda.is_available():
        pytest.skip(f"no NVIDIA GPU / NVML on this machine ({why or 'torch reports no CUDA device'})")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    # Warm up first: from Ampere on, NVML's power reading is a one-second average, which would
    # under-read a window that starts from idle.
    _matmul_for(1.5, torch, a)
    probe.start()
    start = time.time()
    done = _matmul_for(2.0, torch, a)
    end = time.time()
    trace = probe.stop()
    window = Window(start, end, inferences=done)
    result = probe.summarize(trace, window)

    assert len(trace.timestamps) > 10
    assert min(p for p in trace.channels["power_w"] if math.isfinite(p)) > 0
    if probe.last_energy_source != "energy_counter":
        pytest.skip(f"GPU {probe.index} gave no usable energy counter: {result.missing}")
    from_power = power_energy(trace.timestamps, trace.channels["power_w"], window).metrics[
        "energy_per_inference_mj"]
    assert result.metrics["energy_per_inference_mj"] == pytest.approx(from_power, rel=0.10)
    assert 0.0 <= result.metrics["throttled_fraction"] <= 1.0
    assert result.metrics["temperature_peak_c"] > 0


# -- project rules (derived.py) and provenance ---------------------------------------------------------


def test_energy_comes_from_the_readings_that_bracket_the_window() -> None:
    replay = NvmlReplay("h100_counter.json")
    probe = opened(replay)
    # The first second of a two-second trace: the readings at 0.0-1.0 s bracket it. The counter
    # changes at 0.2, 0.4, ..., 1.0 s (five times); from its first change to its last it gains four
    # 60 J refreshes in 0.8 s: 300 W, so 300 J in the 1 s window, 3000 mJ for each of 100 inferences.
    # (The whole trace would say 640 J / 1.8 s = 355.6 W.)
    result = probe.summarize(replay_trace(probe, replay), Window(0.0, 1.0, inferences=100))
    assert probe.last_energy_source == "energy_counter"
    assert result.metrics["power_mean_w"] == pytest.approx(300.0)
    assert result.metrics["energy_per_inference_mj"] == pytest.approx(3000.0)


def test_integrated_power_uses_only_the_bracketing_readings() -> None:
    replay = NvmlReplay("p100_no_counter.json")
    probe = opened(replay)
    result = probe.summarize(replay_trace(probe, replay), Window(0.1, 0.3, inferences=2))
    # Readings at 0.1, 0.2, 0.3 s: 0.1 x (150 + 250) / 2 + 0.1 x (250 + 250) / 2 = 45 J over 0.2 s.
    assert result.metrics["power_mean_w"] == pytest.approx(225.0)
    assert result.metrics["energy_per_inference_mj"] == pytest.approx(45.0 / 2 * 1000)


def test_a_window_the_readings_do_not_bracket_has_no_energy() -> None:
    replay = NvmlReplay("h100_counter.json")
    probe = opened(replay)
    result = probe.summarize(replay_trace(probe, replay), Window(-1.0, 2.0, inferences=10))
    assert probe.last_energy_source == ""
    reason = result.missing["power_mean_w"]
    assert reason.startswith("energy_mj: the valid readings do not bracket the window")
    assert ", and power_w: the valid readings do not bracket the window" in reason
    assert result.missing["energy_per_inference_mj"] == reason
    assert result.missing["throttled_fraction"].startswith(
        "clock_event_reasons: no valid reading at or before the window start")


def test_clock_above_its_maximum_is_a_negative_drop() -> None:
    replay = NvmlReplay("p100_no_counter.json")
    replay.max_sm_clock_mhz = 1200  # the readings say 1328 MHz
    probe = opened(replay)
    result = probe.summarize(replay_trace(probe, replay), Window(0.0, 0.5, inferences=10))
    assert result.metrics["clock_drop_pct"] == pytest.approx(100 * (1 - 1328 / 1200))  # -10.7 %


def test_provenance_names_the_energy_source_and_the_reasons_seen() -> None:
    replay = NvmlReplay("h100_counter.json")
    probe = opened(replay)
    trace = replay_trace(probe, replay)
    probe.summarize(trace, Window(0.0, 2.0, inferences=1000))
    # Masks 1 (idle), 4 (power cap) and 36 (power cap + software thermal) were seen.
    assert probe.provenance(trace) == {
        "energy_source": "energy_counter",
        "clock_event_reasons": "gpu_idle,sw_power_cap,sw_thermal_slowdown"}


def test_provenance_without_throttling_or_energy() -> None:
    replay = NvmlReplay("p100_no_counter.json")
    probe = opened(replay)
    trace = replay_trace(probe, replay)
    probe.summarize(trace, Window(0.0, 0.5, inferences=10))
    # Only the idle bit: not throttling, so no reasons are recorded.
    assert probe.provenance(trace) == {"energy_source": "integrated_power"}
    probe.summarize(trace, Window(-1.0, 0.5, inferences=10))
    assert probe.provenance(trace) == {}
