"""Raw files of a backend profiler as dse writes them: JSON documents and Chrome/Perfetto traces
(the Trace Event Format's complete events, ``"ph": "X"``), shared by the backends whose profilers
give numbers rather than files of their own (OpenVINO's performance counters, TVM's VM
instrument, TensorRT's layer profiler).

A profiler that gives each operator's duration but no start time (OpenVINO, TensorRT) gets a
reconstructed timeline: each run starts where it was measured to start from outside, and its
operators follow one another from there in the order the profiler listed them, without gaps.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.util import atomic_write_text

# Trace rows: the profiled calls as seen from outside, and the operators inside them.
RUN_TID = 0
OP_TID = 1


@dataclass(frozen=True)
class TimedOp:
    """One operator call in one run: name, type, duration and what else the trace should show."""

    name: str
    op_type: str
    dur_us: float
    args: Mapping[str, Any] = field(default_factory=dict)


def write_json(path: Path, document: Any) -> Path:
    """``document`` as indented JSON at ``path``, atomically."""
    return atomic_write_text(path, json.dumps(document, indent=1, default=str) + "\n")


def run_event(index: int, start_us: float, dur_us: float) -> dict[str, Any]:
    """The complete event of one profiled ``run`` call, on the runs' row."""
    return {"name": f"run {index}", "cat": "run", "ph": "X", "ts": start_us, "dur": dur_us,
            "pid": 0, "tid": RUN_TID, "args": {"run": index}}


def op_event(op: TimedOp, start_us: float, run: int) -> dict[str, Any]:
    """The complete event of one operator call, on the operators' row."""
    return {"name": op.name, "cat": op.op_type, "ph": "X", "ts": start_us, "dur": op.dur_us,
            "pid": 0, "tid": OP_TID, "args": {"run": run, **op.args}}


def sequential_events(run_starts_us: Sequence[float], run_us: Sequence[float],
                      runs: Sequence[Sequence[TimedOp]]) -> list[dict[str, Any]]:
    """Trace events of profiled runs whose operators have durations only: each run's operators
    laid end to end from the run's measured start (see the module)."""
    events: list[dict[str, Any]] = []
    for index, (start, wall, ops) in enumerate(zip(run_starts_us, run_us, runs, strict=True)):
        events.append(run_event(index, start, wall))
        at = start
        for op in ops:
            events.append(op_event(op, at, index))
            at += op.dur_us
    return events


def write_trace(path: Path, events: Iterable[Mapping[str, Any]], source: str) -> Path:
    """A Chrome/Perfetto trace of ``events`` (timestamps in microseconds) at ``path``;
    ``source`` says how its timeline was made, in the trace's ``otherData``."""
    names = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}}
             for tid, name in ((RUN_TID, "runs"), (OP_TID, "operators"))]
    return write_json(path, {"traceEvents": [*names, *(dict(event) for event in events)],
                             "displayTimeUnit": "ms", "otherData": {"source": source}})
