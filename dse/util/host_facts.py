"""Facts about the host that several layers record: the L4T release of a Jetson and the NVIDIA
driver (read only from libraries already loaded, or NVML). The measurement's provenance and the
build's device fingerprint both read them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def read_text(path: Path) -> str | None:
    """The stripped content of a sysfs file, or None when it is absent or unreadable."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


_RELEASE = re.compile(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)")


def l4t_release(root: Path = Path("/")) -> str | None:
    """The L4T release from ``/etc/nv_tegra_release``, e.g. ``"R35.4.1"``; None off a Jetson.

    The first line reads ``# R35 (release), REVISION: 4.1, GCID: ..., BOARD: ...`` on every L4T
    from r32 (JetPack 4) to r36 (JetPack 6).
    """
    text = read_text(root / "etc/nv_tegra_release")
    match = _RELEASE.search(text or "")
    return f"R{match[1]}.{match[2]}" if match else None



def cuda_provenance() -> dict[str, str]:
    """GPU name, driver, CUDA and cuDNN versions — only from libraries already in the process."""
    out: dict[str, str] = {}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        out["cuda_runtime"] = str(torch.version.cuda)
        out["cudnn"] = str(torch.backends.cudnn.version())
        out["gpu_name"] = torch.cuda.get_device_name()
    try:
        import pynvml
    except ImportError:
        return out
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return out
    try:
        out["nvidia_driver"] = str(pynvml.nvmlSystemGetDriverVersion())
        out["nvml_cuda_driver"] = str(pynvml.nvmlSystemGetCudaDriverVersion_v2())
    except pynvml.NVMLError:
        pass
    finally:
        pynvml.nvmlShutdown()
    return out
