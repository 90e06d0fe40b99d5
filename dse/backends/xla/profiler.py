"""XLA's own per-operator timing for ``dse profile``: the jax profiler's trace of the runner's calls.

``jax.profiler.trace`` records the process's XLA activity while the runner's own executable is
called ``runs`` times (no sibling: the trace needs nothing switched on at compile time). On a CPU
device, XLA's thunk executor records one event per thunk it runs — per instruction of the
optimised HLO's entry computation, a fusion being one — with ``hlo_module``, ``hlo_op`` and the
call's ``run_id`` in its arguments (checked with jax/jaxlib 0.10.2: ``convolution``,
``ynn_fusion``, ``bitcast_copy_fusion``...); its ``end: <op>`` events are the executor's
completion bookkeeping, not the op. The thunk events of the runner's module become one
:class:`~dse.backends.op_profile.OpRecord` per HLO instruction, typed from the optimised HLO
(``convolution``, ``fusion:kLoop``) with the shapes of its operands there.

The profiler's files (``.xplane.pb``, its Chrome trace and the Perfetto trace, gzipped) are kept
under fixed names; ``trace.json`` is the Perfetto trace unzipped. Only CPU devices are read: on
CUDA the per-op times are GPU kernel events of another shape, which this reader does not parse.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.backends.op_profile import OpProfile, OpRecord, ProfilerMissing, timed_runs
from dse.core import BuildError
from dse.util import atomic_write_text

PROFILER = "jax.profiler trace (XLA CPU thunk events per HLO instruction)"
TRACE_FILE = "trace.json"
WHERE = "XLA:CPU"
# The profiler's files (by how their names end, the Perfetto trace's first: its name ends as the
# Chrome trace's does) -> the names they are kept under.
RAW_FILES = {"perfetto_trace.json.gz": "xla.perfetto_trace.json.gz",
             ".xplane.pb": "xla.xplane.pb", ".trace.json.gz": "xla.trace.json.gz"}
_PERFETTO = "xla.perfetto_trace.json.gz"
_END_PREFIX = "end: "
_MODULE = re.compile(r"^HloModule\s+([\w.\-]+)")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>.+?)\s"
                          r"(?P<opcode>[a-z][a-z0-9\-]*)\((?P<operands>[^)]*)\)(?P<attrs>.*)$")
_OPERAND = re.compile(r"%([\w.\-]+)")
_KIND = re.compile(r"\bkind=(k\w+)")
_DIMS = re.compile(r"^\(?[a-z]\w*(\[[\d,]*\])")


@dataclass(frozen=True)
class Instruction:
    """An instruction of the optimised HLO's entry computation."""

    op_type: str
    dims: str
    operands: tuple[str, ...]


def hlo_module(text: str) -> tuple[str, dict[str, Instruction]]:
    """The module's name and its entry computation's instructions by name, from the optimised
    HLO text (``compiled.as_text()``)."""
    lines = text.splitlines()
    match = _MODULE.match(lines[0]) if lines else None
    if match is None:
        raise BuildError("xla: the compiled executable's HLO text names no HloModule")
    entry: dict[str, Instruction] = {}
    inside = False
    for line in lines:
        if line.startswith("ENTRY "):
            inside = True
        elif inside and line.startswith("}"):
            break
        elif inside and (found := _INSTRUCTION.match(line)):
            kind = _KIND.search(found["attrs"])
            opcode = found["opcode"] + (f":{kind[1]}" if kind and found["opcode"] == "fusion"
                                        else "")
            dims = _DIMS.match(found["shape"])
            entry[found["name"]] = Instruction(opcode, dims[1] if dims else "",
                                               tuple(_OPERAND.findall(found["operands"])))
    return match[1], entry


def profile_executable(run: Any, batch: Any, hlo_text: str, runs: int,
                       out_dir: Path) -> OpProfile:
    """Trace ``runs`` calls of ``run(batch)`` (the runner, warm) with the jax profiler; one record
    per HLO instruction of the module ``hlo_text`` describes."""
    import jax

    module, entry = hlo_module(hlo_text)
    run(batch)  # the call before the window: nothing left to compile or allocate in it
    with tempfile.TemporaryDirectory(dir=out_dir) as scratch:
        with jax.profiler.trace(scratch, create_perfetto_trace=True):
            run_us = timed_runs(run, batch, runs)
        files = _keep(Path(scratch), out_dir)
    if _PERFETTO not in {path.name for path in files}:
        raise ProfilerMissing(f"xla: the jax profiler wrote no Perfetto trace (it wrote "
                              f"{sorted(path.name for path in files)})")
    document = json.loads(gzip.decompress((out_dir / _PERFETTO).read_bytes()))
    events: list[dict[str, Any]] = document.get("traceEvents", [])
    trace = atomic_write_text(out_dir / TRACE_FILE, json.dumps(document))
    thunks = module_events(events, module)
    calls = {str(event["args"].get("run_id")) for event in thunks}
    if not thunks:
        raise ProfilerMissing(f"xla: the trace holds no per-op events of module {module!r} (jax "
                              f"{jax.__version__}); its XLA CPU runtime records none here")
    if len(calls) != runs:
        raise BuildError(f"xla: the trace holds op events of {len(calls)} executions of "
                         f"{module!r}, not the {runs} profiled calls")
    return OpProfile(f"{PROFILER}, jax {jax.__version__}", runs, op_records(thunks, entry),
                     files=files, trace=trace, run_us=run_us,
                     notes=_notes(events, thunks, module, entry, runs))


def _keep(scratch: Path, out_dir: Path) -> list[Path]:
    """The profiler's files, moved from its run folder into ``out_dir`` under fixed names."""
    kept: list[Path] = []
    for path in sorted(scratch.rglob("*")):
        for ending, name in RAW_FILES.items():
            if path.is_file() and path.name.endswith(ending):
                kept.append(Path(shutil.move(str(path), out_dir / name)))
                break
    return kept


def module_events(events: Iterable[Mapping[str, Any]], module: str) -> list[Mapping[str, Any]]:
    """The complete events of ``module``'s HLO instructions (thunks)."""
    return [event for event in events if event.get("ph") == "X"
            and isinstance(event.get("args"), dict) and event["args"].get("hlo_module") == module
            and "hlo_op" in event["args"] and not str(event.get("name", "")).startswith(_END_PREFIX)]


def op_records(thunks: Iterable[Mapping[str, Any]],
               entry: Mapping[str, Instruction]) -> list[OpRecord]:
    """One record per HLO instruction: its thunk events counted and their durations summed."""
    records: dict[str, OpRecord] = {}
    for event in thunks:
        name = str(event["args"]["hlo_op"])
        record = records.get(name)
        if record is None:
            known = entry.get(name)
            shapes = " ".join(entry[o].dims for o in known.operands if o in entry) if known else ""
            record = records[name] = OpRecord(name, known.op_type if known else "", 0, 0.0,
                                              where=WHERE, input_shapes=shapes)
        record.calls += 1
        record.total_us += float(event.get("dur", 0.0))
    return list(records.values())


def _notes(events: Sequence[Mapping[str, Any]], thunks: Sequence[Mapping[str, Any]], module: str,
           entry: Mapping[str, Instruction], runs: int) -> list[str]:
    threads = {(event.get("pid"), event.get("tid")) for event in thunks}
    ends = sum(float(event.get("dur", 0.0)) for event in events
               if str(event.get("name", "")).startswith(_END_PREFIX))
    notes = [f"rows are the HLO instructions of XLA's optimised module {module!r} (fusions "
             f"count as one), named as in its HLO; their time is the thunk's wall time on the "
             f"thread that ran it ({len(threads)} thread(s) here)",
             f"the executor's 'end: <op>' completion events ({ends / runs:.1f} us per run) are "
             f"not counted in any row"]
    if len(threads) > 1:
        notes.append("independent thunks may run at the same time on XLA's intra-op pool: the "
                     "summed row time can exceed a call's wall time")
    unknown = sorted({str(e["args"]["hlo_op"]) for e in thunks} - set(entry))
    if unknown:
        notes.append(f"not in the entry computation's HLO (no type or shapes): {unknown}")
    return notes
