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


def missing_runtime(backend: str) -> str | None:
    """Why ``backend`` cannot run on this (CUDA) machine's software, or None when it can."""
    import importlib.util

    if backend == "tensorrt" and importlib.util.find_spec("tensorrt") is None:
        return "tensorrt cannot be imported (install TensorRT's Python bindings)"
    if backend.startswith("onnxruntime_"):
        import onnxruntime

        provider = ("CUDAExecutionProvider" if backend == "onnxruntime_cuda"
                    else "TensorrtExecutionProvider")
        if provider not in onnxruntime.get_available_providers():
            return (f"onnxruntime {onnxruntime.__version__} has no {provider} "
                    f"(install onnxruntime-gpu)")
    return None
