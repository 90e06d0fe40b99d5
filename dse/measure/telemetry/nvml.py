"""NVIDIA GPU power, energy, temperature, clocks, throttling and device memory through NVML.

All NVML calls go through ``self.nvml``: the real ``pynvml`` module by default; tests hand in a replay
of readings recorded in NVML's own units (mW, mJ, MHz, bytes, bitmask), so the summary maths is
tested without a GPU.

Which GPU: an explicit ``index`` is an NVML index. Without one, the probe watches the GPU this process
computes on, i.e. the first entry of ``CUDA_VISIBLE_DEVICES``. NVML ignores that variable and numbers
GPUs in PCI bus order, so a UUID entry (``GPU-...``, or a unique prefix of one, as CUDA accepts) is
looked up by UUID, and a MIG entry (``MIG-...``) maps to its parent GPU (power, energy and clocks
exist only for the whole GPU). An integer entry is taken as the NVML index: that holds under
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and on hosts whose GPUs are all one model (CUDA's default
fastest-first order then falls back to PCI bus order).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from typing import Any, ClassVar

from dse.measure.telemetry.base import Probe, ProbeResult, Trace, Window, register_probe
from dse.measure.telemetry.nvml_throttle import throttling_mask

#: The counter must change at least this often in the trace before its difference is trusted: NVML
#: refreshes it at a coarse rate, so a value read at time t is really the value of the last refresh.
#: Taking the energy between the first and last *change* (not the first and last reading) removes that
#: lag at both ends; three changes make the span at least two refresh periods long.
MIN_COUNTER_CHANGES = 3


@register_probe("nvml")
class NvmlProbe(Probe):
    """Samples one NVIDIA GPU through NVML. See the module docstring for which GPU.

    After ``summarize``, :attr:`last_energy_source` says where the energy figures came from:
    ``"energy_counter"`` (NVML's total-energy counter), ``"integrated_power"`` (trapezoid over the
    power samples), or ``""`` (no energy figure); the worker records it in provenance.
    """

    name = "nvml"
    provides = (
        "energy_per_inference_mj",
        "power_mean_w",
        "temperature_peak_c",
        "clock_drop_pct",
        "throttled_fraction",
        "gpu_memory_used_peak_mb",
    )
    units: ClassVar[dict[str, str]] = {
        "power_w": "W",
        "energy_mj": "mJ",
        "temperature_c": "°C",
        "sm_clock_mhz": "MHz",
        "mem_clock_mhz": "MHz",
        "clock_event_reasons": "bitmask",
        "memory_used_mb": "MB",
    }

    def __init__(self, index: int | None = None, interval_s: float = 0.02, *, nvml: Any = None) -> None:
        super().__init__(interval_s)
        self.index = index
        self.nvml: Any = nvml  # None until available() imports pynvml
        self.last_energy_source = ""
        self.max_sm_clock_mhz = math.nan
        self._readers: dict[str, Callable[[], float]] = {}
        self._unsupported: dict[str, str] = {}  # channel -> why it is not read
        self._opened: tuple[bool, str] | None = None

    # -- setup -------------------------------------------------------------------------------------

    def available(self) -> tuple[bool, str]:
        if self._opened is None:
            self._opened = self._open()
        return self._opened

    def _open(self) -> tuple[bool, str]:
        if self.nvml is None:
            try:
                import pynvml
            except ImportError:
                return False, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            self.nvml = pynvml
        nv = self.nvml
        try:
            nv.nvmlInit()
        except nv.NVMLError_LibraryNotFound:
            return False, "NVML library not found (no NVIDIA driver on this host)"
        except nv.NVMLError_DriverNotLoaded:
            return False, "the NVIDIA driver is not loaded"
        except nv.NVMLError as error:
            return False, f"NVML could not start: {error}"
        # NVML stays initialised for the probe's life: the handle must outlive every window, and the
        # probe contract has no close hook (nvmlInit is reference-counted, so this leaks nothing).
        try:
            handle, self.index = self._find_gpu(nv)
        except LookupError as error:
            return False, str(error)
        except nv.NVMLError as error:
            return False, f"NVML could not open the GPU: {error}"
        self._probe_channels(nv, handle)
        return True, ""

    def _find_gpu(self, nv: Any) -> tuple[Any, int]:
        count = int(nv.nvmlDeviceGetCount())
        entry = str(self.index) if self.index is not None else _first_visible_device()
        if entry is None:
            entry = "0"
        if entry == "":
            raise LookupError("CUDA_VISIBLE_DEVICES is empty: no GPU is visible to this process")
        if entry.startswith("MIG-"):
            mig = nv.nvmlDeviceGetHandleByUUID(entry)
            handle = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
            return handle, int(nv.nvmlDeviceGetIndex(handle))
        if entry.startswith("GPU-"):
            uuids = [str(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
            matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
            if len(matches) != 1:
                found = "no" if not matches else "more than one"
                raise LookupError(f"{found} GPU matches UUID {entry!r} from CUDA_VISIBLE_DEVICES; "
                                  f"NVML sees {uuids}")
            return nv.nvmlDeviceGetHandleByIndex(matches[0]), matches[0]
        try:
            index = int(entry)
        except ValueError:
            raise LookupError(f"cannot read GPU {entry!r} (from CUDA_VISIBLE_DEVICES): "
                              "expected an index, a GPU-... or a MIG-... UUID") from None
        if not 0 <= index < count:
            raise LookupError(f"GPU index {index} out of range: NVML sees {count} GPU(s)")
        return nv.nvmlDeviceGetHandleByIndex(index), index

    def _probe_channels(self, nv: Any, handle: Any) -> None:
        """Try each channel once; one the GPU does not support is never asked for again."""
        candidates: dict[str, Callable[[], float]] = {
            "power_w": lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "energy_mj": lambda: float(nv.nvmlDeviceGetTotalEnergyConsumption(handle)),
            "temperature_c": lambda: float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)),
            "sm_clock_mhz": lambda: float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
            "mem_clock_mhz": lambda: float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM)),
            "clock_event_reasons": self._reasons_reader(nv, handle),
            "memory_used_mb": lambda: nv.nvmlDeviceGetMemoryInfo(handle).used / 1e6,
        }
        for channel, reader in candidates.items():
            try:
                reader()
            except nv.NVMLError as error:
                self._unsupported[channel] = self._unsupported_reason(nv, channel, error)
            else:
                self._readers[channel] = reader
        try:
            self.max_sm_clock_mhz = float(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM))
        except nv.NVMLError as error:
            self._unsupported["max_sm_clock_mhz"] = f"GPU {self.index} has no maximum SM clock: {error}"

    @staticmethod
    def _reasons_reader(nv: Any, handle: Any) -> Callable[[], float]:
        # NVML renamed "clocks throttle reasons" to "clocks event reasons" (driver r535); older
        # pynvml lacks the new function and older drivers answer it with FunctionNotFound.
        def throttle() -> float:
            return float(nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

        def events() -> float:
            return float(nv.nvmlDeviceGetCurrentClocksEventReasons(handle))

        if not hasattr(nv, "nvmlDeviceGetCurrentClocksEventReasons"):
            return throttle
        try:
            events()
        except nv.NVMLError_FunctionNotFound:
            return throttle
        except nv.NVMLError:
            pass  # not a naming question: _probe_channels finds it again and records why
        return events

    def _unsupported_reason(self, nv: Any, channel: str, error: Exception) -> str:
        if channel == "energy_mj" and isinstance(error, nv.NVMLError_NotSupported):
            return f"GPU {self.index} does not support the total-energy counter (Volta or newer needed)"
        if isinstance(error, nv.NVMLError_NotSupported):
            return f"GPU {self.index} does not report {channel} through NVML"
        return f"NVML could not read {channel} of GPU {self.index}: {error}"

    # -- sampling ----------------------------------------------------------------------------------

    def start(self) -> None:
        ok, why = self.available()
        if not ok:
            raise RuntimeError(f"nvml probe started although unavailable: {why}")
        super().start()

    def read(self) -> dict[str, float]:
        reading: dict[str, float] = {}
        for channel, reader in self._readers.items():
            try:
                reading[channel] = reader()
            except self.nvml.NVMLError:
                reading[channel] = math.nan  # a failed read mid-window (contract: NaN, never raise)
        return reading

    # -- summary -----------------------------------------------------------------------------------

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        result = ProbeResult()
        self.last_energy_source = ""
        self._energy(trace, window, result)
        self._peak("temperature_peak_c", "temperature_c", trace, result)
        self._peak("gpu_memory_used_peak_mb", "memory_used_mb", trace, result)
        self._clock_drop(trace, result)
        fraction = throttled_fraction(trace.timestamps, trace.channels.get("clock_event_reasons", []),
                                      throttling_mask())
        if fraction is not None:
            result.metrics["throttled_fraction"] = fraction
        else:
            result.missing["throttled_fraction"] = self._why_absent("clock_event_reasons")
        return result

    def _energy(self, trace: Trace, window: Window, result: ProbeResult) -> None:
        power_w = counter_power_w(trace.timestamps, trace.channels.get("energy_mj", []))
        source = "energy_counter"
        if power_w is None:
            power_w = integrated_power_w(trace.timestamps, trace.channels.get("power_w", []))
            source = "integrated_power"
        if power_w is None:
            counter = self._unsupported.get(
                "energy_mj", f"the energy counter changed fewer than {MIN_COUNTER_CHANGES} times")
            why = f"{counter}, and {self._why_absent('power_w')}"
            result.missing["power_mean_w"] = result.missing["energy_per_inference_mj"] = why
            return
        self.last_energy_source = source
        result.metrics["power_mean_w"] = power_w
        if window.inferences <= 0:
            result.missing["energy_per_inference_mj"] = "no inference was counted in the window"
            return
        # Mean power over the trace times the window's length: the trace overhangs the window by the
        # probe's own start/stop, whose energy must not be charged to the inferences.
        result.metrics["energy_per_inference_mj"] = power_w * window.seconds * 1000.0 / window.inferences

    def _peak(self, metric: str, channel: str, trace: Trace, result: ProbeResult) -> None:
        values = finite(trace.channels.get(channel, []))
        if values:
            result.metrics[metric] = max(values)
        else:
            result.missing[metric] = self._why_absent(channel)

    def _clock_drop(self, trace: Trace, result: ProbeResult) -> None:
        clocks = finite(trace.channels.get("sm_clock_mhz", []))
        if "max_sm_clock_mhz" in self._unsupported:
            result.missing["clock_drop_pct"] = self._unsupported["max_sm_clock_mhz"]
        elif not clocks or not self.max_sm_clock_mhz > 0:
            result.missing["clock_drop_pct"] = self._why_absent("sm_clock_mhz")
        else:
            mean = sum(clocks) / len(clocks)
            result.metrics["clock_drop_pct"] = max(0.0, (1.0 - mean / self.max_sm_clock_mhz) * 100.0)

    def _why_absent(self, channel: str) -> str:
        return self._unsupported.get(channel, f"no valid {channel} reading in the window")


def _first_visible_device() -> str | None:
    """The first entry of CUDA_VISIBLE_DEVICES; None when unset, "" when set but empty."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return value.split(",")[0].strip()


def finite(values: list[float]) -> list[float]:
    return [value for value in values if math.isfinite(value)]


def counter_power_w(timestamps: list[float], energy_mj: list[float]) -> float | None:
    """Mean power from the energy counter between its first and last change, or None when the counter
    moved fewer than :data:`MIN_COUNTER_CHANGES` times (window too short for its refresh rate), went
    backwards (driver reload), or is absent."""
    points = [(t, e) for t, e in zip(timestamps, energy_mj, strict=False) if math.isfinite(e)]
    changes = [points[i] for i in range(1, len(points)) if points[i][1] != points[i - 1][1]]
    if len(changes) < MIN_COUNTER_CHANGES:
        return None
    (t0, e0), (t1, e1) = changes[0], changes[-1]
    if e1 <= e0 or t1 <= t0:
        return None
    return (e1 - e0) / 1000.0 / (t1 - t0)


def integrated_power_w(timestamps: list[float], power_w: list[float]) -> float | None:
    """Mean power by the trapezoid rule over the finite power samples, or None with fewer than two."""
    points = [(t, p) for t, p in zip(timestamps, power_w, strict=False) if math.isfinite(p)]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    joules = sum((t1 - t0) * (p0 + p1) / 2.0 for (t0, p0), (t1, p1) in itertools.pairwise(points))
    return joules / (points[-1][0] - points[0][0])


def throttled_fraction(timestamps: list[float], masks: list[float], throttling: int) -> float | None:
    """Time-weighted share of the trace with a throttling bit set. NVML reports the *current* reasons,
    so each reading is held until the next; intervals that start with a failed reading are left out of
    both the throttled time and the total. None when no interval has a valid reading."""
    throttled = total = 0.0
    for i in range(len(masks) - 1):
        if not math.isfinite(masks[i]):
            continue
        span = timestamps[i + 1] - timestamps[i]
        total += span
        if int(masks[i]) & throttling:
            throttled += span
    return throttled / total if total > 0 else None
