"""NVIDIA Nsight Systems (``nsys``) and Nsight Compute (``ncu``) over one candidate's calls.

Both tools launch the program they profile, so the calls run in a child process
(:mod:`dse.profiling.nsight_child`) that compiles the candidate, warms it up and then makes its
timed calls inside NVTX ranges: ``dse:window`` around all of them, ``dse:run`` around each.
``nsys`` captures only the window (``--capture-range=nvtx``), so compiling and warm-up stay out
of its kernel table; ``ncu`` profiles only kernels launched inside a run (``--nvtx-include``),
at most :data:`NCU_LAUNCH_COUNT` of them, since it replays every kernel many times.

A tool that is absent (or a machine without an NVIDIA GPU) is named in the
:class:`~dse.profiling.summary.NsightSection`; one that fails or times out leaves its reason
there in one line. Nothing raises. Reading the tools' CSV output is
:mod:`dse.profiling.nsight_output`'s job.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pickle
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.profiling.nsight_output import merge_kernels, parse_ncu_csv, parse_nsys_kernel_sum_csv
from dse.profiling.summary import NsightSection

if TYPE_CHECKING:
    import numpy as np

    from dse.artifacts import Artifact
    from dse.spec import HardwareProfile

NVTX_WINDOW = "dse:window"
NVTX_RUN = "dse:run"
NCU_LAUNCH_COUNT = 50
NSYS_BASE = "nsys"
"""``out_dir/nsys.nsys-rep``, ``nsys.log``, ``nsys_<report>.csv``."""
NCU_BASE = "ncu"
"""``out_dir/ncu.ncu-rep``, ``ncu.log``, ``ncu-details.csv``."""
# The kernel summary report was renamed in Nsight Systems 2022.4; older versions know the first.
NSYS_KERNEL_REPORTS = ("cuda_gpu_kern_sum", "gpukernsum")
_NVTX_HINT = (" (the workload marks its calls with NVTX through torch.cuda.nvtx: without torch "
              "with CUDA where it runs, there is no range to capture)")
_GPU_DEVICES = (Path("/dev/nvidia0"), Path("/dev/nvgpu"))  # a discrete GPU; a Jetson's iGPU


# ---------------------------------------------------------------- what is here


def gpu_missing() -> str | None:
    """Why there is no NVIDIA GPU here, or None: a device node or ``nvidia-smi`` says there is."""
    if any(path.exists() for path in _GPU_DEVICES) or shutil.which("nvidia-smi"):
        return None
    return "no NVIDIA GPU here (no /dev/nvidia0 or /dev/nvgpu, no nvidia-smi on PATH)"


def nsys_missing() -> str | None:
    """Why Nsight Systems cannot run here, or None."""
    return _tool_missing("nsys", "Nsight Systems")


def ncu_missing() -> str | None:
    """Why Nsight Compute cannot run here, or None."""
    return _tool_missing("ncu", "Nsight Compute")


def _tool_missing(tool: str, product: str) -> str | None:
    reasons = [f"{tool} ({product}) is not on PATH"] if shutil.which(tool) is None else []
    gpu = gpu_missing()
    return "; ".join([*reasons, *([gpu] if gpu else [])]) or None


# ---------------------------------------------------------------- command lines


def child_command(request: Path) -> list[str]:
    """The workload process both tools launch: this Python running the child on ``request``."""
    return [sys.executable, "-m", "dse.profiling.nsight_child", str(request)]


def nsys_profile_command(child_argv: list[str], out_dir: Path) -> list[str]:
    """``nsys profile`` of the window only: CUDA, NVTX and OS runtime traced, no CPU sampling
    (``perf`` does that), the report kept as ``out_dir/nsys.nsys-rep``; ``stop`` (not the
    default ``stop-shutdown``) lets the child close its runner and exit by itself."""
    return ["nsys", "profile", "--trace=cuda,nvtx,osrt", "--sample=none", "--cpuctxsw=none",
            "--capture-range=nvtx", f"--nvtx-capture={NVTX_WINDOW}", "--capture-range-end=stop",
            "--force-overwrite=true", f"--output={out_dir / NSYS_BASE}", *child_argv]


def nsys_stats_command(report: Path, out_dir: Path, name: str) -> list[str]:
    """``nsys stats`` writing the kernel summary ``name`` as ``out_dir/nsys_<name>.csv``."""
    return ["nsys", "stats", f"--report={name}", "--format=csv", "--force-export=true",
            f"--output={out_dir / NSYS_BASE}", str(report)]


def ncu_profile_command(child_argv: list[str], out_dir: Path,
                        launch_count: int = NCU_LAUNCH_COUNT) -> list[str]:
    """``ncu`` on the kernels launched inside a ``dse:run`` range (``/``: a push/pop range),
    the first ``launch_count`` of them, the report kept as ``out_dir/ncu.ncu-rep``."""
    return ["ncu", "--target-processes", "all", "--nvtx", "--nvtx-include", f"{NVTX_RUN}/",
            "--launch-count", str(launch_count), "--force-overwrite",
            "--export", str(out_dir / NCU_BASE), *child_argv]


def ncu_import_command(report: Path) -> list[str]:
    """The details page of an ncu report as CSV, kernels named as ``nsys`` names them."""
    return ["ncu", "--import", str(report), "--csv", "--page", "details",
            "--print-kernel-base", "demangled"]


# ---------------------------------------------------------------- running the tools


def run_nsight(child_argv: list[str], out_dir: Path,
               timeout_s: float) -> tuple[NsightSection, list[Path]]:
    """Run the workload ``child_argv`` (see :func:`child_command`) under ``nsys`` and then
    under ``ncu``, each run limited to ``timeout_s`` seconds; the kernels and the raw files
    written into ``out_dir`` (reports, CSVs, the tools' logs). Never raises: an absent,
    failing or timed-out tool is named with its reason in the section."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    nsys_rows, nsys_why = _nsys(child_argv, out_dir, timeout_s, files)
    ncu_rows, ncu_why = _ncu(child_argv, out_dir, timeout_s, files)
    return NsightSection(nsys_missing=nsys_why, ncu_missing=ncu_why,
                         kernels=merge_kernels(nsys_rows, ncu_rows)), files


def _nsys(child_argv: list[str], out_dir: Path, timeout_s: float,
          files: list[Path]) -> tuple[list[dict[str, Any]], str]:
    missing = nsys_missing()
    if missing:
        return [], missing
    log = out_dir / f"{NSYS_BASE}.log"
    reports = [out_dir / f"{NSYS_BASE}{suffix}" for suffix in (".nsys-rep", ".qdrep")]
    for stale in reports:
        stale.unlink(missing_ok=True)
    # nsys matches an NVTX capture range against registered strings only unless told
    # otherwise; torch's range_push passes plain ones.
    env = {**os.environ, "NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
    code = _run_tool(nsys_profile_command(child_argv, out_dir), timeout_s, log, env=env)
    files.append(log)
    # Nsight Systems before 2021.4 names its report .qdrep.
    report = next((path for path in reports if path.is_file()), reports[0])
    why = _failure("nsys profile", code, report, log, timeout_s)
    if why:
        return [], why + (_NVTX_HINT if code == 0 else "")
    files.append(report)
    return _nsys_stats(report, out_dir, timeout_s, files)


def _nsys_stats(report: Path, out_dir: Path, timeout_s: float,
                files: list[Path]) -> tuple[list[dict[str, Any]], str]:
    log, reasons = out_dir / f"{NSYS_BASE}-stats.log", []
    for name in NSYS_KERNEL_REPORTS:
        table = out_dir / f"{NSYS_BASE}_{name}.csv"
        table.unlink(missing_ok=True)
        code = _run_tool(nsys_stats_command(report, out_dir, name), timeout_s, log)
        why = _failure(f"nsys stats --report={name}", code, table, log, timeout_s)
        if not why:
            files.extend(p for p in (table, out_dir / f"{NSYS_BASE}.sqlite") if p.is_file())
            rows = parse_nsys_kernel_sum_csv(table.read_text(errors="replace"))
            return rows, "" if rows else f"nsys recorded no CUDA kernel in the {NVTX_WINDOW} range"
        reasons.append(why)
    files.append(log)
    return [], " / ".join(reasons)


def _ncu(child_argv: list[str], out_dir: Path, timeout_s: float,
         files: list[Path]) -> tuple[list[dict[str, Any]], str]:
    missing = ncu_missing()
    if missing:
        return [], missing
    report, log = out_dir / f"{NCU_BASE}.ncu-rep", out_dir / f"{NCU_BASE}.log"
    report.unlink(missing_ok=True)
    code = _run_tool(ncu_profile_command(child_argv, out_dir), timeout_s, log)
    files.append(log)
    why = _failure("ncu", code, report, log, timeout_s)
    if why:
        return [], why + (_NVTX_HINT if code == 0 else "")
    files.append(report)
    table = out_dir / f"{NCU_BASE}-details.csv"
    code = _run_tool(ncu_import_command(report), timeout_s, table, stderr=log)
    rows = parse_ncu_csv(table.read_text(errors="replace")) if table.is_file() else []
    files.extend(p for p in (table,) if p.is_file())
    if code != 0 or not rows:
        return [], _failure("ncu --import", code, None, log, timeout_s) or (
            f"ncu profiled no kernel inside a {NVTX_RUN} range{_NVTX_HINT}")
    return rows, ""


def _failure(what: str, code: int | None, product: Path | None, log: Path,
             timeout_s: float) -> str:
    """Why a tool's run gave nothing usable, in one line; "" when it did."""
    if code is None:
        return f"{what} timed out after {timeout_s:g} s (killed)"
    if code == 0 and (product is None or product.is_file()):
        return ""
    wrote = "" if product is None or product.is_file() else f" and wrote no {product.name}"
    return f"{what} exited {code}{wrote}: {_reason(log)}"


def _reason(log: Path) -> str:
    """The line of a tool's output that says what went wrong: its first error, else its first
    warning, else its last line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    except OSError:
        return "no output"
    lines = [line for line in lines if line]
    for marks in (("ERROR", "Error", "error:"), ("WARNING", "Warning")):
        found = next((line for line in lines if any(m in line for m in marks)), None)
        if found:
            return found[:300]
    return lines[-1][:300] if lines else "no output"


def _run_tool(argv: list[str], timeout_s: float, stdout: Path, *, stderr: Path | None = None,
              env: dict[str, str] | None = None) -> int | None:
    """Run ``argv`` in a session of its own, its output into ``stdout`` (and ``stderr``, else
    the same file); its exit code, or None when it ran past ``timeout_s`` and was killed with
    everything it started (the workload too)."""
    with ExitStack() as files:
        out = files.enter_context(stdout.open("wb"))
        err = out if stderr is None else files.enter_context(stderr.open("ab"))
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    env=env, start_new_session=True)
        except OSError as exc:
            err.write(f"ERROR: could not start {argv[0]}: {exc}\n".encode())
            return 127
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None


# ---------------------------------------------------------------- NVTX ranges


@contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """An NVTX push/pop range named ``name`` around the block, through torch's NVTX binding
    where torch with CUDA is present; a no-op elsewhere (and on a machine with no NVIDIA GPU,
    without importing torch)."""
    marks = _nvtx_marks()
    if marks is None:
        yield
        return
    push, pop = marks
    push(name)
    try:
        yield
    finally:
        pop()


def nvtx_available() -> bool:
    """Whether :func:`nvtx_range` marks anything here; the first call does the imports, so a
    caller makes it before its timed calls."""
    return _nvtx_marks() is not None


@functools.cache
def _nvtx_marks() -> tuple[Callable[[str], object], Callable[[], object]] | None:
    if gpu_missing() is not None or importlib.util.find_spec("torch") is None:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


# ---------------------------------------------------------------- the child's request


@dataclass(frozen=True)
class ChildRequest:
    """What the workload child runs: the candidate's artifact compiled by ``backend`` with
    ``knobs`` for ``profile``, at the batch size of ``batch``, ``warmup`` calls, then ``runs``
    calls inside the NVTX window."""

    backend: str
    artifact: Artifact
    knobs: dict[str, Any]
    profile: HardwareProfile
    batch: np.ndarray
    runs: int
    warmup: int


def write_child_request(path: Path, *, backend: str, artifact: Artifact, knobs: dict[str, Any],
                        profile: HardwareProfile, batch: np.ndarray, runs: int,
                        warmup: int) -> Path:
    """Pickle the child's request to ``path`` (a plain dict: it outlives no dse version)."""
    request = {"backend": backend, "artifact": artifact, "knobs": dict(knobs),
               "profile": profile, "batch": batch, "runs": runs, "warmup": warmup}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
    return path


def read_child_request(path: Path) -> ChildRequest:
    """The request :func:`write_child_request` wrote; ValueError naming what is wrong."""
    raw = pickle.loads(path.read_bytes())
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: not a dse Nsight request (a {type(raw).__name__})")
    missing = sorted(set(ChildRequest.__dataclass_fields__) - set(raw))
    if missing:
        raise ValueError(f"{path}: the Nsight request lacks {missing}")
    for key in ("runs", "warmup"):
        if not isinstance(raw[key], int) or raw[key] < 0:
            raise ValueError(f"{path}: {key} must be an integer >= 0, got {raw[key]!r}")
    return ChildRequest(**{key: raw[key] for key in ChildRequest.__dataclass_fields__})
