"""Which devices this machine has, for tests that need one (decided without a CUDA call)."""

from __future__ import annotations

from pathlib import Path

NO_CUDA = "no NVIDIA GPU / CUDA on this machine (torch reports no CUDA device)"
NO_JETSON = "no NVIDIA Jetson board on this machine (no /etc/nv_tegra_release)"


def has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def has_jetson() -> bool:
    return Path("/etc/nv_tegra_release").exists() and has_cuda()
