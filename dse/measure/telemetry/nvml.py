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

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar

from pydantic import Field

from dse.measure.telemetry.base import (
    Probe,
    ProbeResult,
    ProbeSettings,
    Trace,
    Window,
    interval_setting,
    register_probe,
)
from dse.measure.telemetry.derived import (
    TelemetryGapError,
    clock_drop_pct,
    counter_delta,
    energy_metrics,
    fraction_true,
    power_energy,
    window_indices,
)
from dse.measure.telemetry.nvml_throttle import decode_clock_event_reasons, throttling_mask

#: The counter must change at least this often in the trace before its difference is trusted: NVML
#: refreshes it at a coarse rate, so a value read at time t is really the value of the last refresh.
#: Taking the energy between the first and last *change* (not the first and last reading) removes that
#: lag at both ends; three changes make the span at least two refresh periods long.
MIN_COUNTER_CHANGES = 3

_ENERGY_METRICS = ("power_mean_w", "energy_per_inference_mj")


class NvmlSettings(ProbeSettings):
    interval_s: float = interval_setting(0.02)
    index: int | None = Field(
        default=None, ge=0,
        description="NVML index of the GPU to watch (PCI bus order, as nvidia-smi numbers them); "
                    "none: the first GPU in CUDA_VISIBLE_DEVICES.")


@register_probe
class NvmlProbe(Probe):
    """Samples one NVIDIA GPU through NVML. See the module docstring for which GPU.

    After ``summarize``, :attr:`last_energy_source` says where the energy figures came from:
    ``"energy_counter"`` (NVML's total-energy counter), ``"integrated_power"`` (trapezoid over the
    power samples), or ``""`` (no energy figure); :meth:`provenance` reports it.
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
    settings_model = NvmlSettings

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
        self.nvml, gpu, why = open_gpu(self.nvml, self.index)
        if gpu is None:
            return False, why
        self.index = gpu.index
        self._probe_channels(self.nvml, gpu.handle)
        return True, ""

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
        result = self._energy(trace, window)
        self._peak("temperature_peak_c", "temperature_c", trace, result)
        self._peak("gpu_memory_used_peak_mb", "memory_used_mb", trace, result)
        self._clock_drop(trace, result)
        self._throttled(trace, window, result)
        return result

    def provenance(self, trace: Trace) -> dict[str, str]:
        """``energy_source`` (see :attr:`last_energy_source`) once ``summarize`` found one, and
        ``clock_event_reasons``, every reason NVML gave in the trace, when one of them was throttling."""
        facts: dict[str, str] = {}
        if self.last_energy_source:
            facts["energy_source"] = self.last_energy_source
        seen = 0
        for mask in trace.channels.get("clock_event_reasons", []):
            if math.isfinite(mask):
                seen |= int(mask)
        if seen & throttling_mask():
            facts["clock_event_reasons"] = ",".join(decode_clock_event_reasons(seen))
        return facts

    def _energy(self, trace: Trace, window: Window) -> ProbeResult:
        """The counter when it can be trusted (:func:`counter_energy`), else integrated power."""
        self.last_energy_source = ""
        energy = self._channel(trace, "energy_mj")
        try:
            result = counter_energy(trace.timestamps, energy, window)
        except TelemetryGapError as counter_gap:
            counter_why = self._why_gap("energy_mj", energy, counter_gap)
            power = self._channel(trace, "power_w")
            try:
                result = power_energy(trace.timestamps, power, window)
            except TelemetryGapError as power_gap:
                why = f"{counter_why}, and {self._why_gap('power_w', power, power_gap)}"
                return ProbeResult(missing=dict.fromkeys(_ENERGY_METRICS, why))
            self.last_energy_source = "integrated_power"
            return result
        self.last_energy_source = "energy_counter"
        return result

    def _peak(self, metric: str, channel: str, trace: Trace, result: ProbeResult) -> None:
        values = finite(trace.channels.get(channel, []))
        if values:
            result.metrics[metric] = max(values)
        else:
            result.missing[metric] = self._why_absent(channel)

    def _clock_drop(self, trace: Trace, result: ProbeResult) -> None:
        if "max_sm_clock_mhz" in self._unsupported:
            result.missing["clock_drop_pct"] = self._unsupported["max_sm_clock_mhz"]
            return
        clocks = self._channel(trace, "sm_clock_mhz")
        try:
            result.metrics["clock_drop_pct"] = clock_drop_pct(clocks, self.max_sm_clock_mhz)
        except TelemetryGapError as gap:
            result.missing["clock_drop_pct"] = self._why_gap("sm_clock_mhz", clocks, gap)

    def _throttled(self, trace: Trace, window: Window, result: ProbeResult) -> None:
        """Share of the window with a throttling bit set. NVML reports the *current* reasons, so
        each reading holds until the next (:func:`~dse.measure.telemetry.derived.fraction_true`)."""
        masks = self._channel(trace, "clock_event_reasons")
        throttling = throttling_mask()
        flags = [float(int(m) & throttling != 0) if math.isfinite(m) else math.nan for m in masks]
        try:
            result.metrics["throttled_fraction"] = fraction_true(trace.timestamps, flags, window)
        except TelemetryGapError as gap:
            result.missing["throttled_fraction"] = self._why_gap("clock_event_reasons", masks, gap)

    @staticmethod
    def _channel(trace: Trace, channel: str) -> list[float]:
        """A channel's readings, all NaN when the trace lacks it."""
        return trace.channels.get(channel, [math.nan] * len(trace.timestamps))

    def _why_absent(self, channel: str) -> str:
        return self._unsupported.get(channel, f"no valid {channel} reading in the window")

    def _why_gap(self, channel: str, values: Sequence[float], gap: TelemetryGapError) -> str:
        """Why a figure from ``channel`` is missing: the channel was never read or never valid, or
        its valid readings did not support the figure (``gap``)."""
        if channel in self._unsupported or not any(math.isfinite(v) for v in values):
            return self._why_absent(channel)
        return f"{channel}: {gap}"


@dataclass(frozen=True)
class GpuChoice:
    """The GPU a probe watches: the whole GPU's handle and NVML index, and the handle of the MIG
    instance CUDA_VISIBLE_DEVICES named (None when it named a whole GPU)."""

    handle: Any
    index: int
    mig_handle: Any = None


def open_nvml(nv: Any = None) -> tuple[Any, str]:
    """The NVML bindings, initialised, and "" -- ``nv`` when given (a stand-in), else the real
    ``pynvml`` -- or (``nv``, why not) when NVML cannot start on this host."""
    if nv is None:
        try:
            import pynvml
        except ImportError:
            return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
        nv = pynvml
    try:
        nv.nvmlInit()
    except nv.NVMLError_LibraryNotFound:
        return nv, "NVML library not found (no NVIDIA driver on this host)"
    except nv.NVMLError_DriverNotLoaded:
        return nv, "the NVIDIA driver is not loaded"
    except nv.NVMLError as error:
        return nv, f"NVML could not start: {error}"
    return nv, ""


def open_gpu(nv: Any, index: int | None) -> tuple[Any, GpuChoice | None, str]:
    """NVML started (:func:`open_nvml`) and the GPU a probe watches (:func:`find_gpu`): (the
    bindings, the GPU, "") or (the bindings, None, why not). NVML stays initialised for the
    probe's life: its handle must outlive every window, and the probe contract has no close hook
    (nvmlInit is reference-counted, so this leaks nothing)."""
    nv, why = open_nvml(nv)
    if why:
        return nv, None, why
    try:
        return nv, find_gpu(nv, index), ""
    except LookupError as error:
        return nv, None, str(error)
    except nv.NVMLError as error:
        return nv, None, f"NVML could not open the GPU: {error}"


def find_gpu(nv: Any, index: int | None) -> GpuChoice:
    """The GPU to watch (module docstring): NVML index ``index``, else the first entry of
    CUDA_VISIBLE_DEVICES, else GPU 0. LookupError says why none fits; NVML's errors pass through."""
    count = int(nv.nvmlDeviceGetCount())
    entry = str(index) if index is not None else _first_visible_device()
    if entry is None:
        entry = "0"
    if entry == "":
        raise LookupError("CUDA_VISIBLE_DEVICES is empty: no GPU is visible to this process")
    if entry.startswith("MIG-"):
        mig = nv.nvmlDeviceGetHandleByUUID(entry)
        handle = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        return GpuChoice(handle, int(nv.nvmlDeviceGetIndex(handle)), mig)
    if entry.startswith("GPU-"):
        uuids = [str(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
        matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
        if len(matches) != 1:
            found = "no" if not matches else "more than one"
            raise LookupError(f"{found} GPU matches UUID {entry!r} from CUDA_VISIBLE_DEVICES; "
                              f"NVML sees {uuids}")
        return GpuChoice(nv.nvmlDeviceGetHandleByIndex(matches[0]), matches[0])
    try:
        number = int(entry)
    except ValueError:
        raise LookupError(f"cannot read GPU {entry!r} (from CUDA_VISIBLE_DEVICES): "
                          "expected an index, a GPU-... or a MIG-... UUID") from None
    if not 0 <= number < count:
        raise LookupError(f"GPU index {number} out of range: NVML sees {count} GPU(s)")
    return GpuChoice(nv.nvmlDeviceGetHandleByIndex(number), number)


def _first_visible_device() -> str | None:
    """The first entry of CUDA_VISIBLE_DEVICES; None when unset, "" when set but empty."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return value.split(",")[0].strip()


def finite(values: list[float]) -> list[float]:
    return [value for value in values if math.isfinite(value)]


def counter_energy(timestamps: Sequence[float], energy_mj: Sequence[float], window: Window) -> ProbeResult:
    """Energy metrics from NVML's total-energy counter (mJ), by its own rule.

    Among the valid readings that bracket the window, the counter must change at least
    :data:`MIN_COUNTER_CHANGES` times; its mean power is its advance between the first and the last
    change over the time between them, and the window's energy is that mean power times the
    window's length (the changes span less than the window). Raises
    :class:`~dse.measure.telemetry.derived.TelemetryGapError` when the counter cannot be trusted:
    too few changes (window too short for its refresh rate), a counter that went backwards (driver
    reload), or readings that do not bracket the window.
    """
    rows = window_indices(timestamps, window, [math.isfinite(e) for e in energy_mj])
    changes = [i for previous, i in pairwise(rows) if energy_mj[i] != energy_mj[previous]]
    if len(changes) < MIN_COUNTER_CHANGES:
        raise TelemetryGapError(
            f"the energy counter changed {len(changes)} time(s) in the window, fewer than the "
            f"{MIN_COUNTER_CHANGES} needed to trust it at its refresh rate")
    first, last = changes[0], changes[-1]
    millijoules = counter_delta([energy_mj[i] for i in rows if first <= i <= last], wrap=None)
    seconds = timestamps[last] - timestamps[first]
    if not seconds > 0:
        raise TelemetryGapError(f"the energy counter's changes span no time ({seconds=} s)")
    return energy_metrics(millijoules / 1000.0 / seconds * window.seconds, window)
