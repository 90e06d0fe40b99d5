"""One profile of a compiled candidate, on its device worker, under the node lock.

In order, on the runner the candidate was measured with (rebuilt from the caches):

1. plain calls (the runner's timed call, ``Runner.bound_call``, as a trial times it): the p50
   every operator time is compared with, in the same process — one after each profiled call
   where the backend's profiler runs in a sibling of the runner (so both share every moment of
   the machine), else half before the profilers and half after;
2. the same calls again with Linux ``perf`` attached to this process (counters and sampled call
   stacks), when perf can run here;
3. the backend's own per-operator profiler (``Backend.profile_ops``), or why there is none;
4. on an NVIDIA device, Nsight Systems and Nsight Compute over a child process running the same
   candidate, when installed;
5. the roofline ceilings (:mod:`dse.profiling.ceilings`).

Nothing here touches a campaign's study: a profile is a separate window, recorded as such. A
profiler that fails leaves one line in the result and the others still run.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.backends import OpProfile, ProfileRequest, ProfilerMissing, first_error_line, get_backend, timed_runs
from dse.profiling.ceilings import measure_ceilings, profile_peaks
from dse.profiling.summary import Ceilings, NsightSection, PerfSection

if TYPE_CHECKING:
    from dse.backends import GenerationRunner, Runner
    from dse.core import Candidate
    from dse.spec import HardwareProfile

# Files a profile may send back to the driver from a device, at most (perf.data of a long window
# on many threads can grow large; the rest are a few MB).
MAX_FILE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class ProfileSettings:
    """How long the windows are.

    Attributes:
        window_s: each window's target length; the call count is fitted to it. Long enough
            that a brief stall of the machine moves no median.
        min_runs / max_runs: bounds on that count (the plain and perf windows use it).
        max_profiled_runs: at most this many calls under the backend's profiler: its events
            are kept and parsed one by one (torch builds a Python object per operator call).
        perf: attach Linux perf to the perf window.
        nsight: run Nsight Systems / Compute on NVIDIA devices where installed.
        nsight_timeout_s: how long each Nsight tool may take.
        phase: a language model's phase to profile, ``prefill`` (one call: a request's prefill)
            or ``decode`` (one call: a decode step); empty for a fixed-shape model, whose call is
            its forward pass (:mod:`dse.profiling.generation_session`).
    """

    window_s: float = 0.5
    min_runs: int = 20
    max_runs: int = 5000
    max_profiled_runs: int = 1000
    perf: bool = True
    nsight: bool = True
    nsight_timeout_s: float = 300.0
    phase: str = ""


@dataclass
class DeviceProfile:
    """What a device sends back: the profilers' results and their files' bytes."""

    runs: int
    unprofiled_us: list[float]
    perf_window_us: list[float]
    op_profile: OpProfile | None
    profiler_missing: str
    perf: PerfSection
    nsight: NsightSection
    ceilings: Ceilings
    threads: int
    files: dict[str, bytes] = field(default_factory=dict)
    """File name -> contents, everything the profilers wrote (the driver writes them out)."""
    notes: list[str] = field(default_factory=list)
    window: dict[str, float] = field(default_factory=dict)
    phase: str = ""
    """A language model's phase the calls are (``prefill``, ``decode``); empty for a
    fixed-shape model."""


def profile_runner(runner: Runner, artifact: Any, example: Any, candidate: Candidate,
                   profile: HardwareProfile, settings: ProfileSettings) -> DeviceProfile:
    """Profile a warm ``runner`` of ``candidate`` (see the module's docstring)."""
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="dse-profile-") as scratch:
        out = Path(scratch)
        # The calls a trial times: the example bound to the runtime once (Runner.bound_call).
        plain = runner.bound_call(example)
        runs = _run_count(plain, settings)
        # The plain window in two halves, before and after the profilers: a slow spell of the
        # machine during one window then shows as a difference, not as the profiler's cost.
        unprofiled = _timed(plain, (runs + 1) // 2)
        perf, perf_us = _perf_window(plain, runs, out, settings)
        interleaved: list[float] = []
        ops, missing = _backend_profile(runner, artifact, example, candidate, profile,
                                        min(runs, settings.max_profiled_runs), out,
                                        _timed_call(plain, interleaved))
        unprofiled += _timed(plain, (runs + 1) // 2)
        notes = []
        if ops is not None and len(interleaved) >= ops.runs:
            unprofiled = interleaved
            notes.append("the unprofiled p50 is of plain calls interleaved with the profiled "
                         "ones, one after each")
        nsight = _nsight(artifact, example, candidate, profile, runs, out, settings)
        threads = runner_threads(runner)
        ceilings = device_ceilings(profile, candidate.precision, threads)
        files, dropped = collect_files(out)
        notes += dropped
        if ops is not None:
            ops.files = [Path(p.name) for p in ops.files]
            ops.trace = None if ops.trace is None else Path(ops.trace.name)
    return DeviceProfile(runs, unprofiled, perf_us, ops, missing, perf, nsight, ceilings, threads,
                         files, notes, {"start": start, "end": time.time()})


def _timed(call: Callable[[], object], runs: int) -> list[float]:
    """The wall time of each of ``runs`` calls of ``call``, microseconds."""
    return timed_runs(lambda _: call(), None, runs)


def _run_count(call: Callable[[], object], settings: ProfileSettings) -> int:
    """Calls per window: enough to fill ``window_s`` at the runner's speed, within the bounds."""
    for _ in range(3):  # warm: caches, lazily built kernels, the thread pool
        call()
    per_call_s = sorted(_timed(call, 3))[1] / 1e6
    fitted = int(settings.window_s / max(per_call_s, 1e-7))
    return max(settings.min_runs, min(settings.max_runs, fitted))


def _perf_window(call: Callable[[], object], runs: int, out: Path,
                 settings: ProfileSettings) -> tuple[PerfSection, list[float]]:
    from dse.profiling.perf import PerfWindow

    if not settings.perf:
        off = "perf was switched off for this profile"
        return PerfSection(stat_missing=off, record_missing=off), []
    with PerfWindow(os.getpid(), out) as window:
        timings = _timed(call, runs)
    return window.section(), timings


def _timed_call(plain: Callable[[], object], into: list[float]) -> Callable[[], None]:
    """One plain call, its wall time appended to ``into`` (microseconds)."""
    def call() -> None:
        into.extend(_timed(plain, 1))
    return call


def _backend_profile(runner: Runner, artifact: Any, example: Any, candidate: Candidate,
                     profile: HardwareProfile, runs: int, out: Path,
                     between: Callable[[], None]) -> tuple[OpProfile | None, str]:
    backend = get_backend(candidate.backend)
    request = ProfileRequest(runner, artifact, candidate.knobs, profile, example, runs, out,
                             between)
    try:
        found = backend.profile_ops(request)
        _join_graph(found, artifact, len(example))
        return found, ""
    except ProfilerMissing as exc:
        return None, str(exc)
    # A profiler is a third party's tool on a live runtime; whatever it raises is its failure,
    # said in one line, never the end of the profile.
    except Exception as exc:
        return None, f"{backend.declaration.profiler or candidate.backend} failed: " \
                     f"{type(exc).__name__}: {first_error_line(exc)}"


def _join_graph(found: OpProfile, artifact: Any, batch_size: int) -> None:
    """FLOPs and bytes of the candidate's ONNX graph for operators the profiler left without
    them and that carry an ONNX node's name (OpenVINO keeps many); the rest stay unknown."""
    path = getattr(artifact, "path", None)
    if getattr(artifact, "format", None) != "onnx" or path is None \
            or all(op.flops is not None and op.bytes is not None for op in found.ops):
        return
    from dse.models import node_costs

    try:
        costs = node_costs(path, batch_size)
    except (ValueError, OSError):  # a graph shape inference cannot size: nothing to join
        return
    joined = 0
    for op in found.ops:
        known = costs.get(op.name)
        if known is None:
            continue
        if op.flops is None and known.flops is not None:
            op.flops, joined = float(known.flops), joined + 1
        if op.bytes is None and known.bytes is not None:
            op.bytes = float(known.bytes)
    if joined:
        found.notes.append(f"{joined} operator(s) named like a node of the candidate's ONNX "
                           f"graph take that node's FLOPs and bytes")


def _nsight(artifact: Any, example: Any, candidate: Candidate, profile: HardwareProfile,
            runs: int, out: Path, settings: ProfileSettings) -> NsightSection:
    from dse.profiling.nsight import (
        child_command,
        ncu_missing,
        nsys_missing,
        run_nsight,
        write_child_request,
    )

    if profile.kind not in ("cuda", "jetson"):
        reason = f"device {profile.name!r} is a {profile.kind} device, not an NVIDIA GPU"
        return NsightSection(nsys_missing=reason, ncu_missing=reason)
    if not settings.nsight:
        off = "Nsight was switched off for this profile"
        return NsightSection(nsys_missing=off, ncu_missing=off)
    if nsys_missing() is not None and ncu_missing() is not None:
        return NsightSection(nsys_missing=nsys_missing() or "", ncu_missing=ncu_missing() or "")
    request = out / "nsight-request.pkl"
    write_child_request(request, backend=candidate.backend, artifact=artifact,
                        knobs=dict(candidate.knobs), profile=profile, batch=example, runs=runs,
                        warmup=3)
    try:
        section, _files = run_nsight(child_command(request), out, settings.nsight_timeout_s)
    finally:
        request.unlink(missing_ok=True)
    return section


def runner_threads(runner: Runner | GenerationRunner) -> int:
    """The threads the runner says it runs on (1 when it does not say)."""
    try:
        return max(1, int(runner.describe().get("threads", "1")))
    except ValueError:
        return 1


def device_ceilings(profile: HardwareProfile, precision: str, threads: int) -> Ceilings:
    """Measured on the device; the profile's own peaks when torch cannot measure here."""
    device = "cpu" if profile.kind == "cpu" else "cuda"
    try:
        return measure_ceilings(device, precision, threads)
    except (ImportError, RuntimeError) as exc:
        by_precision = {str(k): v for k, v in profile.peak_gflops_by_precision.items()}
        peaks = profile_peaks(by_precision.get(precision, profile.peak_gflops),
                              profile.peak_bandwidth_gbs, profile.name, profile.peak_source)
        if peaks is not None:
            return peaks
        return Ceilings(None, None, f"could not measure ({type(exc).__name__}: {exc}) and the "
                                    f"device profile gives no peaks")


def collect_files(out: Path) -> tuple[dict[str, bytes], list[str]]:
    """Every file under ``out`` by its relative name, but those over MAX_FILE_BYTES (a note each)."""
    files: dict[str, bytes] = {}
    notes: list[str] = []
    for path in sorted(out.rglob("*")):
        if not path.is_file():
            continue
        name = str(path.relative_to(out))
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            notes.append(f"{name} ({size / 2**20:.0f} MiB) was not kept: over "
                         f"{MAX_FILE_BYTES // 2**20} MiB")
            continue
        files[name] = path.read_bytes()
    return files, notes
