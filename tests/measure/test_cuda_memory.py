"""The CUDA allocator probe: its reason where there is no GPU, its summary, and a real peak on a GPU."""

from __future__ import annotations

import sys

import pytest

from dse.measure.telemetry.base import PROBES, Trace, Window
from dse.measure.telemetry.cuda_memory import CudaMemoryProbe


def test_registered() -> None:
    assert PROBES["cuda_memory"] is CudaMemoryProbe


def test_without_a_cuda_device_says_so() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host has a CUDA device")
    assert CudaMemoryProbe().available() == (False, "torch reports no CUDA device")


def test_without_torch_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    assert CudaMemoryProbe().available() == (False, "torch is not installed")


def test_peak_is_the_high_water_mark_read_at_stop() -> None:
    trace = Trace("cuda_memory")
    # The allocator's high-water mark only grows after the reset at start(); the last reading is stop's.
    for t, allocated, peak in [(0.0, 10.0, 10.0), (0.1, 5.0, 300.0), (0.2, 5.0, 300.0), (0.3, 5.0, 320.0)]:
        trace.add(t, {"allocated_mb": allocated, "allocated_peak_mb": peak})
    result = CudaMemoryProbe().summarize(trace, Window(0.0, 0.3, inferences=3))
    assert result.metrics == {"cuda_allocated_peak_mb": 320.0}


def test_empty_trace_is_missing() -> None:
    result = CudaMemoryProbe().summarize(Trace("cuda_memory"), Window(0.0, 0.1, inferences=1))
    assert result.missing == {"cuda_allocated_peak_mb": "no CUDA memory reading in the window"}


@pytest.mark.gpu
def test_real_peak_covers_a_tensor_freed_between_samples() -> None:
    torch = pytest.importorskip("torch")
    probe = CudaMemoryProbe(interval_s=10.0)  # no sample lands inside the window: only the peak can
    ok, why = probe.available()
    if not ok:
        pytest.skip(f"no NVIDIA GPU / CUDA on this machine ({why})")
    size = 256 * 1024 * 1024
    probe.start()
    tensor = torch.empty(size, dtype=torch.uint8, device="cuda")
    del tensor
    trace = probe.stop()
    result = probe.summarize(trace, Window(trace.timestamps[0], trace.timestamps[-1], inferences=1))
    assert result.metrics["cuda_allocated_peak_mb"] >= size / 1e6
