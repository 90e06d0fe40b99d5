"""The text panels of a profile page, as plain data: the header, the latency accounting, the
operators, the ``perf`` counters, call stacks and symbols, Nsight's kernels (:class:`TableInfo`
each, drawn by :func:`dse.report.page.table_html`) and the links to the profile's files."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

import pandas as pd

from dse.profiling import SUMMARY_FILE, NsightSection, PerfSection, ProfileSummary
from dse.report.table_info import TableInfo

# Past this many rows the operators table points at ops.csv: a page stays quick to open with a
# traced model of thousands of aten calls.
OP_ROWS = 1000
STACK_ROWS = 20
SYMBOL_ROWS = 30
KERNEL_ROWS = 50
# The operators table: (column of ops.*, heading, how a cell reads).
_OP_CELLS: tuple[tuple[str, str, str], ...] = (
    ("name", "operator", "text"), ("op_type", "type", "text"), ("where", "where", "text"),
    ("calls", "calls", "int"), ("ms_per_run", "ms per run", "num"),
    ("share", "share [%]", "pct"), ("us_per_call", "µs per call", "num"),
    ("flops", "FLOP per call", "num"), ("bytes", "bytes per call", "num"),
    ("intensity", "intensity [FLOP/B]", "num"), ("gflops", "attained [GFLOP/s]", "num"),
    ("gbs", "attained [GB/s]", "num"), ("verdict", "verdict", "text"),
    ("verdict_reason", "why", "text"), ("device_ms", "device ms (all runs)", "num"),
    ("input_shapes", "input shapes", "text"),
)
_KERNEL_FIRST = ("name", "kernel", "calls", "instances", "total_ms", "share")
# perf's names for the two counters whose ratio is instructions per cycle.
_CYCLES = ("cycles", "cpu-cycles", "cpu_core/cycles/")
_INSTRUCTIONS = ("instructions", "cpu_core/instructions/")


class AccountingInfo(NamedTuple):
    """Where the trial's latency goes: measured, unprofiled, profiled, operators, the rest."""

    table: TableInfo
    coverage: str
    """How much of the unprofiled latency the operators account for, and what is left, in words."""
    overhead: str
    """What the profiler itself costs, and how this process compares with the campaign's trial."""


class FileLink(NamedTuple):
    role: str
    name: str
    href: str
    """Relative to the page's folder, URL-quoted."""
    present: bool


def header_fields(summary: ProfileSummary) -> list[tuple[str, str]]:
    """What was profiled, where, with what and when."""
    device = summary.device if summary.device_id in ("", summary.device) \
        else f"{summary.device} ({summary.device_id})"
    candidate = summary.candidate
    profiler = summary.profiler or "none"
    if summary.profiler_missing:
        profiler += f" ({summary.profiler_missing})"
    fields = [("campaign", summary.campaign), ("device", device), ("trial", str(summary.trial)),
              ("backend", summary.backend), ("precision", summary.precision),
              ("batch size", str(summary.batch_size)), ("phase", summary.phase),
              ("knobs", _pairs(candidate.get("knobs"))),
              ("architecture", _pairs(candidate.get("arch"))),
              ("profiler", profiler), ("profiled runs", str(summary.runs)),
              ("profiled at", summary.created)]
    start, end = summary.window.get("start"), summary.window.get("end")
    if start is not None and end is not None:
        fields.append(("profiling window", f"{end - start:.1f} s"))
    return [(name, value) for name, value in fields if value]


def accounting_info(summary: ProfileSummary) -> AccountingInfo:
    """Every figure of the latency, each against the unprofiled p50 (the latency as measured);
    the unattributed remainder always has its row, unknown or negative as it may be."""
    base = summary.unprofiled_p50_ms
    profiler = summary.profiler or "the profiler"
    figures = [
        ("the trial's p50, as the campaign measured it", summary.trial_p50_ms),
        ("unprofiled p50 (plain calls of the same runner, in this process)", base),
        (f"profiled p50 (under {profiler}, its overhead included)", summary.profiled_p50_ms),
        ("operator time per run", summary.op_ms_per_run),
        ("unattributed remainder (unprofiled p50 − operator time)", summary.unattributed_ms),
    ]
    rows = [[name, "not measured" if value is None else f"{value:.4g}",
             "" if value is None or not base else f"{value / base:.1%}"]
            for name, value in figures]
    table = TableInfo(["figure", "ms per run", "of the unprofiled p50"], rows, None)
    return AccountingInfo(table, _coverage(summary), _overhead(summary))


def _coverage(summary: ProfileSummary) -> str:
    ops, base, rest = summary.op_ms_per_run, summary.unprofiled_p50_ms, summary.unattributed_ms
    if summary.coverage is None or ops is None or base is None:
        why = ((summary.profiler_missing and f"no per-operator table ({summary.profiler_missing})")
               or ("no operator time" if ops is None else "no unprofiled p50"))
        return f"Coverage unknown: {why}."
    rest = base - ops if rest is None else rest
    if rest < 0:
        return (f"The operators sum to {ops:.4g} ms per run, {-rest:.4g} ms more than the "
                f"unprofiled p50 of {base:.4g} ms (coverage {summary.coverage:.1%}): the "
                f"profiler's own work lengthens each operator, so per-operator times are upper "
                f"bounds and nothing is left unattributed.")
    return (f"The operators account for {summary.coverage:.1%} of the unprofiled p50 ({ops:.4g} "
            f"of {base:.4g} ms per run). The remaining {rest:.4g} ms ({rest / base:.1%}) is time "
            f"no operator claims: the runtime's own work between operators, input and output "
            f"copies, thread hand-offs, the call from Python.")


def _overhead(summary: ProfileSummary) -> str:
    parts = []
    base, profiled, trial = (summary.unprofiled_p50_ms, summary.profiled_p50_ms,
                             summary.trial_p50_ms)
    if base and profiled is not None:
        parts.append(f"Profiler overhead: calls under {summary.profiler or 'the profiler'} took "
                     f"{profiled:.4g} ms (p50) against {base:.4g} ms without it "
                     f"({profiled / base - 1:+.1%}); operator times carry part of that.")
    if base and trial is not None:
        parts.append(f"The campaign measured {trial:.4g} ms for this trial; the unprofiled p50 "
                     f"here is {base:.4g} ms ({base / trial - 1:+.1%} against it): another "
                     f"process and moment, and a profile's window is never a measurement.")
    return " ".join(parts)


def ops_table(ops: pd.DataFrame, why: str | None) -> TableInfo:
    """Every operator, most time first, with its roofline figures and verdict; columns empty for
    all operators (device time on a CPU) are left out."""
    if why is not None:
        return TableInfo([], [], why)
    shown = ops.head(OP_ROWS)
    cells = [(column, heading, kind) for column, heading, kind in _OP_CELLS
             if _filled(shown[column], kind)]
    rows = [[_cell(row[column], kind) for column, _, kind in cells]
            for row in shown.to_dict("records")]
    left = len(ops) - len(shown)
    note = f"{left} more operator(s), the least time, are in ops.csv." if left > 0 else ""
    return TableInfo([heading for _, heading, _ in cells], rows, None, note=note)


def counters_table(perf: PerfSection) -> TableInfo:
    """Each ``perf stat`` counter's value, or why it has none; instructions per cycle when both
    counters were read."""
    if not perf.counters:
        return TableInfo([], [], f"No perf counters: {perf.stat_missing or 'perf stat read none'}.")
    rows = [[c.name, "" if c.value is None else _number(c.value), c.unit,
             c.reason if c.value is None else ""] for c in perf.counters]
    values = {c.name: c.value for c in perf.counters if c.value is not None}
    cycles = next((values[n] for n in _CYCLES if values.get(n)), None)
    instructions = next((values[n] for n in _INSTRUCTIONS if n in values), None)
    if cycles and instructions is not None:
        rows.append(["instructions per cycle", f"{instructions / cycles:.3g}", "",
                     "derived: instructions / cycles"])
    return TableInfo(["counter", "value", "unit", "note"], rows, None)


def stacks_table(perf: PerfSection) -> TableInfo:
    """The most sampled call stacks, root first, as ``perf record`` saw them."""
    if not perf.stacks:
        return TableInfo([], [], f"No call stacks: {perf.record_missing or 'perf record sampled none'}.")
    rows = [[_number(_float(s.get("samples"))), " → ".join(str(s.get("stack", "")).split(";"))]
            for s in perf.stacks[:STACK_ROWS]]
    left = len(perf.stacks) - STACK_ROWS
    return TableInfo(["samples", "stack (root → leaf)"], rows, None,
                     note=f"{left} more stack(s) in the raw perf files." if left > 0 else "")


def symbols_table(perf: PerfSection) -> TableInfo:
    """The most sampled leaf functions."""
    if not perf.symbols:
        return TableInfo([], [], f"No symbols: {perf.record_missing or 'perf record sampled none'}.")
    rows = [[str(s.get("symbol", "")), _number(_float(s.get("samples"))),
             _cell(_float(s.get("share")), "pct")] for s in perf.symbols[:SYMBOL_ROWS]]
    return TableInfo(["symbol", "samples", "share [%]"], rows, None)


def kernels_table(nsight: NsightSection) -> TableInfo:
    """Nsight's per-kernel rows, columns as it gives them; else why there are none."""
    why = "; ".join(f"{tool}: {text}" for tool, text in
                    (("Nsight Systems", nsight.nsys_missing), ("Nsight Compute", nsight.ncu_missing))
                    if text)
    if not nsight.kernels:
        return TableInfo([], [], f"No Nsight kernels: {why or 'Nsight recorded none'}.")
    columns = _keys(nsight.kernels)
    rows = [[_any(kernel.get(column)) for column in columns]
            for kernel in nsight.kernels[:KERNEL_ROWS]]
    left = len(nsight.kernels) - KERNEL_ROWS
    notes = [f"{left} more kernel(s) in the Nsight reports." if left > 0 else "", why]
    return TableInfo(columns, rows, None, note=" ".join(n for n in notes if n))


def _keys(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Every key of the rows: the kernel's name and time first (the summary file stores keys
    sorted, so the order Nsight gave is lost), then the rest in the order first seen."""
    seen = dict.fromkeys(key for row in rows for key in row)
    first = [key for key in _KERNEL_FIRST if key in seen]
    return first + [key for key in seen if key not in first]


def _filled(column: pd.Series, kind: str) -> bool:
    if kind == "text":
        return bool((column != "").any())
    return bool(column.notna().any())


def _cell(value: Any, kind: str) -> str:
    if kind == "text":
        return str(value)
    number = _float(value)
    if not math.isfinite(number):
        return ""
    if kind == "int":
        return str(int(number))
    if kind == "pct":
        return f"{100 * number:.2f}"
    return f"{number:.4g}"


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _number(value: float) -> str:
    """A count in full (``1,234,567``), a fraction to four significant digits."""
    if not math.isfinite(value):
        return ""
    return f"{value:,.0f}" if value.is_integer() else f"{value:.4g}"


def _any(value: Any) -> str:
    if isinstance(value, float):
        return _number(value)
    return "" if value is None else str(value)


def file_links(folder: Path, summary: ProfileSummary, page_dir: Path) -> list[FileLink]:
    """The summary and every file it names, linked relative to ``page_dir``, present or not."""
    named = [("summary", SUMMARY_FILE), *summary.files.items()]
    seen: set[str] = set()
    links = []
    for role, name in named:
        if name in seen:
            continue
        seen.add(name)
        path = folder / name
        relative = os.path.relpath(path.absolute(), page_dir.absolute())
        links.append(FileLink(role, name, quote(Path(relative).as_posix()), path.is_file()))
    return links


def _pairs(values: object) -> str:
    if not isinstance(values, Mapping):
        return "" if values is None else str(values)
    return ", ".join(f"{key}={value}" for key, value in sorted(values.items(), key=_key))


def _key(item: tuple[Any, Any]) -> str:
    return str(item[0])
