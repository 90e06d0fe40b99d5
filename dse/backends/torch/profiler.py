"""``torch.profiler`` over a torch runner (eager or torch.compile), one row per operator.

Each profiled call is wrapped in a ``dse::run`` range. The rows are the operators directly under
it: an op of a namespace (``aten::conv2d``, ``quantized::linear``) is a row with its inclusive
time, never split further (its children are its own implementation); anything else is a
framework range (``Torch-Compiled Region``, ``## Call CompiledFxGraph ... ##``, ``TorchDynamo
Cache Lookup``) whose children are walked the same way and whose own time — for a compiled graph,
inductor's generated kernels, which the profiler does not name — becomes a row of its own. So the
rows never overlap and their sum is the time spent inside the framework's ranges.

FLOPs are torch's own counts (``with_flops``: convolutions and matrix products); bytes are the
recorded inputs' (the profiler records no output shapes), so an op's intensity is an upper bound.
CUDA time per op is the profiler's device time of its kernels.
"""

from __future__ import annotations

import math
import re
from typing import Any

from dse.backends.op_profile import OpProfile, OpRecord, ProfileRequest, timed_runs

PROFILER = "torch.profiler"
RUN_RANGE = "dse::run"
RAW_TRACE = "torch-trace.json"
WARMUP_RUNS = 3
# At most this many profiled calls: torch keeps every operator call with its shapes, and its
# trace and the Python objects it builds afterwards grow with each (1000 calls of the test cnn:
# a trace of ~100 MB, seconds to read back).
MAX_RUNS = 100
# An operator of a namespace ("aten::add", "quantized::linear"); anything else is a range.
_OP_NAME = re.compile(r"^[A-Za-z_][\w.]*::\w")
# Generated graph names carry a hash; one row per kind of range is what a reader compares.
_HASH = re.compile(r"\b[a-z0-9]{40,}\b")
_DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8,
                "int": 4, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
                "c10::quint8": 1, "c10::qint8": 1, "c10::qint32": 4,
                "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}


def profile_torch_runner(request: ProfileRequest) -> OpProfile:
    """Profile ``request.runs`` calls of a torch runner (it is warm: compiled and run)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    runner = request.runner
    cuda = runner.placement.device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])

    def run(batch: Any) -> Any:
        with record_function(RUN_RANGE):
            return runner.run(batch)

    for _ in range(WARMUP_RUNS):
        runner.run(request.batch)
    with profile(activities=activities, record_shapes=True, with_flops=True) as prof:
        run_us = timed_runs(run, request.batch, min(request.runs, MAX_RUNS))
    raw = request.out_dir / RAW_TRACE
    prof.export_chrome_trace(str(raw))
    records: dict[str, OpRecord] = {}
    ranges = [event for event in prof.events() if event.name == RUN_RANGE]
    run_op_us = []
    for event in ranges:
        before = sum(record.total_us for record in records.values())
        collect_rows(event, records)
        run_op_us.append(sum(record.total_us for record in records.values()) - before)
    notes = ["bytes count an op's inputs only (torch's profiler records no output shapes): "
             "intensities are upper bounds",
             "FLOPs are torch's own counts, for convolutions and matrix products only"]
    if any(record.op_type == "framework" for record in records.values()):
        notes.append("framework rows are time inside torch's own ranges outside any named "
                     "operator: for torch.compile, inductor's generated kernels")
    return OpProfile(f"{PROFILER} {torch.__version__}", len(ranges), list(records.values()),
                     files=[raw], trace=raw, run_us=run_us, run_op_us=run_op_us, notes=notes)


def collect_rows(event: Any, records: dict[str, OpRecord]) -> None:
    """Add the rows under one range ``event`` (see the module's docstring)."""
    for child in event.cpu_children:
        if _OP_NAME.match(child.name):
            _add(records, child.name, child.name, child.cpu_time_total, child)
            continue
        collect_rows(child, records)
        own = child.cpu_time_total - sum(c.cpu_time_total for c in child.cpu_children)
        if own > 0:
            name = _HASH.sub("<graph>", child.name).strip("# ").strip()
            _add(records, name, "framework", own, None)


def _add(records: dict[str, OpRecord], name: str, op_type: str, us: float,
         event: Any | None) -> None:
    shapes = _shapes(event)
    key = f"{name} {shapes}" if shapes else name
    record = records.get(key)
    if record is None:
        flops = _flops(event)
        record = records[key] = OpRecord(name, op_type, 0, 0.0, where=_where(event),
                                         flops=flops, bytes=_input_bytes(event),
                                         input_shapes=shapes)
    record.calls += 1
    record.total_us += float(us)
    device = _device_us(event)
    if device is not None:
        record.device_us = (record.device_us or 0.0) + device


def _flops(event: Any | None) -> float | None:
    """torch's FLOP count of one call of the op: its own, else its callees' (``aten::linear``
    counts none itself; the ``aten::addmm`` or ``aten::mm`` it calls does); None when none is
    counted."""
    if event is None:
        return None
    if event.flops:
        return float(event.flops)
    inner = sum(_flops(child) or 0.0 for child in event.cpu_children)
    return inner or None


def _shapes(event: Any | None) -> str:
    if event is None or not event.input_shapes:
        return ""
    return " ".join(str(list(shape)) for shape in event.input_shapes if shape)


def _input_bytes(event: Any | None) -> float | None:
    """Bytes of the op's tensor inputs at their recorded dtypes; None when a dtype is unknown."""
    if event is None or not event.input_shapes:
        return None
    dtypes = getattr(event, "input_dtypes", None) or []
    total = 0
    for shape, dtype in zip(event.input_shapes, dtypes, strict=False):
        if not shape:  # a scalar or a non-tensor argument
            continue
        size = _DTYPE_BYTES.get(str(dtype))
        if size is None:
            return None
        total += size * math.prod(shape)
    return float(total) if total else None


def _where(event: Any | None) -> str:
    if event is None:
        return "host"
    return "cuda" if _device_us(event) else "cpu"


def _device_us(event: Any | None) -> float | None:
    if event is None:
        return None
    total = getattr(event, "device_time_total", 0.0) or 0.0
    return float(total) if total > 0 else None

