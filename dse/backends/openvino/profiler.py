"""OpenVINO's own per-operator profiler for ``dse profile``: the performance counters of a model
compiled with ``PERF_COUNT`` on, read after every profiled inference.

After each ``InferRequest`` call, ``request.profiling_info`` lists every node of the compiled
(runtime) graph as an ``openvino.ProfilingInfo`` (checked against openvino 2026.4.1: fields
``node_name``, ``node_type``, ``exec_type``, ``real_time``, ``cpu_time``, ``status``): its
kernel (``exec_type``: ``brgconv_avx512_amx_1x1_bf16``, ``jit_uni_f32``), its time in that call
(``datetime.timedelta``, whole microseconds: a node under 1 µs reads 0) and whether it ran
(``EXECUTED``) or not (``NOT_RUN``: fused into a neighbour, a reshape without work, a constant;
``OPTIMIZED_OUT``). Executed nodes become one :class:`~dse.backends.op_profile.OpRecord` each.

The CPU plugin's counters are running averages: each node keeps the sum of its calls' whole
microseconds and their count since the model was compiled, and reports ``sum // count``
(``PerfCount::avg`` in ``src/plugins/intel_cpu/src/perf_count.h``; measured: the readings of
successive calls fall from the first call's cost towards the steady one). A window's time is
therefore ``count * average`` after its last call less the same before its first (within
about a microsecond per call), and single calls cannot be told apart: the trace draws each node at its
mean over the window. The counters are kept per stream, and one request's calls go to whichever
stream is free (measured with two streams: the running sums jump between two series), so the
sibling is compiled with one stream of the runner's threads per stream
(:func:`one_stream_properties`). Other plugins (GPU, NPU) report the last call's times.

Names are the runtime graph's: an ONNX node keeps its name where OpenVINO kept it whole; a Conv
with a bias becomes ``<name>/WithoutBiases`` with the bias add fused in, some nodes are named
after their output tensor, and the layout reorders OpenVINO inserts have names of their own. The
runtime model's ``originalLayersNames`` (in its ``rt_info``) lists the ONNX layers each node runs;
the raw file keeps it beside every node.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dse.backends.op_profile import OpProfile, OpRecord, timed_runs
from dse.backends.op_trace import TimedOp, sequential_events, write_json, write_trace

RAW_FILE = "openvino-perf-counters.json"
TRACE_FILE = "trace.json"
# Inferences before the profiled ones: the first call of a fresh request allocates its buffers
# and, on the CPU plugin, creates primitives; the next few still run slower (measured on the
# test cnn: the third call took twice the steady time).
WARM_UP_CALLS = 5
# Plugins whose counters are running averages since compile (see the module).
AVERAGING_DEVICES = frozenset({"CPU"})


@dataclass(frozen=True)
class RuntimeNode:
    """What the compiled model's runtime graph says of a node: the ONNX layers it runs, the
    shapes of its inputs, and the bytes of its inputs and outputs (None when a shape is
    dynamic)."""

    original_layers: str
    input_shapes: str
    bytes: float | None = None


# A node the runtime graph does not list (none seen so far): nothing known of it.
_UNKNOWN = RuntimeNode("", "")


@dataclass
class _Node:
    """One executed node's readings: after the warm-up, then after each profiled run."""

    node_type: str
    exec_type: str
    real_us: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)

    def per_run(self, averaging: bool) -> list[float]:
        """Its time in each profiled run (its mean over the window when the counters are
        running averages)."""
        if not averaging:
            return self.real_us[1:]
        runs = len(self.real_us) - 1
        if runs < 1:
            return []
        total = ((WARM_UP_CALLS + runs) * self.real_us[-1] - WARM_UP_CALLS * self.real_us[0])
        return [max(total, 0.0) / runs] * runs


def one_stream_properties(described: dict[str, str]) -> dict[str, Any]:
    """Properties that make a CPU sibling one stream of the runner's threads per stream (the
    counters are per stream; see the module), from the runner's ``describe()``: its streams
    and threads as the compiled model reported them."""
    try:
        streams = max(1, int(described.get("num_streams", "1")))
        threads = int(described["threads"])
    except (KeyError, ValueError):
        return {"NUM_STREAMS": 1}
    return {"NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": max(1, threads // streams)}


def profile_compiled(compiled: Any, feed: np.ndarray, runs: int, out_dir: Path, *,
                     profiler: str, averaging: bool, in_effect: dict[str, str]) -> OpProfile:
    """Run ``compiled`` (compiled with ``PERF_COUNT``) on ``feed`` ``runs`` times after a
    warm-up, reading its counters after the warm-up and after each call; raw counters and
    trace written to ``out_dir``. ``averaging``: its plugin's counters are running averages;
    ``in_effect``: the sibling's settings as it reports them, kept in the raw file."""
    readings, starts, run_us = _window(compiled.create_infer_request(), feed, runs)
    nodes = runtime_nodes(compiled)
    executed, skipped = _collect(readings, averaging)
    per_run = {name: node.per_run(averaging) for name, node in executed.items()}
    raw = write_json(out_dir / RAW_FILE, {
        **_raw_document(profiler, run_us, executed, skipped, nodes, averaging),
        "profiled_compile": in_effect})
    trace = write_trace(out_dir / TRACE_FILE, sequential_events(starts, run_us, [
        [TimedOp(name, node.node_type, per_run[name][index], {"exec_type": node.exec_type})
         for name, node in executed.items()] for index in range(runs)]),
        "OpenVINO performance counters: per-node durations laid end to end from each run's "
        "measured start" + (" (each node at its mean over the window)" if averaging else ""))
    ops = [OpRecord(name=name, op_type=node.node_type, calls=runs, total_us=sum(per_run[name]),
                    where=node.exec_type, bytes=nodes.get(name, _UNKNOWN).bytes,
                    input_shapes=nodes.get(name, _UNKNOWN).input_shapes)
           for name, node in executed.items()]
    return OpProfile(profiler=profiler, runs=runs, ops=ops, files=[raw, trace], trace=trace,
                     run_us=run_us, notes=_notes(skipped, averaging))


def _window(request: Any, feed: np.ndarray,
            runs: int) -> tuple[list[list[Any]], list[float], list[float]]:
    """The counters after the warm-up and after each profiled call, each call's start (µs from
    the first) and wall time."""
    request.get_input_tensor(0).data[...] = feed  # set once, as the runner's timed call does
    for _ in range(WARM_UP_CALLS):
        _infer(request)
    readings = [list(request.profiling_info)]
    starts: list[float] = []
    run_us: list[float] = []
    origin = time.perf_counter_ns()
    for _ in range(runs):
        starts.append((time.perf_counter_ns() - origin) / 1e3)
        run_us.extend(timed_runs(lambda _: _infer(request), feed, 1))
        # Read between calls, outside the timed one.
        readings.append(list(request.profiling_info))
    return readings, starts, run_us


def runtime_nodes(compiled: Any) -> dict[str, RuntimeNode]:
    """Node name -> its ONNX layers, input shapes and bytes, from the compiled model's runtime
    graph (the names ``profiling_info`` uses)."""
    nodes: dict[str, RuntimeNode] = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        original = (str(info["originalLayersNames"].astype(str))
                    if "originalLayersNames" in info else "")
        shapes = " ".join(str(port.get_partial_shape()) for port in op.inputs())
        nodes[str(op.get_friendly_name())] = RuntimeNode(
            original, shapes, _port_bytes([*op.inputs(), *op.outputs()]))
    return nodes


def _port_bytes(ports: list[Any]) -> float | None:
    """Bytes of the tensors at ``ports``, each once, at the element types the runtime graph
    declares (a kernel's internally repacked weights are not seen); None when one is dynamic."""
    total = 0
    for port in ports:
        shape = port.get_partial_shape()
        if not shape.is_static:
            return None
        count = 1
        for dim in shape.to_shape():
            count *= int(dim)
        total += count * int(port.get_element_type().bitwidth)
    return total / 8


def _infer(request: Any) -> None:
    # As the runner's timed call (OpenVinoRunner.bound_call) runs its request: the input set
    # once, a synchronous infer() on this thread.
    request.infer(share_outputs=True)


def _executed(entry: Any) -> bool:
    return bool(entry.status == entry.Status.EXECUTED)


def _microseconds(delta: Any) -> float:
    """A ``datetime.timedelta`` counter in microseconds."""
    return float(delta.total_seconds() * 1e6)


def _collect(readings: list[list[Any]],
             averaging: bool) -> tuple[dict[str, _Node], dict[str, str]]:
    """Executed nodes' readings by node name (in execution order), one value per reading, and
    the nodes never executed with their status. A name listed twice in one reading (an int8
    graph's split nodes) is summed; a node absent from a reading where others ran keeps its
    last running average there (``averaging``), else reads 0 for that run."""
    executed: dict[str, _Node] = {}
    seen: dict[str, str] = {}
    for index, reading in enumerate(readings):
        now: dict[str, tuple[float, float]] = {}
        for entry in reading:
            name = str(entry.node_name)
            if not _executed(entry):
                seen.setdefault(name, str(entry.status).rsplit(".", 1)[-1])
                continue
            executed.setdefault(name, _Node(str(entry.node_type), str(entry.exec_type)))
            real, cpu = now.get(name, (0.0, 0.0))
            now[name] = (real + _microseconds(entry.real_time), cpu + _microseconds(entry.cpu_time))
        for name, node in executed.items():
            while len(node.real_us) < index:  # first executed after the earlier readings
                node.real_us.append(0.0)
                node.cpu_us.append(0.0)
            previous = (node.real_us[-1], node.cpu_us[-1]) if node.real_us and averaging \
                else (0.0, 0.0)
            real, cpu = now.get(name, previous)
            node.real_us.append(real)
            node.cpu_us.append(cpu)
    skipped = {name: status for name, status in seen.items() if name not in executed}
    return executed, skipped


def _raw_document(profiler: str, run_us: list[float], executed: dict[str, _Node],
                  skipped: dict[str, str], nodes: dict[str, RuntimeNode],
                  averaging: bool) -> dict[str, Any]:
    def runtime(name: str) -> dict[str, Any]:
        node = nodes.get(name, _UNKNOWN)
        return {"original_layers": node.original_layers, "input_shapes": node.input_shapes,
                "bytes": node.bytes}

    return {"profiler": profiler, "runs": len(run_us), "run_us": run_us,
            "warm_up_calls": WARM_UP_CALLS,
            "readings": "after the warm-up, then after each profiled call",
            "counters": ("running average since compile (sum of whole µs // calls)" if averaging
                         else "the last call's"),
            "executed": [{"node_name": name, "node_type": node.node_type,
                          "exec_type": node.exec_type, **runtime(name),
                          "real_time_us": node.real_us, "cpu_time_us": node.cpu_us}
                         for name, node in executed.items()],
            "not_executed": [{"node_name": name, "status": status, **runtime(name)}
                             for name, status in skipped.items()]}


def _notes(skipped: dict[str, str], averaging: bool) -> list[str]:
    statuses = sorted(set(skipped.values()))
    notes = [
        "OpenVINO performance counters of a sibling compiled with the runner's properties and "
        "PERF_COUNT on; OpenVINO counts whole microseconds per node and call",
        f"{len(skipped)} nodes listed but not executed ({', '.join(statuses) or 'none'}: fused "
        f"into a neighbour, constants, reshapes without work) are left out",
        "names are OpenVINO's runtime nodes: the ONNX node name where OpenVINO kept it (a Conv "
        "with bias becomes '<name>/WithoutBiases', some nodes take their output tensor's name, "
        f"layout Reorders are OpenVINO's own); {RAW_FILE} maps each to the ONNX layers it runs "
        "(originalLayersNames)",
        "bytes: the node's input and output tensors in the runtime graph, each once, at the "
        "element types it declares (weights a kernel repacks internally are not seen)",
        "the trace's timeline is reconstructed from per-node times: OpenVINO gives durations, "
        "not start times, so each run's nodes are laid end to end from its measured start",
    ]
    if averaging:
        notes.append("the CPU plugin's counters are running averages since compile: node "
                     "times are the window's (calls x average after it, less before it), one "
                     "stream of the runner's threads per stream (its counters are per stream), "
                     "and the trace draws each node at its mean")
    return notes
