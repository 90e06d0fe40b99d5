"""Peak GPU memory allocated by PyTorch's caching allocator over the window.

Unlike NVML's whole-device figure (``gpu_memory_used_peak_mb``), this counts only tensors of this
process, and it catches a peak between two samples: the allocator keeps its own high-water mark,
reset at ``start()`` and read at ``stop()``.
"""

from __future__ import annotations

from typing import ClassVar

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


class CudaMemorySettings(ProbeSettings):
    interval_s: float = interval_setting(0.01)
    device: int | None = Field(
        default=None, ge=0,
        description="torch CUDA device index (among the visible devices); none: the current one.")


@register_probe
class CudaMemoryProbe(Probe):
    """Samples ``torch.cuda.memory_allocated``; ``device`` is a torch index (current device if None)."""

    name = "cuda_memory"
    provides = ("cuda_allocated_peak_mb",)
    units: ClassVar[dict[str, str]] = {"allocated_mb": "MB", "allocated_peak_mb": "MB"}
    settings_model = CudaMemorySettings

    def __init__(self, device: int | None = None, interval_s: float = 0.01) -> None:
        super().__init__(interval_s)
        self.device = device

    def available(self) -> tuple[bool, str]:
        try:
            import torch
        except ImportError:
            return False, "torch is not installed"
        if not torch.cuda.is_available():
            return False, "torch reports no CUDA device"
        count = torch.cuda.device_count()
        if self.device is not None and not 0 <= self.device < count:
            return False, f"CUDA device {self.device} out of range: torch sees {count} device(s)"
        return True, ""

    def start(self) -> None:
        import torch

        if self.device is None:
            self.device = torch.cuda.current_device()
        torch.cuda.reset_peak_memory_stats(self.device)
        super().start()

    def read(self) -> dict[str, float]:
        import torch

        # The high-water mark travels in the trace, so summarize() needs nothing but the trace;
        # its value in the last reading (taken by stop()) is the peak of the whole window.
        return {
            "allocated_mb": torch.cuda.memory_allocated(self.device) / 1e6,
            "allocated_peak_mb": torch.cuda.max_memory_allocated(self.device) / 1e6,
        }

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        peaks = trace.channels.get("allocated_peak_mb", [])
        if not peaks:
            return ProbeResult(missing={"cuda_allocated_peak_mb": "no CUDA memory reading in the window"})
        return ProbeResult(metrics={"cuda_allocated_peak_mb": peaks[-1]})
