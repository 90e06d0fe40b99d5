"""``torch.profiler`` over a language model's requests, one operator table per phase.

Each request runs under the profiler as it runs in a trial (``GenerationRunner.bound_stream``):
its first step — the prompt's prefill up to the first token — inside a ``dse::prefill`` range,
each later step — one decode step — inside a ``dse::decode`` range. The rows of a phase are the
operators directly under its ranges, collected as for a fixed-shape call
(:func:`dse.backends.torch.profiler.collect_rows`: an op of a namespace is a row with its
inclusive time; a framework range is walked and its own time is a row), so a phase's rows never
overlap and one profiled call of it is one prefill or one decode step.
"""

from __future__ import annotations

import time

from dse.backends.op_profile import (
    DECODE,
    PHASE_CALLS,
    PHASES,
    PREFILL,
    GenerationProfileRequest,
    OpProfile,
    OpRecord,
)
from dse.backends.torch.profiler import PROFILER, collect_rows

PHASE_RANGES = {PREFILL: "dse::prefill", DECODE: "dse::decode"}
RAW_TRACE = "torch-generation-trace.json"


def profile_torch_generation(request: GenerationProfileRequest) -> dict[str, OpProfile]:
    """Profile ``request.requests`` requests of a torch generation runner (warm): one
    :class:`OpProfile` per phase."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = str(getattr(request.runner, "device", "cpu")).startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    output_tokens = request.output_tokens
    call_us: dict[str, list[float]] = {phase: [] for phase in PHASES}
    with profile(activities=activities, record_shapes=True, with_flops=True) as prof:
        for _ in range(request.requests):
            steps = iter(request.stream())
            for step in range(output_tokens):
                phase = PREFILL if step == 0 else DECODE
                start = time.perf_counter_ns()
                with record_function(PHASE_RANGES[phase]):
                    next(steps)
                call_us[phase].append((time.perf_counter_ns() - start) / 1e3)
            close = getattr(steps, "close", None)
            if close is not None:  # a generator's cleanup belongs to no phase
                close()
    raw = request.out_dir / RAW_TRACE
    prof.export_chrome_trace(str(raw))
    events = prof.events()
    found = {}
    for phase in PHASES:
        records: dict[str, OpRecord] = {}
        ranges = [event for event in events if event.name == PHASE_RANGES[phase]]
        op_us = []
        for event in ranges:
            before = sum(record.total_us for record in records.values())
            collect_rows(event, records)
            op_us.append(sum(record.total_us for record in records.values()) - before)
        notes = [f"one profiled call is one {PHASE_CALLS[phase]}, inside the requests a trial times "
                 f"({request.requests} requests of {output_tokens} tokens, both phases profiled "
                 f"together; the trace holds both)",
                 "bytes count an op's inputs only (torch's profiler records no output shapes): "
                 "intensities are upper bounds",
                 "FLOPs are torch's own counts, for convolutions and matrix products only"]
        found[phase] = OpProfile(f"{PROFILER} {torch.__version__}", len(ranges),
                                 list(records.values()), files=[raw], trace=raw,
                                 run_us=call_us[phase], run_op_us=op_us, notes=notes)
    return found

