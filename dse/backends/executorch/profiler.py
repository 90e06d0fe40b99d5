"""ExecuTorch's own per-operator profiler for ``dse profile``: ETDump, its event tracer.

The runner's program was loaded without the tracer, so the profile loads a sibling of it: the
same ``.pte`` through the same ``executorch.runtime`` route with ``enable_etdump=True``, on the
runner's thread pool. A few warm-up executions, then the profiled ones; the program writes its
ETDump (``write_etdump_result_to_file``), kept as the raw file and read with ExecuTorch's own
deserializer (``executorch.devtools.etdump.serialize``). Each ``forward`` execution is one
``Execute`` block of profile events (start and end in the runtime's ticks: nanoseconds on Linux,
as ExecuTorch's Inspector takes them):

- ``Method::execute``: the whole execution (the run; not an operator row);
- ``DELEGATE_CALL``: one call into a delegate (XNNPACK), around the delegate's own events;
- the delegate's events, named by their ``delegate_debug_id_str``: with the XNNPACK profiling
  the installed wheel was built with, one per XNNPACK operator (``Convolution (NHWC, F32)
  IGEMM #1``), timed by XNNPACK in whole microseconds and placed end to end by it;
- ``OPERATOR_CALL``: one instruction running an ExecuTorch (portable) kernel, around its
  ``native_call_<op>`` event, the kernel itself.

Operator rows are the XNNPACK operators and the kernels. A delegate call or kernel instruction
becomes a row only when nothing inside it was recorded, so no time is counted twice; what the
wrappers spend beyond their contents is said in the notes.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.backends.op_profile import OpProfile, OpRecord, ProfilerMissing, timed_runs
from dse.backends.op_trace import TimedOp, op_event, run_event, write_trace
from dse.core import BuildError

PROFILER = "ExecuTorch ETDump (event tracer)"
RAW_FILE = "executorch.etdump"
DEBUG_FILE = "executorch-debug.bin"  # named to the runtime; nothing is written with no debug buffer
TRACE_FILE = "trace.json"
# Executions before the profiled ones: the first sets up XNNPACK's runtime and the caches.
WARM_UP_CALLS = 3
EXECUTE_BLOCK = "Execute"
METHOD_EXECUTE = "Method::execute"
DELEGATE_CALL = "DELEGATE_CALL"
OPERATOR_CALL = "OPERATOR_CALL"
KERNEL_PREFIX = "native_call_"
PORTABLE = "portable"
_TICKS_PER_US = 1000.0  # ExecuTorch's PAL ticks are nanoseconds on Linux
# Delegate backend ids (the .pte's) -> the ``where`` of their operators.
_WHERE = {"XnnpackBackend": "XNNPACK"}


@dataclass(frozen=True)
class TimedEvent:
    """One profile event of one execution: times in microseconds of the runtime's clock."""

    name: str
    instruction: int
    start_us: float
    dur_us: float
    delegated: bool


def profile_program(path: Path, tensor: Any, delegates: Sequence[str], runs: int,
                    out_dir: Path) -> OpProfile:
    """Profile ``runs`` executions of ``path``'s ``forward`` on ``tensor``; the caller holds
    ExecuTorch's thread pool at the runner's size. ``delegates``: the backend ids the program
    delegates to (from its plan)."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(path, enable_etdump=True)
    method = program.load_method("forward")

    def run(feed: Any) -> Any:
        return method.execute([feed])

    for _ in range(WARM_UP_CALLS):
        run(tensor)
    run_us = timed_runs(run, tensor, runs)
    raw = out_dir / RAW_FILE
    try:
        program.write_etdump_result_to_file(str(raw), str(out_dir / DEBUG_FILE))
    except RuntimeError as exc:
        raise ProfilerMissing(f"executorch: the runtime wrote no ETDump ({exc}); its Python "
                              f"bindings were built without the event tracer") from exc
    executions = read_executions(raw) if raw.exists() else []
    if not executions:
        raise ProfilerMissing("executorch: the ETDump holds no execution events: the installed "
                              "runtime was built without the event tracer "
                              "(EXECUTORCH_ENABLE_EVENT_TRACER)")
    if len(executions) != WARM_UP_CALLS + runs:
        raise BuildError(f"executorch: the ETDump holds {len(executions)} executions, not the "
                         f"{WARM_UP_CALLS} warm-up and {runs} profiled ones")
    profiled = executions[WARM_UP_CALLS:]
    where = _where(delegates)
    rows = operator_rows(profiled, where)
    trace = write_trace(out_dir / TRACE_FILE, trace_events(profiled, rows),
                        "ExecuTorch ETDump profile events at their recorded times (XNNPACK's "
                        "operators as ExecuTorch's XNNPACK profiler placed them)")
    version = importlib.metadata.version("executorch")
    return OpProfile(f"{PROFILER}, executorch {version}", runs, op_records(profiled, rows),
                     files=[raw], trace=trace, run_us=run_us,
                     notes=_notes(profiled, rows, where, runs))


def read_executions(path: Path) -> list[list[TimedEvent]]:
    """The profile events of each ``Execute`` block of the ETDump at ``path``, in order."""
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    etdump = deserialize_from_etdump_flatcc(path.read_bytes())
    out: list[list[TimedEvent]] = []
    for block in etdump.run_data:
        if block.name != EXECUTE_BLOCK:
            continue
        events: list[TimedEvent] = []
        for event in block.events:
            profile = event.profile_event
            if profile is None:
                continue
            label = profile.delegate_debug_id_str
            if label is None and profile.delegate_debug_id_int >= 0:
                label = str(profile.delegate_debug_id_int)
            name = label if label is not None else str(profile.name)
            events.append(TimedEvent(name, int(profile.instruction_id),
                                     profile.start_time / _TICKS_PER_US,
                                     (profile.end_time - profile.start_time) / _TICKS_PER_US,
                                     label is not None))
        out.append(events)
    return out


@dataclass(frozen=True)
class Row:
    """An event that is an operator row: its name, type and where it ran."""

    name: str
    op_type: str
    where: str


def operator_rows(executions: Sequence[Sequence[TimedEvent]],
                  where: str) -> dict[tuple[str, int], Row]:
    """(event name, instruction) -> its row, for the events that are operators (see module)."""
    inner = {(e.instruction, e.delegated or e.name.startswith(KERNEL_PREFIX))
             for events in executions for e in events}
    # A delegate numbers its operators per call: with several delegate calls, they are told apart.
    several = len({e.instruction for events in executions for e in events if e.delegated}) > 1
    rows: dict[tuple[str, int], Row] = {}
    for events in executions:
        for e in events:
            key = (e.name, e.instruction)
            if e.delegated:
                suffix = f" (instruction {e.instruction})" if several else ""
                rows[key] = Row(e.name + suffix, e.name.rsplit(" #", 1)[0], where)
            elif e.name.startswith(KERNEL_PREFIX):
                op = e.name[len(KERNEL_PREFIX):]
                rows[key] = Row(f"{op} (instruction {e.instruction})", op, PORTABLE)
            elif e.name == DELEGATE_CALL and (e.instruction, True) not in inner:
                rows[key] = Row(f"{DELEGATE_CALL} (instruction {e.instruction})", DELEGATE_CALL,
                                where)
            elif e.name == OPERATOR_CALL and (e.instruction, True) not in inner:
                rows[key] = Row(f"{OPERATOR_CALL} (instruction {e.instruction})", OPERATOR_CALL,
                                PORTABLE)
    return rows


def op_records(executions: Sequence[Sequence[TimedEvent]],
               rows: dict[tuple[str, int], Row]) -> list[OpRecord]:
    """One record per operator row: its calls and summed durations over the executions."""
    records: dict[str, OpRecord] = {}
    for events in executions:
        for e in events:
            row = rows.get((e.name, e.instruction))
            if row is None:
                continue
            record = records.get(row.name)
            if record is None:
                record = records[row.name] = OpRecord(row.name, row.op_type, 0, 0.0,
                                                      where=row.where)
            record.calls += 1
            record.total_us += e.dur_us
    return list(records.values())


def _where(delegates: Sequence[str]) -> str:
    names = sorted({_WHERE.get(backend, backend) for backend in delegates})
    return "/".join(names) if names else "delegate"


def trace_events(executions: Sequence[Sequence[TimedEvent]],
                 rows: dict[tuple[str, int], Row]) -> list[dict[str, Any]]:
    """Chrome trace events, microseconds from the first profiled execution's start."""
    starts = [e.start_us for events in executions for e in events if e.name == METHOD_EXECUTE]
    origin = min(starts) if starts else 0.0
    out: list[dict[str, Any]] = []
    for index, events in enumerate(executions):
        for e in events:
            if e.name == METHOD_EXECUTE:
                out.append(run_event(index, e.start_us - origin, e.dur_us))
                continue
            row = rows.get((e.name, e.instruction))
            name, op_type = (row.name, row.op_type) if row else (e.name, "instruction")
            args = {"instruction": e.instruction, "where": row.where if row else ""}
            out.append(op_event(TimedOp(name, op_type, e.dur_us, args), e.start_us - origin,
                                index))
    return out


def _notes(executions: Sequence[Sequence[TimedEvent]], rows: dict[tuple[str, int], Row],
           where: str, runs: int) -> list[str]:
    def total(names: set[str]) -> float:
        return sum(e.dur_us for events in executions for e in events
                   if e.name in names and (e.name, e.instruction) not in rows)

    inside = sum(e.dur_us for events in executions for e in events
                 if (e.name, e.instruction) in rows)
    notes = ["profiled on a sibling of the runner: the same .pte loaded by executorch.runtime "
             "with ETDump on, on the runner's thread pool"]
    delegated = [row for row in rows.values() if row.where == where and row.op_type != DELEGATE_CALL]
    if delegated:
        notes.append(f"{where} rows are {where}'s own operators (after its fusions and layout "
                     f"changes), timed by it in whole microseconds (an operator under 1 us a "
                     f"call may read 0), named as ExecuTorch's XNNPACK profiler names them")
    wrappers = total({DELEGATE_CALL, OPERATOR_CALL})
    execute = total({METHOD_EXECUTE})
    notes.append(f"per run: Method::execute {execute / runs:.1f} us; the delegate calls and "
                 f"kernel instructions that hold the operator rows {wrappers / runs:.1f} us, "
                 f"the operator rows themselves {inside / runs:.1f} us")
    return notes
