"""LiteRT's own per-operator profiler for ``dse profile``, on a profiled sibling of the runner.

The runner is LiteRT's ``Interpreter``, which offers Python no profiler (ai-edge-litert 2.3:
no profiler argument, no per-op timing; ``experimental_force_delegate_node_profiling`` only
matters to a profiler installed from C++). The sibling is the same ``.tflite`` compiled by
LiteRT's ``CompiledModel`` through its C API (:mod:`dse.backends.litert.capi`) for the CPU with
the runner's settings — ``num_threads``, and XNNPACK, or LiteRT's builtin kernels alone for
``xnnpack: false`` — and LiteRT's profiler on. A few warm-up invocations, then the profiled
ones; the profiler records, per invocation:

- an ``Invoke`` event (the whole invocation; start and duration) and LiteRT's own run overhead
  around it (``LiteRT::Run[buffer registration]``, ``LiteRT::Run[Buffer sync]``);
- one operator event per ``.tflite`` op run on builtin kernels (tag: the op, ``CONV_2D``;
  metadata: its node index; start and duration);
- one event per XNNPACK operator, timed by XNNPACK itself (tag: XNNPACK's operator,
  ``Convolution (NHWC, F32) IGEMM``; metadata: its index in the delegate; duration only). These
  are XNNPACK's operators after its own rewrites, not the file's ops one for one.

Durations are whole microseconds, as LiteRT records them. Each operator becomes one
:class:`~dse.backends.op_profile.OpRecord`; the events are kept raw (JSON) and as a Chrome trace
in which operators without a start time follow the previous event of their invocation.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dse.backends.litert.capi import DISTRIBUTION, Event, ProfiledModel, release
from dse.backends.op_profile import OpProfile, OpRecord, timed_runs
from dse.backends.op_trace import TimedOp, op_event, run_event, write_json, write_trace
from dse.core import BuildError

PROFILER = "LiteRT profiler (CompiledModel C API: builtin ops and XNNPACK's per-operator times)"
RAW_FILE = "litert-profile-events.json"
TRACE_FILE = "trace.json"
# Invocations before the profiled ones: the first allocates and lets XNNPACK set up its runtime.
WARM_UP_CALLS = 3
INVOKE = "Invoke"
BUILTIN = "builtin"
XNNPACK = "XNNPACK"
# tflite::Profiler::EventType bits, as LiteRT's profiler reports them.
DEFAULT_EVENT = 1
OPERATOR_EVENT = 2
DELEGATE_OPERATOR_EVENT = 4
DELEGATE_PROFILED_EVENT = 8
_DELEGATE_EVENTS = DELEGATE_OPERATOR_EVENT | DELEGATE_PROFILED_EVENT


@dataclass
class Invocation:
    """The events of one profiled invocation: the ``Invoke`` event and the operators after it."""

    invoke: Event
    ops: list[Event] = field(default_factory=list)


@dataclass(frozen=True)
class Settings:
    """What the sibling is compiled with: the runner's threads and kernels."""

    threads: int
    xnnpack: bool


def profile_tflite(path: Path, feed: np.ndarray, output_shape: tuple[int, ...],
                   output_dtype: np.dtype[Any], settings: Settings, runs: int,
                   out_dir: Path) -> OpProfile:
    """Profile ``runs`` invocations of the sibling of ``path`` on ``feed`` (already in the
    input's dtype and shape); raw events and trace written into ``out_dir``."""
    version = release()
    with ProfiledModel(path, settings.threads, settings.xnnpack, feed, output_shape,
                       output_dtype) as model:
        for _ in range(WARM_UP_CALLS):
            model.run(feed)
        model.start()
        run_us = timed_runs(model.run, feed, runs)
        events = model.events()
    raw = write_json(out_dir / RAW_FILE, {
        "tflite": path.name, "threads": settings.threads,
        "kernels": XNNPACK if settings.xnnpack else BUILTIN, "warm_up_calls": WARM_UP_CALLS,
        "runs": runs, "event_types": {"1": "default", "2": "operator", "4": "delegate operator",
                                      "8": "delegate-profiled operator"},
        "events": [asdict(event) for event in events]})
    invocations = split_invocations(events)
    if len(invocations) != runs:
        raise BuildError(f"litert: LiteRT's profiler recorded {len(invocations)} invocations of "
                         f"the {runs} profiled runs (its event buffer may have dropped some)")
    named = named_ops(invocations)
    trace = write_trace(out_dir / TRACE_FILE, trace_events(invocations, named, events),
                        "LiteRT profiler events: invocations, builtin ops and LiteRT's run "
                        "overhead at their recorded start; XNNPACK operators (durations only) "
                        "laid end to end after the previous event of their invocation")
    return OpProfile(f"{PROFILER}, {DISTRIBUTION} {version}", runs, op_records(named),
                     files=[raw], trace=trace, run_us=run_us,
                     notes=_notes(settings, named, events, runs))


def split_invocations(events: Sequence[Event]) -> list[Invocation]:
    """The recorded events by invocation: each ``Invoke`` default event opens one, and the
    operator events after it are its operators."""
    invocations: list[Invocation] = []
    for event in events:
        if event.event_type == DEFAULT_EVENT and event.tag == INVOKE:
            invocations.append(Invocation(event))
        elif event.event_type & (OPERATOR_EVENT | _DELEGATE_EVENTS) and invocations:
            invocations[-1].ops.append(event)
    return invocations


@dataclass(frozen=True)
class NamedOp:
    """One operator event with the operator it belongs to."""

    name: str
    op_type: str
    where: str
    event: Event


def named_ops(invocations: Sequence[Invocation]) -> list[list[NamedOp]]:
    """Each invocation's operator events, named. A builtin op is named by its tag and ``.tflite``
    node index; an XNNPACK operator by its tag and index in the delegate, and by its delegate
    partition when there are several (indices restart in each: a partition ends where a builtin
    op runs or the index does not grow)."""
    partitioned = [_partitions(invocation.ops) for invocation in invocations]
    several = any(part > 0 for parts in partitioned for _, part in parts)
    named: list[list[NamedOp]] = []
    for parts in partitioned:
        row: list[NamedOp] = []
        for event, part in parts:
            if event.event_type & OPERATOR_EVENT:
                row.append(NamedOp(f"{event.tag} (node {event.metadata1})", event.tag, BUILTIN,
                                   event))
                continue
            suffix = f" (partition {part + 1})" if several else ""
            row.append(NamedOp(f"{event.tag} #{event.metadata1}{suffix}", event.tag, XNNPACK,
                               event))
        named.append(row)
    return named


def _partitions(ops: Sequence[Event]) -> list[tuple[Event, int]]:
    out: list[tuple[Event, int]] = []
    part, last = -1, None  # last: the previous event's delegate index, None after a builtin op
    for event in ops:
        if not event.event_type & _DELEGATE_EVENTS:
            out.append((event, part))
            last = None
            continue
        if last is None or event.metadata1 <= last:
            part += 1
        last = event.metadata1
        out.append((event, part))
    return out


def op_records(named: Sequence[Sequence[NamedOp]]) -> list[OpRecord]:
    """One record per operator name: its calls and summed durations over the invocations."""
    records: dict[str, OpRecord] = {}
    for row in named:
        for op in row:
            record = records.get(op.name)
            if record is None:
                record = records[op.name] = OpRecord(op.name, op.op_type, 0, 0.0, where=op.where)
            record.calls += 1
            record.total_us += float(op.event.elapsed_us)
    return list(records.values())


def trace_events(invocations: Sequence[Invocation], named: Sequence[Sequence[NamedOp]],
                 events: Sequence[Event]) -> list[dict[str, Any]]:
    """Chrome trace events, microseconds from the first invocation's start."""
    origin = invocations[0].invoke.start_us if invocations else 0
    out: list[dict[str, Any]] = []
    for index, (invocation, row) in enumerate(zip(invocations, named, strict=True)):
        at = invocation.invoke.start_us - origin
        out.append(run_event(index, at, float(invocation.invoke.elapsed_us)))
        for op in row:
            if op.event.start_us:  # builtin ops carry their start; XNNPACK's follow the last event
                at = op.event.start_us - origin
            timed = TimedOp(op.name, op.op_type, float(op.event.elapsed_us), {"where": op.where})
            out.append(op_event(timed, at, index))
            at += op.event.elapsed_us
    starts = [invocation.invoke.start_us for invocation in invocations]
    for event in _overhead(events):
        timed = TimedOp(event.tag, "runtime", float(event.elapsed_us))
        out.append(op_event(timed, event.start_us - origin, _nearest(starts, event.start_us)))
    return out


def _nearest(starts: Sequence[int], at: int) -> int:
    """The index of the invocation that starts nearest ``at`` (``starts`` ascending)."""
    right = bisect.bisect_left(starts, at)
    if right == 0:
        return 0
    if right == len(starts) or at - starts[right - 1] <= starts[right] - at:
        return right - 1
    return right


def _overhead(events: Sequence[Event]) -> list[Event]:
    """LiteRT's own timed work around each invocation (buffer registration and sync)."""
    return [event for event in events if event.event_type == DEFAULT_EVENT
            and event.tag != INVOKE and event.start_us]


def _notes(settings: Settings, named: Sequence[Sequence[NamedOp]], events: Sequence[Event],
           runs: int) -> list[str]:
    kernels = (f"XNNPACK with {settings.threads} thread(s), the ops it does not take on "
               f"builtin kernels" if settings.xnnpack else
               f"LiteRT's builtin kernels only (kernel_mode builtin), {settings.threads} thread(s)")
    notes = [f"profiled on a sibling of the runner: the same .tflite compiled by LiteRT's "
             f"CompiledModel (its C API, through ctypes) for the CPU with {kernels}; the runner "
             f"measured is LiteRT's Interpreter, whose Python API has no profiler",
             "LiteRT records whole microseconds: an operator under 1 us a call may read 0"]
    if any(op.where == XNNPACK for row in named for op in row):
        notes.append("XNNPACK rows are XNNPACK's own operators (after its fusions and layout "
                     "changes), timed by XNNPACK and named by their index in the delegate; they "
                     "do not map one to one onto the .tflite's ops")
    overhead = sum(event.elapsed_us for event in _overhead(events))
    invoke = sum(event.elapsed_us for event in events
                 if event.event_type == DEFAULT_EVENT and event.tag == INVOKE)
    notes.append(f"per run, LiteRT's Invoke took {invoke / runs:.1f} us and its run overhead "
                 f"outside it (buffer registration and sync) {overhead / runs:.1f} us; "
                 f"neither is an operator row")
    return notes
