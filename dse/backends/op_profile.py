"""What a backend's own profiler reports about one compiled candidate: time per operator.

Every backend that has a per-operator profiler (ONNX Runtime's node profiling, ``torch.profiler``,
TensorRT's layer profiler, TVM's VM profiler, OpenVINO's performance counters, ...) implements
:meth:`dse.backends.base.Backend.profile_ops`, which runs a compiled runner ``runs`` times under
that profiler and returns an :class:`OpProfile`; its declaration names the profiler
(``BackendDeclaration.profiler``). A backend without one raises :class:`ProfilerMissing`, saying
why. The roofline join, verdicts and pages are :mod:`dse.profiling`'s; this module is only the
contract, plain data, importable without any runtime.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.core import BuildError


class ProfilerMissing(BuildError):
    """The backend has no per-operator profiler here (none at all, or its runtime was built
    without one); the message says which and why, in one line."""


@dataclass
class OpRecord:
    """One operator (an ONNX node, an aten op, a TensorRT layer, a fused kernel) over the
    profiled runs.

    Attributes:
        name: its name as the profiler gives it (the ONNX node name for ONNX Runtime and
            OpenVINO, the layer name for TensorRT, the aten op or kernel name for torch).
        op_type: the operator type (``Conv``, ``aten::addmm``, ``FusedConv``, ``Convolution``).
        calls: how many times it ran over all profiled runs (a node runs once per run; an aten
            op may run several times).
        total_us: its wall time summed over those calls, microseconds, as the profiler measured
            it (inclusive of anything it called).
        where: what ran it: execution provider, delegate, device (``CPUExecutionProvider``,
            ``cuda``, ``XNNPACK``); empty when the profiler does not say.
        flops: floating-point (or integer) operations of one call, when the profiler or the
            backend can count them from the shapes that ran; None when unknown. The profiling
            layer fills it from the ONNX graph by ``name`` where it can.
        bytes: bytes one call reads and writes (its inputs and outputs, each once), when known.
        input_shapes: the shapes it ran at, as text (``[8,3,8,8] [16,3,3,3]``); may be empty.
        device_us: time on an accelerator (CUDA kernels) over all calls, where the profiler
            separates it from host time; None on a CPU.
    """

    name: str
    op_type: str
    calls: int
    total_us: float
    where: str = ""
    flops: float | None = None
    bytes: float | None = None
    input_shapes: str = ""
    device_us: float | None = None


@dataclass
class OpProfile:
    """A backend profiler's account of ``runs`` calls of a runner.

    Attributes:
        profiler: what produced it (``onnxruntime node profiling 1.23.2``).
        runs: how many times ``Runner.run`` was called under the profiler.
        ops: one record per operator, in no particular order.
        files: the raw files the profiler wrote, in the output folder it was given.
        trace: a Chrome/Perfetto trace JSON of the profiled runs, in that folder, when the
            profiler writes one (or events it can be made from); None otherwise.
        run_us: the wall time of each profiled ``run`` call as seen from outside, microseconds.
        run_op_us: the operator time inside each profiled run, microseconds, where the profiler
            tells runs apart: its median is what the plain p50 is compared with (a mean over
            runs would carry every preempted run's stall); empty when it cannot.
        notes: anything a reader of the table must know (ops the profiler cannot see, time it
            attributes to no operator).
    """

    profiler: str
    runs: int
    ops: list[OpRecord]
    files: list[Path] = field(default_factory=list)
    trace: Path | None = None
    run_us: list[float] = field(default_factory=list)
    run_op_us: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ProfileRequest:
    """What :meth:`~dse.backends.base.Backend.profile_ops` is given.

    Attributes:
        runner: the candidate's runner, compiled by this backend and warm; a backend whose
            profiler must be switched on at build time (ONNX Runtime, OpenVINO) builds a profiled
            sibling from ``artifact`` with the same settings and leaves this one as it is.
        artifact: the :class:`~dse.artifacts.Artifact` the runner was compiled from.
        knobs: the candidate's knobs.
        profile: the device's :class:`~dse.spec.HardwareProfile`.
        batch: the input every profiled call gets, (batch_size, *input_shape) float32 numpy.
        runs: how many profiled calls to make, after any warm-up the profiled sibling needs.
        out_dir: an existing folder for the profiler's raw files (and its trace).
        between: a plain call of ``runner``, timed by the caller. A backend whose profiler runs
            in a sibling of the runner, not process-wide (ONNX Runtime's session profiling),
            calls it after each profiled call: plain and profiled calls then share every moment
            of the machine, and their comparison is like for like. A process-wide profiler
            (torch's, jax's) would record the plain call too, and leaves it uncalled.
    """

    runner: Any
    artifact: Any
    knobs: Mapping[str, Any]
    profile: Any
    batch: Any
    runs: int
    out_dir: Path
    between: Callable[[], None] | None = None


# A language model's two phases, as its requests run them: the prompt's prefill (up to the first
# token) and one decode step (each token after it).
PREFILL, DECODE = "prefill", "decode"
PHASES = (PREFILL, DECODE)
# What one profiled call of each phase is, for a profile's notes.
PHASE_CALLS = {PREFILL: "request's prefill (its prompt, up to the first token)",
               DECODE: "decode step (one token per sequence)"}


@dataclass(frozen=True)
class GenerationProfileRequest:
    """What :meth:`~dse.backends.base.Backend.profile_generation` is given.

    Attributes:
        runner: the candidate's :class:`~dse.backends.generation_runner.GenerationRunner`, warm.
        stream: one request per call, the workload's prompts bound (``runner.bound_stream``):
            its first step is the prefill, each later one a decode step.
        output_tokens: the steps of each request (its prefill's token, then decode steps).
        requests: how many requests to run under the profiler.
        out_dir: an existing folder for the profiler's raw files (and its trace).
        prompts: the prompt ids the stream is bound to, (batch, prompt tokens), for a runtime
            whose profiler must be switched on inside a request (ONNX Runtime GenAI's).
    """

    runner: Any
    stream: Callable[[], Any]
    output_tokens: int
    requests: int
    out_dir: Path
    prompts: Any = None


def timed_runs(run: Callable[[Any], Any], batch: Any, runs: int,
               between: Callable[[], None] | None = None) -> list[float]:
    """Call ``run(batch)`` ``runs`` times, and ``between()`` (untimed here) after each; the wall
    time of each ``run`` call, microseconds."""
    out: list[float] = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        run(batch)
        out.append((time.perf_counter_ns() - start) / 1e3)
        if between is not None:
            between()
    return out
