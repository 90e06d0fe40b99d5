"""ONNX Runtime's own per-node profiler over a profiled sibling session, for every ONNX Runtime
backend (CPU, CUDA and TensorRT providers alike).

ONNX Runtime profiles only from a session's creation and stops for good at ``end_profiling()``,
and the runner's own session has already ended its profile (its placement check,
:mod:`dse.backends.onnxruntime.placement`). So the profile runs on a second session made with the runner's
plan and settings, profiling on: a few warm-up runs, then the profiled ones. Its JSON (Chrome
trace events) is kept as is; the node events of the profiled runs — those after the warm-up runs'
``model_run`` events — are summed per node into :class:`OpRecord` rows, with the FLOPs and bytes
of the shapes each node ran at (``dse.models.op_costs.cost_from_shapes``).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dse.backends.op_profile import OpProfile, OpRecord, ProfileRequest, ProfilerMissing, timed_runs
from dse.models import FUSED_BASE_OPS, NodeCost, TypedShape, cost_from_shapes, node_costs

PROFILER = "onnxruntime node profiling"
RAW_FILE = "onnxruntime-profile.json"
TRACE_FILE = "trace.json"
_KERNEL_SUFFIX = "_kernel_time"
WARMUP_RUNS = 3


def profile_ort_runner(request: ProfileRequest) -> OpProfile:
    """Profile ``request.runs`` calls of a sibling of the request's ONNX Runtime runner."""
    import onnxruntime as ort

    sibling = getattr(request.runner, "profiled_sibling", None)
    if sibling is None:
        raise ProfilerMissing(f"a {type(request.runner).__name__} has no ONNX Runtime session "
                              f"to profile a sibling of")
    session = sibling(request.out_dir / "onnxruntime-profile")
    input_name = session.get_inputs()[0].name
    output_name = session.get_outputs()[0].name

    def run(batch: Any) -> Any:
        return session.run([output_name], {input_name: batch})

    for _ in range(WARMUP_RUNS):
        run(request.batch)
    run_us = timed_runs(run, request.batch, request.runs, request.between)
    written = Path(session.end_profiling())
    raw = request.out_dir / RAW_FILE
    written.replace(raw)
    events: list[dict[str, Any]] = json.loads(raw.read_text())
    profiled = profiled_events(events, WARMUP_RUNS)
    trace = request.out_dir / TRACE_FILE
    trace.write_text(json.dumps({"traceEvents": profiled, "displayTimeUnit": "ms"}))
    graph, why = _graph_costs(request)
    notes = ["node names are those of ONNX Runtime's optimised graph: a node that kept its "
             "ONNX name takes its FLOPs and bytes from the candidate's ONNX graph, one that "
             "fusions or layout changes renamed from the shapes it ran at"]
    if why:
        notes.append(f"the ONNX graph could not be counted ({why}): every node's FLOPs and "
                     f"bytes come from the shapes it ran at")
    return OpProfile(f"{PROFILER} {ort.__version__}", request.runs,
                     node_records(profiled, graph), files=[raw], trace=trace, run_us=run_us,
                     run_op_us=op_time_per_run(profiled), notes=notes)


def op_time_per_run(events: list[dict[str, Any]]) -> list[float]:
    """The node time inside each ``model_run`` event, in run order, microseconds."""
    runs = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    totals = [0.0] * len(runs)
    starts = [start for start, _ in runs]
    for event in events:
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith(_KERNEL_SUFFIX):
            continue
        at = bisect.bisect_right(starts, float(event["ts"])) - 1
        if at >= 0 and float(event["ts"]) <= runs[at][1]:
            totals[at] += float(event.get("dur", 0.0))
    return totals


def _graph_costs(request: ProfileRequest) -> tuple[dict[str, NodeCost], str]:
    """The candidate's ONNX graph counted per node at the profiled batch size, or why not."""
    path = getattr(request.artifact, "path", None)
    if path is None:
        return {}, "no ONNX file"
    try:
        return node_costs(path, len(request.batch)), ""
    except (ValueError, OSError) as exc:
        return {}, str(exc).splitlines()[0][:200]


def profiled_events(events: list[dict[str, Any]], warmup_runs: int) -> list[dict[str, Any]]:
    """The events of the runs after the first ``warmup_runs`` ``model_run`` events (session
    creation and warm-up dropped)."""
    starts = sorted(float(e["ts"]) for e in events
                    if e.get("cat") == "Session" and e.get("name") == "model_run")
    if len(starts) <= warmup_runs:
        raise ProfilerMissing(f"onnxruntime's profile holds {len(starts)} runs, fewer than the "
                              f"{warmup_runs} warm-up runs and the profiled ones")
    first = starts[warmup_runs]
    return [e for e in events if float(e.get("ts", -1)) >= first
            and e.get("cat") in ("Node", "Session") and e.get("ph") == "X"]


def node_records(events: Iterable[Mapping[str, Any]],
                 graph: Mapping[str, NodeCost] | None = None) -> list[OpRecord]:
    """One record per node of ONNX Runtime's node events (``<node>_kernel_time``), its FLOPs
    and bytes those of the ``graph`` node of its name and op where there is one (a weight ORT
    prepacked is missing from the event's shapes), else of the shapes the event lists."""
    records: dict[str, OpRecord] = {}
    for event in events:
        name = str(event.get("name", ""))
        if event.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX):
            continue
        node = name[: -len(_KERNEL_SUFFIX)]
        args = event.get("args", {})
        record = records.get(node)
        if record is None:
            inputs = _typed_shapes(args.get("input_type_shape", []))
            outputs = _typed_shapes(args.get("output_type_shape", []))
            op_type = str(args.get("op_name", ""))
            known = (graph or {}).get(node)
            if known is not None and known.op_type == FUSED_BASE_OPS.get(op_type, op_type):
                flops = None if known.flops is None else float(known.flops)
                nbytes = None if known.bytes is None else float(known.bytes)
            else:
                flops, nbytes = cost_from_shapes(op_type, inputs, outputs)
            record = records[node] = OpRecord(
                node, op_type, 0, 0.0, where=str(args.get("provider", "")), flops=flops,
                bytes=nbytes, input_shapes=" ".join(str(list(shape)) for _, shape in inputs))
        record.calls += 1
        record.total_us += float(event.get("dur", 0.0))
    return list(records.values())


def _typed_shapes(entries: Iterable[Mapping[str, Any]]) -> list[TypedShape]:
    """``[{"float": [4, 3, 8, 8]}, ...]`` (ONNX Runtime's form) as (type, shape) pairs."""
    return [(str(dtype), tuple(int(d) for d in shape))
            for entry in entries for dtype, shape in entry.items()]
