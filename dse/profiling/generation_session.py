"""One profile of a deployed language model's phase, on its device worker, under the node lock.

A language model's request has two phases that a user tunes for differently: the prefill (the
whole prompt at once, compute-bound, up to the first token) and the decode steps (one token per
sequence each, bound by reading the weights and the KV cache). A profile takes one of them as
its call — one request's prefill, or one decode step — and gives that phase's operator table,
compared with the same phase's plain time, as :mod:`dse.profiling.session` does for a
fixed-shape model's forward pass:

1. plain requests, as a trial runs them (``GenerationRunner.bound_stream`` over the workload's
   prompts), half before the profiler and half after; each request's first step is a prefill
   time, each later step a decode time;
2. requests under the backend's own profiler (``Backend.profile_generation``), which returns
   both phases' tables; the asked phase's is kept;
3. the roofline ceilings (:mod:`dse.profiling.ceilings`).

Linux ``perf`` and Nsight time a fixed-shape model's calls: a request mixes both phases, so they
are not run here, and the summary says so.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.backends import (
    DECODE,
    PHASES,
    PREFILL,
    GenerationProfileRequest,
    OpProfile,
    ProfilerMissing,
    first_error_line,
    get_backend,
)
from dse.profiling.session import (
    DeviceProfile,
    ProfileSettings,
    collect_files,
    device_ceilings,
    runner_threads,
)
from dse.profiling.summary import NsightSection, PerfSection

if TYPE_CHECKING:
    import numpy as np

    from dse.backends import GenerationRunner
    from dse.core import Candidate
    from dse.spec import HardwareProfile

# Requests per window: at least this many, so each phase's median stands on several requests.
MIN_REQUESTS = 4
# Requests under the profiler, at most: torch keeps every operator call of every step.
MAX_PROFILED_REQUESTS = 8
_NOT_PER_PHASE = ("a language model's request mixes its two phases; perf and Nsight time one "
                  "kind of call, so they are not run for a phase")


def check_phase(phase: str) -> str:
    """``phase``, or ``decode`` when empty; ValueError naming the allowed ones otherwise."""
    chosen = phase or DECODE
    if chosen not in PHASES:
        raise ValueError(f"phase must be one of {list(PHASES)}, got {phase!r}")
    return chosen


def profile_generator(runner: GenerationRunner, prompts: np.ndarray, output_tokens: int,
                      candidate: Candidate, profile: HardwareProfile,
                      settings: ProfileSettings) -> DeviceProfile:
    """Profile ``settings.phase`` of a warm ``runner`` of ``candidate`` over the workload's
    ``prompts`` and ``output_tokens`` (see the module's docstring)."""
    phase = check_phase(settings.phase)
    if output_tokens < 2 and phase == DECODE:
        raise ValueError("the workload's requests have no decode step (output_tokens 1)")
    start = time.time()
    stream = runner.bound_stream(prompts, output_tokens)
    with tempfile.TemporaryDirectory(prefix="dse-profile-") as scratch:
        out = Path(scratch)
        warm = _timed_requests(stream, output_tokens, 1)
        request_s = (sum(warm[PREFILL]) + sum(warm[DECODE])) / 1e6
        requests = max(MIN_REQUESTS, int(settings.window_s / max(request_s, 1e-6)))
        plain = _timed_requests(stream, output_tokens, (requests + 1) // 2)
        profiled = max(1, min(requests, MAX_PROFILED_REQUESTS,
                              settings.max_profiled_runs // output_tokens))
        ops, missing = _backend_profile(runner, stream, output_tokens, profiled, candidate, out,
                                        prompts)
        for name, times in _timed_requests(stream, output_tokens, (requests + 1) // 2).items():
            plain[name] += times
        threads = runner_threads(runner)
        ceilings = device_ceilings(profile, candidate.precision, threads)
        files, notes = collect_files(out)
        found = None if ops is None else ops[phase]
        if found is not None:
            found.files = [Path(p.name) for p in found.files]
            found.trace = None if found.trace is None else Path(found.trace.name)
    notes.append(f"plain {phase} times: {len(plain[phase])} of {2 * ((requests + 1) // 2)} "
                 f"requests of batch {candidate.batch_size}, {prompts.shape[1]} prompt tokens "
                 f"and {output_tokens} output tokens, as the campaign's trial ran them")
    return DeviceProfile(len(plain[phase]), plain[phase], [], found, missing,
                         PerfSection(stat_missing=_NOT_PER_PHASE, record_missing=_NOT_PER_PHASE),
                         _nsight_section(profile), ceilings, threads, files, notes,
                         {"start": start, "end": time.time()}, phase=phase)


def _timed_requests(stream: Callable[[], Iterator[Any]], output_tokens: int,
                    requests: int) -> dict[str, list[float]]:
    """Run ``requests`` requests; each step's wall time, microseconds, by phase."""
    times: dict[str, list[float]] = {name: [] for name in PHASES}
    for _ in range(requests):
        steps = iter(stream())
        for step in range(output_tokens):
            begin = time.perf_counter_ns()
            next(steps)
            times[PREFILL if step == 0 else DECODE].append((time.perf_counter_ns() - begin) / 1e3)
        close = getattr(steps, "close", None)
        if close is not None:
            close()
    return times


def _backend_profile(runner: GenerationRunner, stream: Callable[[], Iterator[Any]],
                     output_tokens: int, requests: int, candidate: Candidate, out: Path,
                     prompts: np.ndarray) -> tuple[dict[str, OpProfile] | None, str]:
    backend = get_backend(candidate.backend)
    request = GenerationProfileRequest(runner, stream, output_tokens, requests, out, prompts)
    try:
        return backend.profile_generation(request), ""
    except ProfilerMissing as exc:
        return None, str(exc)
    # A profiler is a third party's tool on a live runtime; whatever it raises is its failure,
    # said in one line, never the end of the profile.
    except Exception as exc:
        return None, f"{backend.declaration.profiler or candidate.backend} failed: " \
                     f"{type(exc).__name__}: {first_error_line(exc)}"


def _nsight_section(profile: HardwareProfile) -> NsightSection:
    if profile.kind not in ("cuda", "jetson"):
        reason = f"device {profile.name!r} is a {profile.kind} device, not an NVIDIA GPU"
    else:
        reason = _NOT_PER_PHASE
    return NsightSection(nsys_missing=reason, ncu_missing=reason)
