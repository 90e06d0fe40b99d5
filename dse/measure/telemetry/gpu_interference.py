"""What else used the NVIDIA GPU during a measurement window: other compute processes, and their
share of the GPU's SMs. The GPU counterpart of :mod:`~dse.measure.telemetry.cpu_interference`.

All NVML calls go through ``self.nvml`` (the real ``pynvml`` by default; tests hand in a replay of
NVML's own records), and the GPU is the one the ``nvml`` probe would watch
(:func:`~dse.measure.telemetry.nvml.find_gpu`: an ``index`` setting, else the first entry of
``CUDA_VISIBLE_DEVICES``; for a MIG entry, that MIG instance's processes).

Sources:

- ``nvmlDeviceGetComputeRunningProcesses`` -- the processes holding a compute context on the GPU
  (``pid``, ``usedGpuMemory``) -- polled every ``interval_s`` through the window. Channels
  ``processes`` (how many were listed), ``own_listed`` (1 when this process's pid was among them)
  and ``unresolved`` (listed pids that do not exist in this PID namespace).
- ``nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp)``, asked once when the window
  closes for the records since its first reading. A record is one process's ``smUtil`` (% of the
  SMs' time) in a sampling period that ended at ``timeStamp`` (the CPU clock, microseconds since
  the epoch). NVML keeps a record only for a process that computed in that period, raises
  ``NVMLError_NotFound`` when it holds none since ``lastSeenTimeStamp`` and
  ``NVMLError_NotSupported`` where it cannot tell (MIG instances, GPUs before Maxwell, vGPU
  hosts). The records become rows of the trace at their own timestamps (``sample_*`` channels),
  and a last row keeps NVML's answer (``utilization_status``, an ``nvmlReturn_t``: 0 when records
  came) and whether this process had loaded the CUDA driver (``cuda_loaded``); the summary is a
  function of the trace alone.

Metrics:

- ``gpu_foreign_processes``: the most other compute processes listed at once, over the readings
  that bracket the window.
- ``gpu_foreign_pct``: other processes' share of the SMs over the records timed inside the window.
  At each timestamp the other processes' ``smUtil`` are summed and capped at 100; the sum over the
  timestamps is divided by the number of sampling periods the records cover, taken as the most
  records any one process has. NVML documents one record per process (its share over the period),
  so that is the plain sum of the others' shares; where it gives one record per process per
  period, the busiest process -- in a timed window, the measuring one -- has a record in each.
  Missing, with the reason, when NVML has no record inside the window (a window shorter than the
  GPU's sampling period, 1/6 s to 1 s, may have none) or cannot give them: never 0 without records.

Whose process is whose (PID namespaces). The driver does not know PID namespaces: inside a
container NVML reports processes under their host pids (some drivers, 560 among them, translate
the process list into the container's namespace but not the utilisation records), so this
process's own pid may be missing from either.
For the process list and for the records alike, separately:

1. Our pid is there: that is us, every other pid is another process.
2. Else, when a pid there does not exist in this PID namespace (no ``/proc/<pid>``, so it may be
   us seen from the host) and this process has loaded the CUDA driver (``libcuda`` mapped in
   ``/proc/self/maps``), one of them is taken for us: all but one listed process count as other
   processes, and among the records the pid from outside this namespace with the largest summed
   ``smUtil`` in the window is ours (the measuring process computes throughout). Provenance says
   so (``own_process``, ``own_utilization_pid``).
3. Else (every pid exists here, or the CUDA driver is not loaded) we hold no context on this GPU,
   and every process there is another's.

Rule 2 assumes a context this process may not hold (the CUDA driver loaded for another GPU, or
the candidate runs on the CPU): the count can then be one short and the share can leave out the
busiest other process. Rule 3 can count a host pid that happens to exist in this namespace too:
at worst a window flagged that was clean. Graphics processes
(``nvmlDeviceGetGraphicsRunningProcesses``) and MPS clients
(``nvmlDeviceGetMPSComputeRunningProcesses``) are not read.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
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
from dse.measure.telemetry.derived import TelemetryGapError, window_indices
from dse.measure.telemetry.nvml import open_gpu

# nvmlReturn_t values (nvml.h) kept in the trace's utilization_status channel.
NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_UNKNOWN = 999
_RETURN_NAMES = {3: "Not Supported", 4: "Insufficient Permissions", 6: "Not Found",
                 13: "Function Not Found", 15: "GPU is lost", 999: "Unknown Error"}

_POLL = ("processes", "own_listed", "unresolved")
_NO_RECORDS = ("NVML kept no per-process utilization record inside the window (it keeps one only "
               "for a process that computed in a sampling period, 1/6 s to 1 s long depending on "
               "the GPU)")


class GpuInterferenceSettings(ProbeSettings):
    interval_s: float = interval_setting(0.1)
    index: int | None = Field(
        default=None, ge=0,
        description="NVML index of the GPU to watch (PCI bus order, as nvidia-smi numbers them); "
                    "none: the first GPU in CUDA_VISIBLE_DEVICES, as the nvml probe.")


@register_probe
class GpuInterferenceProbe(Probe):
    """Other processes on one NVIDIA GPU during the window, and their share of its SMs (module
    docstring). After ``summarize``, :meth:`provenance` says how this process was told apart."""

    name = "gpu_interference"
    provides = ("gpu_foreign_processes", "gpu_foreign_pct")
    units: ClassVar[dict[str, str]] = {
        "processes": "processes",
        "own_listed": "flag",
        "unresolved": "processes",
        "sample_pid": "pid",
        "sample_sm_pct": "%",
        "sample_mem_pct": "%",
        "sample_own": "flag",
        "sample_resolved": "flag",
        "utilization_status": "nvmlReturn_t",
        "cuda_loaded": "flag",
    }
    settings_model = GpuInterferenceSettings

    def __init__(self, index: int | None = None, interval_s: float = 0.1, *, nvml: Any = None,
                 root: str = "/") -> None:
        super().__init__(interval_s)
        self.index = index
        self.nvml: Any = nvml  # None until available() imports pynvml
        self.root = Path(root)
        self.gpu = ""  # "GPU 0", or "GPU 0's MIG instance", once opened
        self._handle: Any = None
        self._list: Callable[[], list[Any]] | None = None
        self._unsupported: dict[str, str] = {}  # metric -> why NVML cannot give it here
        self._utilization_code = NVML_SUCCESS
        self._opened: tuple[bool, str] | None = None
        self._facts: dict[str, str] = {}

    # -- setup -------------------------------------------------------------------------------------

    def available(self) -> tuple[bool, str]:
        if self._opened is None:
            self._opened = self._open()
        return self._opened

    def _open(self) -> tuple[bool, str]:
        self.nvml, gpu, why = open_gpu(self.nvml, self.index)
        if gpu is None:
            return False, why
        nv = self.nvml
        self.index = gpu.index
        # A MIG instance's own handle lists the processes sharing its SMs (the whole GPU's needs
        # admin rights under MIG and would list the other instances' too).
        self._handle = gpu.handle if gpu.mig_handle is None else gpu.mig_handle
        self.gpu = f"GPU {gpu.index}" if gpu.mig_handle is None else f"GPU {gpu.index}'s MIG instance"
        try:
            self._list = self._lister(nv, self._handle)
        except nv.NVMLError as error:
            self._unsupported["gpu_foreign_processes"] = (
                f"NVML could not list the compute processes on {self.gpu}: {error}")
        try:
            nv.nvmlDeviceGetProcessUtilization(self._handle, int(time.time() * 1e6))
        except nv.NVMLError as error:
            code = _code(error)
            if code not in (NVML_SUCCESS, NVML_ERROR_NOT_FOUND):  # none yet is no failure
                self._utilization_code = code
                self._unsupported["gpu_foreign_pct"] = self._utilization_reason(code, str(error))
        if len(self._unsupported) == len(self.provides):
            return False, "; ".join(self._unsupported[name] for name in self.provides)
        return True, ""

    @staticmethod
    def _lister(nv: Any, handle: Any) -> Callable[[], list[Any]]:
        """The process-list call this driver answers. pynvml calls the newest versioned function
        (``_v3``) and raises NVMLLibraryMismatchError, no NVMLError, on a driver without it."""
        def newest() -> list[Any]:
            return list(nv.nvmlDeviceGetComputeRunningProcesses(handle))

        def v2() -> list[Any]:
            return list(nv.nvmlDeviceGetComputeRunningProcesses_v2(handle))

        mismatch = getattr(nv, "NVMLLibraryMismatchError", None)
        try:
            newest()
        except Exception as error:
            too_new = isinstance(error, nv.NVMLError_FunctionNotFound) or (
                mismatch is not None and isinstance(error, mismatch))
            if not too_new or not hasattr(nv, "nvmlDeviceGetComputeRunningProcesses_v2"):
                raise
            v2()
            return v2
        return newest

    def _utilization_reason(self, code: int, text: str) -> str:
        if code == NVML_ERROR_NOT_SUPPORTED:
            return (f"{self.gpu} does not report per-process utilization (NVML: Not Supported; "
                    "MIG instances, GPUs before Maxwell and vGPU hosts do not)")
        return f"NVML could not read the per-process utilization of {self.gpu}: {text}"

    # -- sampling ----------------------------------------------------------------------------------

    def start(self) -> None:
        ok, why = self.available()
        if not ok:
            raise RuntimeError(f"gpu_interference probe started although unavailable: {why}")
        super().start()

    def stop(self) -> Trace:
        return self.collect(super().stop())

    def read(self) -> dict[str, float]:
        if self._list is None:
            return {}
        try:
            listed = {int(process.pid) for process in self._list()}
        except self.nvml.NVMLError:
            return dict.fromkeys(_POLL, math.nan)  # a failed read mid-window: NaN, never raise
        own = os.getpid()
        unresolved = sum(1 for pid in listed if pid != own and not self._exists(pid))
        return {"processes": float(len(listed)), "own_listed": float(own in listed),
                "unresolved": float(unresolved)}

    def collect(self, trace: Trace) -> Trace:
        """``trace`` with NVML's utilization records since its first reading as rows at their own
        times, and a last row with NVML's answer and ``cuda_loaded`` (what ``stop`` returns)."""
        if not trace.timestamps:
            return trace
        code, records = self._utilization_code, []
        if "gpu_foreign_pct" not in self._unsupported:
            try:
                records = list(self.nvml.nvmlDeviceGetProcessUtilization(
                    self._handle, int(trace.timestamps[0] * 1e6)))
                code = NVML_SUCCESS
            except self.nvml.NVMLError as error:
                code = _code(error)
        own = os.getpid()
        rows = [(stamp, {name: values[i] for name, values in trace.channels.items()})
                for i, stamp in enumerate(trace.timestamps)]
        for record in records:
            pid = int(record.pid)
            rows.append((int(record.timeStamp) / 1e6, {
                "sample_pid": float(pid), "sample_sm_pct": float(record.smUtil),
                "sample_mem_pct": float(record.memUtil), "sample_own": float(pid == own),
                "sample_resolved": float(pid == own or self._exists(pid))}))
        rows.sort(key=lambda row: row[0])  # stable: a record never jumps a reading it ties with
        end = max(trace.timestamps[-1], rows[-1][0])
        rows.append((end, {"utilization_status": float(code),
                           "cuda_loaded": float(self._cuda_loaded())}))
        merged = Trace(trace.probe, units=dict(trace.units))
        for stamp, reading in rows:
            merged.add(stamp, reading)
        return merged

    def _exists(self, pid: int) -> bool:
        """Whether ``pid`` exists in this process's PID namespace."""
        return (self.root / "proc" / str(pid)).exists()

    def _cuda_loaded(self) -> bool:
        """Whether this process has mapped the CUDA driver (libcuda); True when that cannot be
        read, so that a listed process may still be ours."""
        try:
            maps = (self.root / "proc" / "self" / "maps").read_text()
        except OSError:
            return True
        return "/libcuda.so" in maps

    # -- summary -----------------------------------------------------------------------------------

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        self._facts = {}
        result = ProbeResult()
        status = _last_status(trace)
        cuda_loaded = status.get("cuda_loaded", 1.0) != 0.0
        self._count(trace, window, cuda_loaded, result)
        self._share(trace, window, status, cuda_loaded, result)
        return result

    def provenance(self, trace: Trace) -> dict[str, str]:
        """How the last ``summarize`` told this process apart (``own_process``,
        ``own_utilization_pid``) and the others' mean SM share by pid (``foreign_sm_pct_by_pid``)."""
        return dict(self._facts)

    def _count(self, trace: Trace, window: Window, cuda_loaded: bool, result: ProbeResult) -> None:
        metric = "gpu_foreign_processes"
        if metric in self._unsupported:
            result.missing[metric] = self._unsupported[metric]
            return
        listed = trace.channels.get("processes", [math.nan] * len(trace.timestamps))
        try:
            rows = window_indices(trace.timestamps, window, [math.isfinite(v) for v in listed])
        except TelemetryGapError as gap:
            result.missing[metric] = (f"no list of {self.gpu or 'the GPU'}'s compute processes "
                                      f"around the window: {gap}")
            return
        own = [trace.channels["own_listed"][i] for i in rows]
        unresolved = [trace.channels["unresolved"][i] for i in rows]
        if any(own):
            self._facts["own_process"] = "listed"
            counts = [listed[i] - own_i for i, own_i in zip(rows, own, strict=True)]
        elif cuda_loaded and any(unresolved):
            self._facts["own_process"] = (
                f"assumed: pid {os.getpid()} is not among NVML's, which lists processes from "
                "another PID namespace; one listed process was taken for this one")
            counts = [listed[i] - (1 if u else 0) for i, u in zip(rows, unresolved, strict=True)]
        else:
            self._facts["own_process"] = "not listed (no context on this GPU)"
            counts = [listed[i] for i in rows]
        result.metrics[metric] = max(counts)

    def _share(self, trace: Trace, window: Window, status: dict[str, float], cuda_loaded: bool,
               result: ProbeResult) -> None:
        metric = "gpu_foreign_pct"
        if metric in self._unsupported:
            result.missing[metric] = self._unsupported[metric]
            return
        records = _records(trace, window)
        if not records:
            code = int(status.get("utilization_status", NVML_SUCCESS))
            result.missing[metric] = (_NO_RECORDS if code in (NVML_SUCCESS, NVML_ERROR_NOT_FOUND)
                                      else self._utilization_reason(
                                          code, _RETURN_NAMES.get(code, f"NVML error {code}")))
            return
        sm_by_pid: dict[int, float] = defaultdict(float)
        for _, pid, sm, _, _ in records:
            sm_by_pid[pid] += sm
        ours = {pid for _, pid, _, own, _ in records if own}
        outside = {pid for _, pid, _, _, resolved in records if not resolved}
        if not ours and outside and cuda_loaded:
            assumed = max(sorted(outside), key=lambda pid: sm_by_pid[pid])
            ours = {assumed}
            self._facts["own_utilization_pid"] = (
                f"assumed {assumed}: pid {os.getpid()} has no record; {assumed} is the busiest "
                "pid from another PID namespace")
        by_stamp: dict[float, float] = defaultdict(float)
        for stamp, pid, sm, _, _ in records:
            if pid not in ours:
                by_stamp[stamp] += sm
        periods = max(Counter(pid for _, pid, _, _, _ in records).values())
        capped = sum(min(100.0, share) for share in by_stamp.values())
        result.metrics[metric] = min(100.0, capped / periods)
        others = {pid: total / periods for pid, total in sorted(sm_by_pid.items()) if pid not in ours}
        if others:
            self._facts["foreign_sm_pct_by_pid"] = ",".join(
                f"{pid}:{share:.1f}" for pid, share in others.items())


def _code(error: Exception) -> int:
    """The nvmlReturn_t an NVMLError carries."""
    value = getattr(error, "value", NVML_ERROR_UNKNOWN)
    return value if isinstance(value, int) else NVML_ERROR_UNKNOWN


def _last_status(trace: Trace) -> dict[str, float]:
    """The status row ``collect`` added last: ``utilization_status`` and ``cuda_loaded``."""
    status = trace.channels.get("utilization_status", [])
    for i in range(len(status) - 1, -1, -1):
        if math.isfinite(status[i]):
            return {"utilization_status": status[i],
                    "cuda_loaded": trace.channels["cuda_loaded"][i]}
    return {}


def _records(trace: Trace, window: Window) -> list[tuple[float, int, float, bool, bool]]:
    """NVML's utilization records timed inside the window, once each: (time, pid, smUtil, ours,
    pid exists in this PID namespace)."""
    pids = trace.channels.get("sample_pid", [])
    seen: set[tuple[float, int]] = set()
    out = []
    for i, pid in enumerate(pids):
        stamp = trace.timestamps[i]
        if not math.isfinite(pid) or not window.start < stamp <= window.end:
            continue
        key = (stamp, int(pid))
        if key in seen:
            continue
        seen.add(key)
        out.append((stamp, int(pid), trace.channels["sample_sm_pct"][i],
                    trace.channels["sample_own"][i] == 1.0,
                    trace.channels["sample_resolved"][i] == 1.0))
    return out
