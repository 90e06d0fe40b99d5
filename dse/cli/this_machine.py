"""This machine as an embedded `dse run` measures it: its CPU, memory and NVIDIA GPUs, and the
hardware profiles of a folder that fit it. `dse devices` lists it when no farm is given."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dse.util import l4t_release, read_text

if TYPE_CHECKING:
    from dse.spec import HardwareProfile

#: Architecture families as a profile's name may spell them (``aarch64-server``).
_ARCH_NAMES = {"x86": frozenset({"x86", "x86_64", "amd64", "x64"}),
               "arm": frozenset({"aarch64", "arm64", "arm"})}


@dataclass(frozen=True)
class Gpu:
    """One NVIDIA GPU as NVML reports it."""

    index: int
    name: str
    memory_gib: float
    compute_capability: float


@dataclass(frozen=True)
class ThisMachine:
    """What an embedded run has to measure with on this machine.

    Attributes:
        cpu: The CPU's model name (``/proc/cpuinfo``), else the platform's processor name.
        arch: The machine architecture (``x86_64``, ``aarch64``).
        cpus: Logical CPUs this process may use (what the embedded Ray offers its workers).
        memory_gib: Physical memory; None where the system does not say.
        gpus: NVIDIA GPUs found through NVML.
        gpu_note: Why no GPU is listed (NVML absent or finding no driver); empty when some are.
        l4t: The Jetson's L4T release; None off a Jetson.
    """

    cpu: str
    arch: str
    cpus: int
    memory_gib: float | None
    gpus: list[Gpu]
    gpu_note: str
    l4t: str | None


def this_machine() -> ThisMachine:
    """Read this machine's facts (a few files and, when installed, NVML; nothing is started)."""
    gpus, note = _nvml_gpus()
    return ThisMachine(cpu=_cpu_model(), arch=platform.machine() or "unknown",
                       cpus=len(os.sched_getaffinity(0)), memory_gib=_memory_gib(), gpus=gpus,
                       gpu_note=note, l4t=l4t_release())


def _cpu_model() -> str:
    for line in (read_text(Path("/proc/cpuinfo")) or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            return value.strip()
    return platform.processor() or "unknown CPU"


def _memory_gib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        return None


def _nvml_gpus() -> tuple[list[Gpu], str]:
    try:
        import pynvml
    except ImportError:
        return [], "NVML's Python binding (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return [], f"NVML found no NVIDIA driver ({exc})"
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            gpus.append(Gpu(index, name.decode() if isinstance(name, bytes) else str(name),
                            pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30,
                            float(f"{major}.{minor}")))
    except pynvml.NVMLError as exc:
        return [], f"NVML could not list the GPUs ({exc})"
    finally:
        pynvml.nvmlShutdown()
    return gpus, "" if gpus else "NVML lists no GPU"


@dataclass(frozen=True)
class FittingProfile:
    """A profile of the folder that can measure on this machine, and on what."""

    name: str
    kind: str
    on: str


def fitting_profiles(folder: Path, machine: ThisMachine) -> tuple[list[FittingProfile], list[str]]:
    """The profiles in ``folder`` (not its subfolders: replay profiles need no hardware) that fit
    this machine: a cpu profile unless its name says another architecture (``aarch64-server``
    on x86_64), a cuda profile for the GPUs of its compute capability (any GPU without one), a
    jetson profile on a Jetson. Also the files that are no valid profile, one line each."""
    from dse.core import SpecError
    from dse.spec import HardwareProfile, load_model

    fitting: list[FittingProfile] = []
    problems: list[str] = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            profile = load_model(path, HardwareProfile)
        except SpecError as exc:
            problems.extend(exc.problems)
            continue
        on = _fits(profile, machine)
        if on is not None:
            fitting.append(FittingProfile(profile.name, profile.kind, on))
    return fitting, problems


def _fits(profile: HardwareProfile, machine: ThisMachine) -> str | None:
    """What of this machine ``profile`` measures, or None when it does not fit."""
    if profile.kind == "cpu":
        return None if _named_for_other_arch(profile.name, machine.arch) else "this CPU"
    if profile.kind == "cuda":
        wanted = profile.compute_capability
        matching = [g for g in machine.gpus if wanted is None or g.compute_capability == wanted]
        return (", ".join(f"GPU {g.index} {g.name}" for g in matching)) or None
    if profile.kind == "jetson":
        return f"this Jetson (L4T {machine.l4t})" if machine.l4t else None
    return None


def _named_for_other_arch(name: str, arch: str) -> bool:
    words = set(name.lower().replace("_", "-").split("-"))
    own = next((family for family, names in _ARCH_NAMES.items() if arch.lower() in names), None)
    return any(words & names for family, names in _ARCH_NAMES.items() if family != own)


def describe_this_machine(machine: ThisMachine, folder: Path) -> list[str]:
    """The lines `dse devices` prints without a farm."""
    memory = "" if machine.memory_gib is None else f", {machine.memory_gib:.1f} GiB memory"
    lines = [f"CPU:  {machine.cpu} ({machine.arch}), {machine.cpus} logical CPUs{memory}"]
    if machine.gpus:
        lines += [f"GPU {g.index}: {g.name}, {g.memory_gib:.0f} GiB, compute capability "
                  f"{g.compute_capability}" for g in machine.gpus]
    else:
        lines.append(f"GPUs: none found ({machine.gpu_note})")
    if machine.l4t:
        lines.append(f"Jetson: L4T {machine.l4t}")
    if not folder.is_dir():
        lines.append(f"profiles: no folder {folder} here to look in (--profiles DIR names one)")
        return lines
    fitting, problems = fitting_profiles(folder, machine)
    lines.append(f"profiles in {folder}/ that fit this machine:{'' if fitting else ' none'}")
    lines += [f"  {p.name} ({p.kind}: {p.on})" for p in sorted(fitting, key=lambda p: p.name)]
    lines += [f"not a valid profile: {problem}" for problem in problems]
    return lines
