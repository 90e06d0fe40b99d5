"""The device fingerprint that keys device-side artifacts (TensorRT engines, ONNX Runtime TensorRT
caches, compiled state).

An engine built for one GPU, driver or TensorRT release is invalid on another, so a device
artifact's cache key names the host artifact, the backend settings and this fingerprint: GPU name
and compute capability, driver, CUDA runtime, TensorRT, ONNX Runtime and JetPack (L4T) versions.
Every value is read from the device; what cannot be read is recorded as ``"absent"``, so two
devices that differ in what can be read never share a key.
"""

from __future__ import annotations

import getpass
import importlib.metadata
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from dse.core import stable_hash
from dse.util import cuda_provenance, l4t_release

ABSENT = "absent"
# Where device-side artifacts live: the device worker sets it to a folder of its cache that outlives
# the process; every backend that builds device artifacts uses a subfolder of it.
DEVICE_CACHE_ENV = "DSE_DEVICE_CACHE"
# Distributions that ship TensorRT's Python bindings, newest naming first (the "tensorrt" meta
# package pulls one of the CUDA-specific ones; JetPack installs "tensorrt" itself).
TENSORRT_DISTRIBUTIONS = ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu11")


def installed_version(distributions: tuple[str, ...]) -> str:
    """``name==version`` of the first of ``distributions`` installed, else ``"absent"``."""
    for name in distributions:
        try:
            return f"{name}=={importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return ABSENT


def _l4t_release(root: Path) -> str:
    return l4t_release(root) or ABSENT


def _gpu(device_index: int) -> dict[str, str]:
    """Name, compute capability and CUDA runtime from torch, which every GPU device worker has."""
    try:
        import torch
    except ImportError:
        return {"gpu_name": ABSENT, "compute_capability": ABSENT, "cuda_runtime": ABSENT}
    if not torch.cuda.is_available():
        return {"gpu_name": ABSENT, "compute_capability": ABSENT, "cuda_runtime": ABSENT}
    major, minor = torch.cuda.get_device_capability(device_index)
    return {"gpu_name": torch.cuda.get_device_name(device_index),
            "compute_capability": f"{major}.{minor}",
            "cuda_runtime": str(torch.version.cuda)}


def _driver() -> str:
    return cuda_provenance().get("nvidia_driver", ABSENT)


def device_fingerprint(device_index: int = 0, root: Path = Path("/")) -> dict[str, str]:
    """What a device artifact built on this device depends on (``device_index``: the CUDA device
    as the process sees it, after ``CUDA_VISIBLE_DEVICES``)."""
    from dse.plugins import BACKEND_DECLARATIONS

    # Each backend names the libraries a device artifact of it depends on (TensorRT, ONNX
    # Runtime's build); every entry is recorded for every backend, so the key set is the same
    # whichever backend builds.
    libraries = {key: distributions for backend in BACKEND_DECLARATIONS.values()
                 for key, distributions in backend.fingerprint.items()}
    return {
        **_gpu(device_index),
        "driver": _driver(),
        **{key: installed_version(libraries[key]) for key in sorted(libraries)},
        "l4t": _l4t_release(root),
    }


def fingerprint_id(fingerprint: dict[str, str]) -> str:
    """A short stable id of a fingerprint, for file names and provenance."""
    return stable_hash(fingerprint)[:16]


def device_cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """``$DSE_DEVICE_CACHE``, or a per-user folder in the temp dir when it is unset."""
    base = (os.environ if environ is None else environ).get(DEVICE_CACHE_ENV, "")
    return Path(base).expanduser() if base else Path(tempfile.gettempdir()) / (
        f"dse-device-cache-{_user()}")


def _user() -> str:
    try:
        return getpass.getuser()
    # No login name (a container user with no passwd entry): the uid still separates users.
    except (KeyError, OSError):
        return str(os.getuid())
