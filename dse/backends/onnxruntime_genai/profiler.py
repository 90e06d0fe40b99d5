"""ONNX Runtime's node profiling over ONNX Runtime GenAI's requests, one table per phase.

ONNX Runtime GenAI switches its session's profiling on and off while a generator runs
(``Generator.set_runtime_option("enable_profiling", prefix)``, onnxruntime-genai 0.18): each token
generation then writes its own JSON file, named by the prefix set before it and the time. Each
step of a request gets a prefix of its own (two steps within one millisecond would otherwise
share a file name), so a request's first file is its prefill (the prompt appended, the first
token generated) and each later one a decode step. A phase's rows are the nodes of its files
(``<node>_kernel_time`` events, read as for a fixed-shape model:
:func:`dse.backends.onnxruntime.profiler.node_records`); one profiled call is one file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from dse.backends.onnxruntime.profiler import node_records
from dse.backends.op_profile import (
    DECODE,
    PHASE_CALLS,
    PHASES,
    PREFILL,
    GenerationProfileRequest,
    OpProfile,
    ProfilerMissing,
)

PROFILER = "onnxruntime node profiling (onnxruntime-genai runtime option)"


def profile_genai_generation(request: GenerationProfileRequest) -> dict[str, OpProfile]:
    """Profile ``request.requests`` requests of a GenAI runner over ``request.prompts``."""
    import onnxruntime_genai as og

    runner = request.runner
    if request.prompts is None:
        raise ProfilerMissing("the profile request carries no prompts to run")
    ids = np.ascontiguousarray(request.prompts, dtype=np.int32)
    rows, length = ids.shape
    out = request.output_tokens
    folder = request.out_dir / "onnxruntime-genai-profile"
    folder.mkdir(parents=True, exist_ok=True)
    call_us: dict[str, list[float]] = {phase: [] for phase in PHASES}
    for number in range(request.requests):
        generator = runner._generator(rows, length + out)
        for step in range(out):
            generator.set_runtime_option("enable_profiling",
                                         str(folder / f"request-{number:02d}-step-{step:03d}"))
            start = time.perf_counter_ns()
            if step == 0:
                generator.append_tokens(ids)
            generator.generate_next_token()
            generator.get_next_tokens()
            call_us[PREFILL if step == 0 else DECODE].append(
                (time.perf_counter_ns() - start) / 1e3)
        generator.set_runtime_option("enable_profiling", "0")
    files: dict[str, list[Path]] = {PREFILL: [], DECODE: []}
    for path in sorted(folder.glob("request-*-step-*.json")):
        step = int(path.name.split("-step-")[1][:3])
        files[PREFILL if step == 0 else DECODE].append(path)
    expected = {PREFILL: request.requests, DECODE: request.requests * (out - 1)}
    found = {}
    for phase in PHASES:
        if len(files[phase]) != expected[phase]:
            raise ProfilerMissing(f"onnxruntime-genai wrote {len(files[phase])} {phase} profile "
                                  f"files where {expected[phase]} steps ran")
        events = [json.loads(path.read_text()) for path in files[phase]]
        op_us = [sum(float(event.get("dur", 0.0)) for event in step_events
                     if event.get("cat") == "Node"
                     and str(event.get("name", "")).endswith("_kernel_time"))
                 for step_events in events]
        found[phase] = OpProfile(
            f"{PROFILER} {og.__version__}", len(events),
            node_records([event for step_events in events for event in step_events]),
            files=list(files[phase]), trace=None, run_us=call_us[phase], run_op_us=op_us,
            notes=[f"one profiled call is one {PHASE_CALLS[phase]}: one JSON file of ONNX Runtime's "
                   f"per-node profile ({request.requests} requests of {out} tokens)",
                   "node names are those of the model builder's graph as ONNX Runtime optimised "
                   "it; FLOPs and bytes come from the shapes each node ran at"])
    return found
