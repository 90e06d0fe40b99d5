"""TensorRT's own per-layer profiler for ``dse profile``: an ``IProfiler`` on an execution context
of the runner's engine, and the engine inspector's account of its layers.

Written against TensorRT 10's Python API (checked in its documentation: ``tensorrt.IProfiler``,
whose subclass calls ``trt.IProfiler.__init__`` and overrides ``report_layer_time(layer_name,
ms)``; ``IExecutionContext.profiler``, ``enqueue_emits_profile`` and ``report_to_profiler()``;
``ICudaEngine.create_engine_inspector()``, ``EngineInspector.execution_context`` and
``get_engine_information(trt.LayerInformationFormat.JSON)``). With a profiler attached, each
``execute_async_v3`` reports every layer's time once (TensorRT times the layers with CUDA
events, so these are GPU times); with ``enqueue_emits_profile`` off the times wait for
``report_to_profiler()``, which is then called after each run.

The profiled context is one of its own, without a CUDA graph (a graph replay runs no enqueue, so
nothing would be reported), made from the runner's engine; the runner's contexts are left as
they are. Layer names are the engine's: fused layers named ``a + b + c`` after the ONNX nodes
they took in, reformatting layers TensorRT added, and, for an engine built with profiling
verbosity NONE, layer indices. The inspector's JSON lists each layer by name only unless the
engine was built with ``ProfilingVerbosity.DETAILED``, when it also gives the layer's type
(``LayerType``: ``CaskConvolution``, ``Reformat``), its inputs' dimensions and formats, and tactic.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.backends.op_profile import OpProfile, OpRecord, timed_runs
from dse.backends.op_trace import TimedOp, sequential_events, write_json, write_trace
from dse.util import atomic_write_text

LAYER_TIMES_FILE = "tensorrt-layer-times.json"
ENGINE_INFO_FILE = "tensorrt-engine-information.json"
TRACE_FILE = "trace.json"
WHERE = "TensorRT"
# Runs before the profiled ones: TensorRT defers some shape work to the first enqueue of a
# context, and the first calls pay for lazily loaded kernels.
WARM_UP_CALLS = 2


@dataclass(frozen=True)
class LayerInfo:
    """What the engine inspector says of a layer (types and shapes only in a DETAILED build)."""

    layer_type: str
    input_shapes: str


def layer_profiler(trt: Any) -> Any:
    """A ``trt.IProfiler`` that keeps every ``(layer, ms)`` report, in order, in ``reports``."""

    class LayerTimes(trt.IProfiler):  # type: ignore[misc]  # TensorRT ships no type stubs
        def __init__(self) -> None:
            # pybind11 trampolines need the base initialised explicitly (TensorRT's docs).
            trt.IProfiler.__init__(self)
            self.reports: list[tuple[str, float]] = []

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            self.reports.append((str(layer_name), float(ms)))

    return LayerTimes()


def profile_context(trt: Any, engine: Any, context: Any, run: Callable[[Any], Any], feed: Any,
                    runs: int, out_dir: Path, *, profiler: str) -> OpProfile:
    """``run(feed)`` (an enqueue on ``context`` and a wait for its result) ``runs`` times under a
    layer profiler, after a warm-up without it; raw layer times, the engine's information and a
    trace written to ``out_dir``."""
    for _ in range(WARM_UP_CALLS):
        run(feed)
    times = layer_profiler(trt)
    context.profiler = times
    per_run: list[list[tuple[str, float]]] = []
    starts: list[float] = []
    run_us: list[float] = []
    origin = time.perf_counter_ns()
    for _ in range(runs):
        mark = len(times.reports)
        starts.append((time.perf_counter_ns() - origin) / 1e3)
        run_us.extend(timed_runs(run, feed, 1))
        if not context.enqueue_emits_profile:
            context.report_to_profiler()
        per_run.append(times.reports[mark:])
    engine_text = engine_information(trt, engine, context)
    layers = parse_engine_information(engine_text)
    raw_info = atomic_write_text(out_dir / ENGINE_INFO_FILE, engine_text)
    raw_times = write_json(out_dir / LAYER_TIMES_FILE, {
        "profiler": profiler, "runs": runs, "run_us": run_us, "unit": "ms",
        "reports": [[{"layer": name, "ms": ms} for name, ms in run_reports]
                    for run_reports in per_run]})
    trace = write_trace(out_dir / TRACE_FILE, sequential_events(starts, run_us, [
        [TimedOp(name, _layer_type(layers, name), ms * 1e3) for name, ms in run_reports]
        for run_reports in per_run]),
        "TensorRT IProfiler: per-layer GPU times laid end to end from each run's measured start")
    return OpProfile(profiler=profiler, runs=runs, ops=_records(per_run, layers),
                     files=[raw_times, raw_info, trace], trace=trace, run_us=run_us,
                     notes=_notes(layers))


def engine_information(trt: Any, engine: Any, context: Any) -> str:
    """The inspector's JSON of every layer, for ``context`` (whose input shape is set, so the
    dimensions it gives are concrete)."""
    inspector = engine.create_engine_inspector()
    inspector.execution_context = context
    return str(inspector.get_engine_information(trt.LayerInformationFormat.JSON))


def parse_engine_information(text: str) -> dict[str, LayerInfo]:
    """Layer name -> type and input shapes from the inspector's JSON (``{"Layers": [...]}``: a
    name per layer, or in a DETAILED build an object with ``Name``, ``LayerType`` and ``Inputs``
    carrying ``Dimensions``)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        return {}
    entries = document.get("Layers", []) if isinstance(document, dict) else []
    layers: dict[str, LayerInfo] = {}
    for entry in entries:
        if isinstance(entry, str):
            layers[entry] = LayerInfo("", "")
        elif isinstance(entry, dict) and "Name" in entry:
            inputs = entry.get("Inputs", [])
            shapes = " ".join(f"[{','.join(str(d) for d in item['Dimensions'])}]"
                              for item in inputs
                              if isinstance(item, dict) and isinstance(item.get("Dimensions"), list))
            layers[str(entry["Name"])] = LayerInfo(str(entry.get("LayerType", "")), shapes)
    return layers


def _layer_type(layers: dict[str, LayerInfo], name: str) -> str:
    return layers[name].layer_type if name in layers else ""


def _records(per_run: list[list[tuple[str, float]]],
             layers: dict[str, LayerInfo]) -> list[OpRecord]:
    totals: dict[str, list[float]] = {}
    for run_reports in per_run:
        for name, ms in run_reports:
            totals.setdefault(name, []).append(ms * 1e3)
    return [OpRecord(name=name, op_type=_layer_type(layers, name), calls=len(times),
                     total_us=float(sum(times)), where=WHERE, device_us=float(sum(times)),
                     input_shapes=layers[name].input_shapes if name in layers else "")
            for name, times in totals.items()]


def _notes(layers: dict[str, LayerInfo]) -> list[str]:
    detailed = any(info.layer_type for info in layers.values())
    notes = [
        "TensorRT's IProfiler on an execution context of its own (no CUDA graph): each layer's "
        "time is GPU time TensorRT measures around it with CUDA events (total_us = device_us)",
        "names are the engine's layers: fused layers named 'a + b + c' after the ONNX nodes "
        "they took in, and reformatting layers of TensorRT's own",
        "the trace's timeline is reconstructed from per-layer times: TensorRT gives durations, "
        "not start times, so each run's layers are laid end to end from its measured start",
    ]
    if not detailed:
        notes.append("the engine was not built with ProfilingVerbosity.DETAILED, so its "
                     "inspector names the layers only: op_type and input shapes are empty")
    return notes
