"""TVM's per-operator timing for ``dse profile``: the Relax VM's instrument hook around every call
it makes.

apache-tvm 0.27 has no VM profiler: the Relax VM's ``profile`` mode and
``tvm.runtime.profiling.Report`` of earlier releases are gone (``tvm/runtime/vm.py`` has no
``profile``, there is no ``tvm.runtime.profiling``, and ``src/runtime/vm`` no profiler). What the
VM keeps is ``VirtualMachine.set_instrument(f)``: ``f(func, func_symbol, before_run, ret_value,
*args)`` is called before and after every Call instruction (``RunInstrCall`` in
``src/runtime/vm/vm.cc``), with the callee's symbol and its arguments. The time between the end
of the "before" call and the start of the "after" call is the callee's own, our Python callback
left out; on a GPU the device is synchronised on both sides, since kernels launch asynchronously
(the earlier profiler timed device calls the same way, with the device's timers).

Each callee is one record, as the old report had them: the compiled kernels (TIR PrimFuncs named
by Relax's legalization and fusion: ``conv2d``, ``fused_conv2d_add_relu``, ``matmul1``; TVM's
names, not the ONNX graph's) and the VM's builtins (``vm.builtin.alloc_tensor``, ...). A
kernel's arguments are its inputs and outputs (destination-passing style), so their shapes and
sizes are the call's shapes and bytes; its FLOPs are TVM's estimate from the kernel's TIR where
the caller can give it.
"""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.backends.op_profile import OpProfile, OpRecord, timed_runs
from dse.backends.op_trace import TimedOp, op_event, run_event, write_json, write_trace
from dse.util import atomic_write_text

CALLS_FILE = "tvm-vm-calls.json"
TABLE_FILE = "tvm-vm-profile.csv"
TRACE_FILE = "trace.json"
BUILTIN_PREFIX = "vm."
# Calls before the profiled ones: the VM's pooled allocator fills on the first.
WARM_UP_CALLS = 2
# Passes that schedule TIR (DLight's default GPU schedules): FLOPs are counted before them.
SCHEDULING_PASSES = frozenset({"ApplyDefaultSchedule"})
_DTYPE_BITS = re.compile(r"(\d+)(?:x(\d+))?$")


@dataclass(frozen=True)
class Call:
    """One timed VM call: its callee, the run it was in, its start (µs from the first run's
    start) and duration."""

    symbol: str
    run: int
    start_us: float
    dur_us: float


@dataclass
class CallFacts:
    """What a callee's arguments say: shapes as text, and the bytes of its tensor arguments
    (None for a builtin, whose arguments are not data it reads and writes)."""

    shapes: str
    bytes: float | None


@dataclass
class _Recorder:
    """The instrument: timestamps around each call, shapes on a callee's first call."""

    sync: Callable[[], None] | None
    run: int = -1
    origin_ns: int = 0
    calls: list[Call] = field(default_factory=list)
    facts: dict[str, CallFacts] = field(default_factory=dict)
    nested: set[str] = field(default_factory=set)
    _open: list[tuple[str, int, bool]] = field(default_factory=list)

    def __call__(self, func: Any, symbol: Any, before: Any, ret: Any, *args: Any) -> int:
        name = str(symbol)
        if before:
            if name not in self.facts:
                self.facts[name] = _facts(name, args)
            if self._open:  # the caller is a VM function, whose time includes this call
                caller = self._open[-1]
                self._open[-1] = (caller[0], caller[1], True)
            if self.sync is not None:
                self.sync()
            self._open.append((name, time.perf_counter_ns(), False))
            return 0
        if self.sync is not None:
            self.sync()
        end = time.perf_counter_ns()
        opened, start, has_calls = self._open.pop()
        if has_calls:
            self.nested.add(opened)
        elif self.run >= 0:
            self.calls.append(Call(opened, self.run, (start - self.origin_ns) / 1e3,
                                   (end - start) / 1e3))
        return 0


def profile_vm(machine: Any, call: Callable[[Any], Any], feed: Any, runs: int, out_dir: Path, *,
               profiler: str, where: str, sync: Callable[[], None] | None,
               flops: Mapping[str, float]) -> OpProfile:
    """Time every call of ``machine`` (a fresh Relax VM) while ``call(feed)`` runs it, ``runs``
    times after a warm-up; ``flops``: kernel name -> estimated FLOPs per call."""
    recorder = _Recorder(sync)
    machine.set_instrument(recorder)
    for _ in range(WARM_UP_CALLS):
        call(feed)
    run_us: list[float] = []
    starts: list[float] = []
    recorder.origin_ns = time.perf_counter_ns()
    for index in range(runs):
        recorder.run = index
        starts.append((time.perf_counter_ns() - recorder.origin_ns) / 1e3)
        run_us.extend(timed_runs(call, feed, 1))
    recorder.run = -1
    ops = _records(recorder, where, flops)
    files = [write_json(out_dir / CALLS_FILE, _calls_document(profiler, run_us, recorder)),
             atomic_write_text(out_dir / TABLE_FILE, _table(ops, runs))]
    trace = write_trace(out_dir / TRACE_FILE, [
        *(run_event(index, start, wall) for index, (start, wall) in
          enumerate(zip(starts, run_us, strict=True))),
        *(op_event(TimedOp(item.symbol, op_type(item.symbol), item.dur_us), item.start_us,
                   item.run) for item in recorder.calls)],
        "TVM Relax VM instrument: each call's measured start and end")
    return OpProfile(profiler=profiler, runs=runs, ops=ops, files=[*files, trace], trace=trace,
                     run_us=run_us, notes=_notes(recorder, sync is not None))


def op_type(symbol: str) -> str:
    """A callee's operator type: a builtin's full name, a kernel's name without the number
    Relax appends to tell same-named kernels apart (``conv2d1`` -> ``conv2d``)."""
    if symbol.startswith(BUILTIN_PREFIX):
        return symbol
    return symbol.rstrip("0123456789") or symbol


def lowered_flops(pipeline: Callable[[Any], Any], module: Any) -> dict[str, float]:
    """Kernel name -> TVM's FLOP estimate of one call, from ``module`` lowered by ``pipeline``
    (call it inside the target's scope). Counted before the pipeline's first scheduling pass,
    when there is one: a GPU schedule binds loops to padded thread blocks, and the count of
    scheduled TIR grows with the padding (measured: a 4x512x10 matmul counted 2.1 MFLOP
    scheduled, 41 kFLOP before). Scheduling renames nothing, so the names are the kernels'."""
    import tvm

    unscheduled: dict[str, float] = {}

    class BeforeScheduling:
        def run_before_pass(self, mod: Any, info: Any) -> None:
            if str(info.name) in SCHEDULING_PASSES and not unscheduled:
                unscheduled.update(primfunc_flops(mod))

    instrument = tvm.instrument.pass_instrument(BeforeScheduling)()
    with tvm.transform.PassContext(instruments=[instrument]):
        lowered = pipeline(module)
    return unscheduled or primfunc_flops(lowered)


def primfunc_flops(module: Any) -> dict[str, float]:
    """Kernel name -> TVM's FLOP estimate of one call, for the TIR functions of a lowered
    module (``tvm.s_tir.analysis.estimate_tir_flops``, 0.27's home of the TIR analyses)."""
    from tvm.ir import IRModule
    from tvm.s_tir.analysis import estimate_tir_flops
    from tvm.tirx import PrimFunc

    estimates: dict[str, float] = {}
    for var, func in module.functions.items():
        if isinstance(func, PrimFunc):
            try:
                estimates[str(var.name_hint)] = float(estimate_tir_flops(IRModule({var: func})))
            except (RuntimeError, ValueError):
                # TVM's errors come through its FFI as these; a kernel whose loops it cannot
                # count keeps flops unknown rather than failing the profile.
                continue
    return estimates


def _facts(symbol: str, args: tuple[Any, ...]) -> CallFacts:
    tensors = [arg for arg in args if hasattr(arg, "shape") and hasattr(arg, "dtype")]
    shapes = " ".join(f"{arg.dtype}[{','.join(str(int(d)) for d in arg.shape)}]"
                      for arg in tensors)
    if symbol.startswith(BUILTIN_PREFIX):
        return CallFacts(shapes, None)
    return CallFacts(shapes, float(sum(_nbytes(arg) for arg in tensors)))


def _nbytes(tensor: Any) -> int:
    count = 1
    for dim in tensor.shape:
        count *= int(dim)
    match = _DTYPE_BITS.search(str(tensor.dtype))
    bits = int(match.group(1)) * int(match.group(2) or 1) if match else 8  # bool: a byte
    return count * max(bits, 8) // 8


def _records(recorder: _Recorder, where: str, flops: Mapping[str, float]) -> list[OpRecord]:
    totals: dict[str, list[float]] = {}
    for item in recorder.calls:
        totals.setdefault(item.symbol, []).append(item.dur_us)
    records = []
    for symbol, times in totals.items():
        facts = recorder.facts.get(symbol, CallFacts("", None))
        builtin = symbol.startswith(BUILTIN_PREFIX)
        records.append(OpRecord(name=symbol, op_type=op_type(symbol), calls=len(times),
                                total_us=float(sum(times)),
                                where="relax VM" if builtin else where,
                                flops=None if builtin else flops.get(symbol),
                                bytes=facts.bytes, input_shapes=facts.shapes))
    return records


def _calls_document(profiler: str, run_us: list[float], recorder: _Recorder) -> dict[str, Any]:
    return {"profiler": profiler, "runs": len(run_us), "run_us": run_us,
            "callees": {name: {"argument_shapes": facts.shapes, "bytes": facts.bytes}
                        for name, facts in recorder.facts.items()},
            "not_timed_callers": sorted(recorder.nested),
            "calls": [{"symbol": item.symbol, "run": item.run, "start_us": item.start_us,
                       "dur_us": item.dur_us} for item in recorder.calls]}


def _table(ops: list[OpRecord], runs: int) -> str:
    """The per-callee table in the columns of TVM's former profiling report."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["Name", "Duration (us)", "Percent", "Device", "Count", "Argument Shapes"])
    total = sum(op.total_us for op in ops) or 1.0
    for op in sorted(ops, key=lambda item: -item.total_us):
        writer.writerow([op.name, f"{op.total_us / runs:.3f}", f"{100 * op.total_us / total:.2f}",
                         op.where, op.calls // runs if runs else op.calls, op.input_shapes])
    return buffer.getvalue()


def _notes(recorder: _Recorder, synced: bool) -> list[str]:
    notes = [
        "timed by the Relax VM's instrument hook (apache-tvm 0.27 has no VM profiler): each "
        "VM call's time is its own plus the hook's crossing out of and back into Python "
        "(about half a microsecond: most of a builtin's row); the callback itself (a few µs a "
        "call) is in run_us, unattributed",
        "names are TVM's kernels (TIR functions named by legalization and fusion, such as "
        "fused_conv2d_add_relu), not ONNX node names; vm.* rows are the VM's builtins",
        "flops: TVM's estimate from each kernel's TIR; bytes: the kernel's tensor arguments "
        "(its inputs and outputs, each once)",
    ]
    if synced:
        notes.append("the device was synchronised before and after every call, so each "
                     "kernel's time is its own and launches no longer overlap")
    if recorder.nested:
        notes.append(f"calls into VM functions ({', '.join(sorted(recorder.nested))}) are "
                     f"left out: their time is that of the calls they make, which are counted")
    return notes
