"""Where and with what a measurement was taken: host, CPU, kernel, accelerators, libraries, clocks.

Every value is read, never assumed; what cannot be read is left out rather than guessed. Heavy
libraries are not imported for this: versions come from package metadata, and CUDA details only
from a torch that is already loaded (the runner loaded it) or from NVML when its bindings exist.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
from pathlib import Path

from dse.core import __version__
from dse.util import cuda_provenance as cuda_provenance

# Distributions whose versions matter for any timing, looked up without importing them; each
# backend adds its own (its declaration's ``libraries``).
_LIBRARIES = ("numpy", "nvidia-ml-py", "ray", "optuna")


def cpu_model(root: Path = Path("/")) -> str | None:
    try:
        text = (root / "proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        # x86 says "model name"; many Arm kernels only give "Hardware" or "CPU part".
        if key.strip() in ("model name", "Hardware") and value.strip():
            return value.strip()
    return None


def cpu_clocks_mhz(root: Path = Path("/")) -> str | None:
    """Current frequency of each CPU from cpufreq, e.g. ``"cpu0=2400,cpu1=2400"``."""
    readings = []
    for path in sorted((root / "sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq")):
        try:
            readings.append(f"{path.parent.parent.name}={int(path.read_text()) // 1000}")
        except (OSError, ValueError):
            continue
    return ",".join(readings) or None


def library_versions() -> dict[str, str]:
    from dse.plugins import BACKEND_DECLARATIONS

    versions = {}
    declared = [lib for backend in BACKEND_DECLARATIONS.values() for lib in backend.libraries]
    for name in dict.fromkeys([*declared, *_LIBRARIES]):
        try:
            versions[f"version_{name}"] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def jetson_provenance(root: Path = Path("/")) -> dict[str, str]:
    from dse.measure.telemetry.jetson import l4t_release, power_mode

    out = {}
    release = l4t_release(root)
    if release is not None:
        out["l4t_release"] = release
        mode = power_mode(root)
        if mode is not None:
            out["power_mode"] = mode
    return out


def host_provenance(root: Path = Path("/")) -> dict[str, str]:
    """Everything about the host a measurement's reader needs to judge or reproduce it."""
    out = {
        "host": socket.gethostname(),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": str(os.cpu_count()),
        "dse_version": __version__,
    }
    model = cpu_model(root)
    if model is not None:
        out["cpu_model"] = model
    clocks = cpu_clocks_mhz(root)
    if clocks is not None:
        out["cpu_clocks_mhz_at_start"] = clocks
    out.update(library_versions())
    out.update(cuda_provenance())
    out.update(jetson_provenance(root))
    return out
