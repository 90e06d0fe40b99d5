"""Other work on the NVIDIA GPU during a window: the gpu_interference probe on replayed NVML records
(pynvml's own structs and errors), whose process is whose across PID namespaces, the policy's GPU
limits in ``disturbed()``, and, where a GPU exists, the real probe over a short window."""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from dse.measure.quality_labels import disturbed
from dse.measure.telemetry import PROBES, ProbeResult, Trace, Window, make_probe
from dse.measure.telemetry.gpu_interference import GpuInterferenceProbe
from dse.spec.models import InterferenceSpec

PROC = Path(__file__).resolve().parents[1] / "fixtures" / "proc"
OWN = os.getpid()
# Host pids of processes in other PID namespaces (containers): no /proc/<pid> in this one.
HOST_A, HOST_B = 3_145_001, 3_145_002
# Processes of this PID namespace (the test gives them a /proc/<pid>).
NEIGHBOUR, OTHER = 4_001, 4_002
T0 = 1_700_000_000.0  # window start, seconds since the epoch (NVML's clock, in microseconds)


@pytest.fixture
def nv() -> ModuleType:
    return pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")


class NvmlReplay:
    """The pynvml calls the probe makes, answered with NVML's own types: the process list as pynvml
    builds it (``nvmlStructToFriendlyObject`` of ``c_nvmlProcessInfo_t``), utilization records as
    ``c_nvmlProcessUtilizationSample_t``, failures as pynvml's NVMLError subclasses. Handles are
    NVML indices; ``listed`` is what the next process-list call returns."""

    def __init__(self, nv: ModuleType, records: Sequence[tuple[int, float, int]] = (), *,
                 utilization_error: int | None = None, gpus: int = 1) -> None:
        self.nv = nv
        for name in ("NVMLError", "NVMLError_NotFound", "NVMLError_NotSupported",
                     "NVMLError_FunctionNotFound", "NVMLError_LibraryNotFound",
                     "NVMLError_DriverNotLoaded", "NVMLLibraryMismatchError"):
            setattr(self, name, getattr(nv, name))
        self.gpus = gpus
        self.listed: list[int] = []
        self.list_error: int | None = None
        # (pid, time in seconds, smUtil %): NVML keeps timeStamp in microseconds.
        self.records = [nv.c_nvmlProcessUtilizationSample_t(
            pid=pid, timeStamp=round(t * 1e6), smUtil=sm, memUtil=sm // 2, encUtil=0, decUtil=0)
            for pid, t, sm in records]
        self.utilization_error = utilization_error
        self.asked_since: list[int] = []

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        if self.list_error is not None:
            raise self.nv.NVMLError(self.list_error)
        return [self.nv.nvmlStructToFriendlyObject(self.nv.c_nvmlProcessInfo_t(
            pid=pid, usedGpuMemory=512 << 20, gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF)) for pid in self.listed]

    def nvmlDeviceGetProcessUtilization(self, handle: int, last_seen: int) -> list[Any]:
        self.asked_since.append(last_seen)
        if self.utilization_error is not None:
            raise self.nv.NVMLError(self.utilization_error)
        found = [r for r in self.records if r.timeStamp > last_seen]
        if not found:
            raise self.nv.NVMLError_NotFound()
        return found


def proc_tree(tmp_path: Path, maps: str = "maps-cuda", visible: tuple[int, ...] = (NEIGHBOUR, OTHER)) -> str:
    """A /proc with this process's maps (a real-format fixture) and the pids this namespace holds."""
    (tmp_path / "proc" / "self").mkdir(parents=True)
    shutil.copy(PROC / maps, tmp_path / "proc" / "self" / "maps")
    for pid in visible:
        (tmp_path / "proc" / str(pid)).mkdir()
    return str(tmp_path)


def opened(replay: NvmlReplay, root: str) -> GpuInterferenceProbe:
    probe = GpuInterferenceProbe(index=0, nvml=replay, root=root)
    assert probe.available() == (True, "")
    return probe


def window_trace(probe: GpuInterferenceProbe, replay: NvmlReplay,
                 polls: list[tuple[float, list[int]]]) -> Trace:
    """What start/stop would return: a process-list reading at each (time, pids), then the records
    ``stop`` collects."""
    trace = Trace("gpu_interference", units=dict(GpuInterferenceProbe.units))
    for t, pids in polls:
        replay.listed = pids
        trace.add(t, probe.read())
    return probe.collect(trace)


WINDOW = Window(T0, T0 + 1.0, inferences=100)
# Readings that bracket the window: one just before it (start) and one just after (stop).
BRACKET = (T0 - 0.001, T0 + 1.001)


def _polls(*pids: list[int]) -> list[tuple[float, list[int]]]:
    """Readings evenly across the bracket, the first before the window and the last after it."""
    step = (BRACKET[1] - BRACKET[0]) / (len(pids) - 1)
    return [(BRACKET[0] + i * step, list(p)) for i, p in enumerate(pids)]


# -- other processes ---------------------------------------------------------------------------------


def test_other_processes_are_counted_and_ours_is_not(nv: ModuleType, tmp_path: Path) -> None:
    replay = NvmlReplay(nv)
    probe = opened(replay, proc_tree(tmp_path))
    trace = window_trace(probe, replay, _polls([OWN], [OWN, NEIGHBOUR], [OWN, NEIGHBOUR, HOST_A],
                                               [OWN]))
    assert trace.channels["processes"][:4] == [1.0, 2.0, 3.0, 1.0]
    assert trace.channels["own_listed"][:4] == [1.0, 1.0, 1.0, 1.0]
    result = probe.summarize(trace, WINDOW)
    # At most two others at once; HOST_A is not taken for us, since our own pid is listed.
    assert result.metrics["gpu_foreign_processes"] == 2.0
    assert probe.provenance(trace)["own_process"] == "listed"


def test_alone_on_the_gpu_is_zero(nv: ModuleType, tmp_path: Path) -> None:
    replay = NvmlReplay(nv, [(OWN, T0 + 0.5, 97)])
    probe = opened(replay, proc_tree(tmp_path))
    result = probe.summarize(window_trace(probe, replay, _polls([OWN], [OWN])), WINDOW)
    assert result.metrics == {"gpu_foreign_processes": 0.0, "gpu_foreign_pct": 0.0}
    assert result.missing == {}


def test_in_a_container_one_process_from_outside_is_taken_for_ours(nv: ModuleType,
                                                                   tmp_path: Path) -> None:
    # NVML lists host pids: ours is not among them, HOST_A and HOST_B come from another namespace.
    replay = NvmlReplay(nv, [(HOST_A, T0 + 0.5, 90), (HOST_B, T0 + 0.5, 8)])
    probe = opened(replay, proc_tree(tmp_path))
    trace = window_trace(probe, replay, _polls([HOST_A], [HOST_A, HOST_B], [HOST_A]))
    assert [v for v in trace.channels["unresolved"] if math.isfinite(v)] == [1.0, 2.0, 1.0]
    result = probe.summarize(trace, WINDOW)
    assert result.metrics["gpu_foreign_processes"] == 1.0  # all but one
    # The busiest pid from outside (HOST_A, 90%) is ours: the other one used 8%.
    assert result.metrics["gpu_foreign_pct"] == 8.0
    facts = probe.provenance(trace)
    assert facts["own_process"].startswith(f"assumed: pid {OWN} is not among NVML's")
    assert facts["own_utilization_pid"].startswith(f"assumed {HOST_A}: pid {OWN} has no record")
    assert facts["foreign_sm_pct_by_pid"] == f"{HOST_B}:8.0"


def test_without_the_cuda_driver_every_listed_process_is_another(nv: ModuleType,
                                                                 tmp_path: Path) -> None:
    # libcuda is not mapped here (a CPU candidate): no process on the GPU can be this one.
    replay = NvmlReplay(nv, [(HOST_A, T0 + 0.5, 60)])
    probe = opened(replay, proc_tree(tmp_path, maps="maps-no-cuda"))
    trace = window_trace(probe, replay, _polls([HOST_A], [HOST_A, HOST_B]))
    assert trace.channels["cuda_loaded"][-1] == 0.0
    result = probe.summarize(trace, WINDOW)
    assert result.metrics == {"gpu_foreign_processes": 2.0, "gpu_foreign_pct": 60.0}
    assert probe.provenance(trace)["own_process"] == "not listed (no context on this GPU)"


def test_processes_of_this_namespace_are_never_taken_for_ours(nv: ModuleType, tmp_path: Path) -> None:
    # Our pid is absent, but every listed pid exists here: we hold no context on this GPU.
    replay = NvmlReplay(nv, [(NEIGHBOUR, T0 + 0.5, 30)])
    probe = opened(replay, proc_tree(tmp_path))
    result = probe.summarize(window_trace(probe, replay, _polls([NEIGHBOUR], [NEIGHBOUR, OTHER])),
                             WINDOW)
    assert result.metrics == {"gpu_foreign_processes": 2.0, "gpu_foreign_pct": 30.0}


# -- the others' share of the SMs ----------------------------------------------------------------------


def test_share_is_averaged_over_the_sampling_periods_and_capped(nv: ModuleType,
                                                                tmp_path: Path) -> None:
    # Four periods in the window, each with a record of ours; others at some of them. At T0+0.6
    # two others add up to 130%: capped at 100. Records after the first reading but before the
    # window, or after the window, stay out.
    replay = NvmlReplay(nv, [
        (NEIGHBOUR, T0 - 0.0005, 100),
        (OWN, T0 + 0.2, 90), (NEIGHBOUR, T0 + 0.2, 10),
        (OWN, T0 + 0.4, 95),
        (OWN, T0 + 0.6, 40), (NEIGHBOUR, T0 + 0.6, 70), (OTHER, T0 + 0.6, 60),
        (OWN, T0 + 0.8, 92), (NEIGHBOUR, T0 + 0.8, 6),
        (NEIGHBOUR, T0 + 1.2, 100),
    ])
    probe = opened(replay, proc_tree(tmp_path))
    trace = window_trace(probe, replay, _polls([OWN, NEIGHBOUR, OTHER], [OWN, NEIGHBOUR, OTHER]))
    # NVML is asked once, at the end, for the records since the first reading.
    assert replay.asked_since[1:] == [round(BRACKET[0] * 1e6)]  # [0]: available() tried it
    result = probe.summarize(trace, WINDOW)
    assert result.metrics["gpu_foreign_pct"] == pytest.approx((10 + 0 + 100 + 6) / 4)
    # The records are kept in the trace at their own times, in order with the readings.
    assert trace.timestamps == sorted(trace.timestamps)
    assert [p for p in trace.channels["sample_pid"] if math.isfinite(p)][:3] == [NEIGHBOUR, OWN,
                                                                                  NEIGHBOUR]
    assert probe.provenance(trace)["foreign_sm_pct_by_pid"] == (
        f"{NEIGHBOUR}:{(10 + 70 + 6) / 4:.1f},{OTHER}:{60 / 4:.1f}")


def test_one_record_per_process_is_its_share(nv: ModuleType, tmp_path: Path) -> None:
    # NVML's documented answer: one record per process, each at its own time.
    replay = NvmlReplay(nv, [(OWN, T0 + 0.9, 70), (NEIGHBOUR, T0 + 0.7, 25), (OTHER, T0 + 0.8, 12)])
    probe = opened(replay, proc_tree(tmp_path))
    result = probe.summarize(window_trace(probe, replay, _polls([OWN], [OWN])), WINDOW)
    assert result.metrics["gpu_foreign_pct"] == 37.0


def test_no_records_is_missing_with_why_never_zero(nv: ModuleType, tmp_path: Path) -> None:
    replay = NvmlReplay(nv, [(NEIGHBOUR, T0 + 1.5, 80)])  # only after the window
    probe = opened(replay, proc_tree(tmp_path))
    trace = window_trace(probe, replay, _polls([OWN, NEIGHBOUR], [OWN, NEIGHBOUR]))
    result = probe.summarize(trace, WINDOW)
    assert "gpu_foreign_pct" not in result.metrics
    assert result.missing["gpu_foreign_pct"].startswith(
        "NVML kept no per-process utilization record inside the window")
    assert result.metrics["gpu_foreign_processes"] == 1.0  # the list still counts

    replay = NvmlReplay(nv)  # none at all: NVML answers NVMLError_NotFound
    probe = opened(replay, proc_tree(tmp_path / "again"))
    trace = window_trace(probe, replay, _polls([OWN], [OWN]))
    assert trace.channels["utilization_status"][-1] == nv.NVML_ERROR_NOT_FOUND
    assert probe.summarize(trace, WINDOW).missing["gpu_foreign_pct"].startswith(
        "NVML kept no per-process utilization record")


def test_unsupported_utilization_is_missing_with_why(nv: ModuleType, tmp_path: Path) -> None:
    replay = NvmlReplay(nv, utilization_error=nv.NVML_ERROR_NOT_SUPPORTED)
    probe = opened(replay, proc_tree(tmp_path))
    result = probe.summarize(window_trace(probe, replay, _polls([OWN, OTHER], [OWN])), WINDOW)
    assert result.metrics == {"gpu_foreign_processes": 1.0}
    assert result.missing == {"gpu_foreign_pct": (
        "GPU 0 does not report per-process utilization (NVML: Not Supported; MIG instances, GPUs "
        "before Maxwell and vGPU hosts do not)")}


def test_a_failure_when_the_window_closes_is_missing_with_why(nv: ModuleType, tmp_path: Path) -> None:
    replay = NvmlReplay(nv, [(OWN, T0 + 0.5, 90)])
    probe = opened(replay, proc_tree(tmp_path))
    replay.utilization_error = nv.NVML_ERROR_GPU_IS_LOST
    result = probe.summarize(window_trace(probe, replay, _polls([OWN], [OWN])), WINDOW)
    assert result.missing["gpu_foreign_pct"] == (
        "NVML could not read the per-process utilization of GPU 0: GPU is lost")


def test_a_failed_list_is_skipped_and_none_is_missing(nv: ModuleType, tmp_path: Path) -> None:
    replay = NvmlReplay(nv)
    probe = opened(replay, proc_tree(tmp_path))
    polls = _polls([OWN], [OWN, NEIGHBOUR], [OWN])
    trace = Trace("gpu_interference")
    for i, (t, pids) in enumerate(polls):
        replay.listed = pids
        replay.list_error = nv.NVML_ERROR_GPU_IS_LOST if i == 1 else None
        trace.add(t, probe.read())
    assert math.isnan(trace.channels["processes"][1])
    assert probe.summarize(trace, WINDOW).metrics["gpu_foreign_processes"] == 0.0

    replay.list_error = nv.NVML_ERROR_GPU_IS_LOST
    trace = Trace("gpu_interference")
    for t, _ in polls:
        trace.add(t, probe.read())
    assert probe.summarize(trace, WINDOW).missing["gpu_foreign_processes"].startswith(
        "no list of GPU 0's compute processes around the window: no valid reading")


# -- NVML absent or partial -----------------------------------------------------------------------------


def test_without_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    assert GpuInterferenceProbe().available() == (
        False, "nvidia-ml-py is not installed (pip install nvidia-ml-py)")


def test_without_the_driver(nv: ModuleType) -> None:
    class NoDriver(NvmlReplay):
        def nvmlInit(self) -> None:
            raise self.nv.NVMLError_LibraryNotFound()

    assert GpuInterferenceProbe(nvml=NoDriver(nv)).available() == (
        False, "NVML library not found (no NVIDIA driver on this host)")


def test_no_visible_gpu(nv: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert GpuInterferenceProbe(nvml=NvmlReplay(nv)).available() == (
        False, "CUDA_VISIBLE_DEVICES is empty: no GPU is visible to this process")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # the nvml probe's choice, shared
    probe = GpuInterferenceProbe(nvml=NvmlReplay(nv, gpus=2))
    assert probe.available() == (True, "") and probe.index == 1


def test_a_mig_instance_lists_its_own_processes(nv: ModuleType, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    mig = "MIG-0c1d2e3f-4444-5555-6666-777788889999"
    asked: list[object] = []

    class MigReplay(NvmlReplay):
        def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
            assert uuid == mig
            return uuid

        def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: str) -> int:
            return 1

        def nvmlDeviceGetIndex(self, handle: int) -> int:
            return handle

        def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
            asked.append(handle)
            return super().nvmlDeviceGetComputeRunningProcesses(handle)

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mig)
    probe = GpuInterferenceProbe(nvml=MigReplay(nv, gpus=2), root=proc_tree(tmp_path))
    assert probe.available() == (True, "")
    assert (probe.index, probe.gpu) == (1, "GPU 1's MIG instance")
    assert asked == [mig]  # the instance's handle, not the whole GPU's


def test_neither_source_is_unavailable_with_both_reasons(nv: ModuleType, tmp_path: Path) -> None:
    replay = NvmlReplay(nv, utilization_error=nv.NVML_ERROR_NOT_SUPPORTED)
    replay.list_error = nv.NVML_ERROR_NO_PERMISSION
    ok, why = GpuInterferenceProbe(index=0, nvml=replay).available()
    assert not ok
    assert why == ("NVML could not list the compute processes on GPU 0: Insufficient Permissions; "
                   "GPU 0 does not report per-process utilization (NVML: Not Supported; MIG "
                   "instances, GPUs before Maxwell and vGPU hosts do not)")


def test_an_older_driver_is_asked_the_older_list_call(nv: ModuleType, tmp_path: Path) -> None:
    class OldDriver(NvmlReplay):
        # pynvml's unversioned call raises this where the driver lacks the _v3 function.
        def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
            raise self.nv.NVMLLibraryMismatchError("Unversioned function called ...")

        def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: int) -> list[Any]:
            return NvmlReplay.nvmlDeviceGetComputeRunningProcesses(self, handle)

    replay = OldDriver(nv)
    probe = opened(replay, proc_tree(tmp_path))
    replay.listed = [OWN, NEIGHBOUR]
    assert probe.read()["processes"] == 2.0


def test_stop_returns_the_readings_and_the_records(nv: ModuleType, tmp_path: Path) -> None:
    replay = NvmlReplay(nv)
    probe = opened(replay, proc_tree(tmp_path))
    replay.listed = [OWN, NEIGHBOUR]
    replay.records = [nv.c_nvmlProcessUtilizationSample_t(pid=NEIGHBOUR, timeStamp=2**62, smUtil=3)]
    probe.start()
    trace = probe.stop()  # at least the readings start() and stop() take, then NVML's records
    assert trace.channels["processes"][0] == 2.0
    assert trace.channels["sample_pid"][-2] == NEIGHBOUR  # timed after every reading
    assert trace.channels["utilization_status"][-1] == 0.0
    assert trace.units["utilization_status"] == "nvmlReturn_t"


def test_registered_with_its_settings() -> None:
    assert PROBES["gpu_interference"] is GpuInterferenceProbe
    probe = make_probe({"gpu_interference": {"index": 1, "interval_s": 0.5}})
    assert isinstance(probe, GpuInterferenceProbe) and (probe.index, probe.interval_s) == (1, 0.5)


# -- the policy ------------------------------------------------------------------------------------------


def test_gpu_readings_beyond_the_policy_disturb_a_window() -> None:
    quiet_cpu = ProbeResult(metrics={"interference_cpu_pct": 1.0, "steal_pct": 0.0})
    busy_gpu = ProbeResult(metrics={"gpu_foreign_processes": 2.0, "gpu_foreign_pct": 37.0})
    assert disturbed(quiet_cpu, 20.0, 5.0, gpu=busy_gpu) == (
        "2 other processes computed on the GPU (at most 0 allowed); other processes used 37% of "
        "the GPU's SMs (at most 5% allowed)")
    one = ProbeResult(metrics={"gpu_foreign_processes": 1.0, "gpu_foreign_pct": 3.0})
    assert disturbed(quiet_cpu, 20.0, 5.0, gpu=one) == (
        "1 other process computed on the GPU (at most 0 allowed)")
    assert disturbed(quiet_cpu, 20.0, 5.0, gpu=busy_gpu, max_gpu_foreign_pct=40.0,
                     max_gpu_foreign_processes=2) == ""
    # CPU and GPU reasons together, CPU first.
    busy_cpu = ProbeResult(metrics={"interference_cpu_pct": 50.0, "steal_pct": 0.0})
    assert disturbed(busy_cpu, 20.0, 5.0, gpu=one) == (
        "other processes used 50% of the CPUs' time (at most 20% allowed); 1 other process "
        "computed on the GPU (at most 0 allowed)")
    # A share missing (no NVML records): the count alone decides; both missing: nothing shows.
    count_only = ProbeResult(metrics={"gpu_foreign_processes": 0.0},
                             missing={"gpu_foreign_pct": "no records"})
    assert disturbed(quiet_cpu, 20.0, 5.0, gpu=count_only) == ""
    assert disturbed(None, 20.0, 5.0, gpu=ProbeResult(missing={"gpu_foreign_pct": "x"})) == ""


def test_cpu_only_verdicts_are_unchanged() -> None:
    busy = ProbeResult(metrics={"interference_cpu_pct": 50.0, "steal_pct": 7.0})
    assert disturbed(busy, 20.0, 5.0) == (
        "other processes used 50% of the CPUs' time (at most 20% allowed); the hypervisor took "
        "7% of the CPUs' time (at most 5% allowed)")
    assert disturbed(busy, 60.0, 10.0) == ""
    assert disturbed(busy, 60.0, 10.0, gpu=None) == ""
    assert disturbed(None, 20.0, 5.0) == ""


def test_policy_defaults_are_disturbeds_defaults() -> None:
    import inspect

    policy = InterferenceSpec()
    assert (policy.max_gpu_foreign_pct, policy.max_gpu_foreign_processes) == (5.0, 0)
    parameters = inspect.signature(disturbed).parameters
    assert parameters["max_gpu_foreign_pct"].default == policy.max_gpu_foreign_pct
    assert parameters["max_gpu_foreign_processes"].default == policy.max_gpu_foreign_processes
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        InterferenceSpec(max_gpu_foreign_processes=-1)


# -- a real GPU ------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_real_gpu_window() -> None:
    probe = GpuInterferenceProbe(interval_s=0.02)
    ok, why = probe.available()
    if not ok:
        pytest.skip(f"no NVIDIA GPU / NVML on this machine ({why})")
    work = _gpu_work()
    probe.start()
    start = time.time()
    work(0.5)  # the measured work; without torch's CUDA the window is just the two readings
    end = time.time()
    trace = probe.stop()
    result = probe.summarize(trace, Window(start, end, inferences=1))

    assert set(result.metrics) | set(result.missing) == set(probe.provides)
    assert not set(result.metrics) & set(result.missing)
    if "gpu_foreign_processes" in result.metrics:
        count = result.metrics["gpu_foreign_processes"]
        assert count >= 0 and count == int(count)
    if "gpu_foreign_pct" in result.metrics:
        assert 0.0 <= result.metrics["gpu_foreign_pct"] <= 100.0
    assert trace.timestamps == sorted(trace.timestamps)
    assert math.isfinite(trace.channels["utilization_status"][-1])
    assert probe.provenance(trace)["own_process"]


def _gpu_work() -> Any:
    """A function running matmuls on the GPU for some seconds, or doing nothing without torch's
    CUDA."""
    try:
        import torch
    except ImportError:
        return lambda seconds: None
    if not torch.cuda.is_available():
        return lambda seconds: None
    a = torch.randn(2048, 2048, device="cuda")

    def work(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            a @ a  # the work is the point; the product is thrown away
            torch.cuda.synchronize()

    return work
