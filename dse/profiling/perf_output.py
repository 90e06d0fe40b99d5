"""What perf writes, read: the counters of ``perf stat -x,`` CSV (with the IPC derived from them),
the call stacks of ``perf script`` folded into flame-graph lines and their most sampled stacks and
leaf symbols, and the line of perf's stderr that says what went wrong.

Pure functions on text, no perf run here (:mod:`dse.profiling.perf` runs it); tested on perf's
real output under ``tests/fixtures/perf/``.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from dse.profiling.summary import PerfCounter

TOP = 20
"""How many stacks and leaf symbols the section keeps (the folded file keeps them all)."""
# What perf prints in place of a value it could not give.
_NO_VALUES = ("<not supported>", "<not counted>")
_TIME = re.compile(r"^\d+\.\d+:$")
# perf's own chatter on stderr, never the reason something failed.
_CHATTER = ("Events disabled", "Events enabled", "[ perf record:", "Usage:", "-p, --pid",
            "-t, --tid", "-e, --event", "#")


def first_error_line(text: str) -> str:
    """The line of perf's stderr that says what went wrong ("" when none does): the one after
    its ``Error:`` heading where there is one (warnings come before it), else the first that is
    not perf's chatter or usage text."""
    lines = [line.strip() for line in text.splitlines()]
    if "Error:" in lines:
        lines = lines[lines.index("Error:") + 1:]
    for line in lines:
        if line.startswith("Error:") and len(line) > len("Error:"):
            return line[len("Error:"):].strip()[:300]
        if line and not line.startswith(_CHATTER):
            return line[:300]
    return ""


# ---------------------------------------------------------------- perf stat -x, (CSV) output


def parse_perf_stat_csv(text: str, sep: str = ",") -> list[PerfCounter]:
    """The counters of ``perf stat -x<sep>`` output, in its order.

    A line is ``value,unit,event,run time,run %,metric value,metric unit``; ``# started on``
    comments, blank lines and metric-only continuation lines (no event) are skipped. A
    ``<not supported>`` / ``<not counted>`` value becomes ``value=None`` with that reason. A
    counted value's reason is a note on it: perf scaled it because the event ran part of the time
    (multiplexed), or counted user space only (``task-clock:u``: the name loses the ``:u``).
    """
    counters = []
    for line in text.splitlines():
        fields = line.split(sep)
        if line.startswith("#") or len(fields) < 3 or not fields[2].strip():
            continue
        counters.append(_counter(fields))
    return counters


def _counter(fields: list[str]) -> PerfCounter:
    raw, unit = fields[0].strip(), fields[1].strip()
    # perf adds ":u" where it may count user space only (perf_event_paranoid >= 2 for a user):
    # the event keeps its name, the note says what it covers.
    name, _, modifiers = fields[2].strip().partition(":")
    notes = ["user space only"] if modifiers and set(modifiers) <= set("uH") else []
    if raw in _NO_VALUES:
        return PerfCounter(name, None, unit, raw)
    try:
        value = float(raw)
    except ValueError:
        return PerfCounter(name, None, unit, f"unreadable value {raw!r}")
    running = _float_or_none(fields[4]) if len(fields) > 4 else None
    if running is not None and running < 100.0:
        notes.append(f"scaled: counted {running:.2f}% of the window (multiplexed)")
    return PerfCounter(name, value, unit, "; ".join(notes))


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def derive_ipc(counters: list[PerfCounter]) -> PerfCounter:
    """Instructions per cycle, only when both were counted; else value None and why."""
    by_event = {_base_event(c.name): c for c in counters}
    cycles, instructions = by_event.get("cycles"), by_event.get("instructions")
    for needed, counter in (("cycles", cycles), ("instructions", instructions)):
        if counter is None or counter.value is None:
            why = "not asked for" if counter is None else counter.reason
            return PerfCounter("ipc", None, "instructions/cycle", f"{needed}: {why}")
    assert cycles is not None and instructions is not None and instructions.value is not None
    if not cycles.value:
        return PerfCounter("ipc", None, "instructions/cycle", "cycles: counted 0")
    return PerfCounter("ipc", instructions.value / cycles.value, "instructions/cycle")


def _base_event(name: str) -> str:
    """``cycles`` for ``cycles``, ``cycles:u`` or ``cpu_core/cycles/``."""
    if "/" in name:
        name = name.strip("/").split("/")[-1]
    return name.split(":")[0]


# ---------------------------------------------------------------- perf script -> folded stacks


def fold_perf_script(text: str) -> Counter[str]:
    """Samples per call stack, folded ``thread;root;...;leaf`` (the flame-graph input), from
    ``perf script`` output: one header line per sample (``comm tid time: period event:``), then
    its frames, leaf first, one per indented line (``ip symbol (dso)``), then a blank line.

    The thread (perf's ``comm``) is the root, so a runtime's worker threads stay apart. A frame
    is its symbol without the ``+0x..`` offset; an unresolved one is ``[its dso's name]``, or
    ``[unknown]`` (one for a run of them) when perf knows neither.
    """
    folded: Counter[str] = Counter()
    comm: str | None = None
    frames: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line[:1] in (" ", "\t") and line.strip():
            frames.append(_frame_name(line.strip()))
        elif line.strip():
            _add_sample(folded, comm, frames)
            comm, frames = _comm(line), []
        else:
            _add_sample(folded, comm, frames)
            comm, frames = None, []
    return folded


def _add_sample(folded: Counter[str], comm: str | None, frames: list[str]) -> None:
    if comm is None or not frames:
        return
    # Frame-pointer unwinding through code built without frame pointers reads junk: a run of
    # unnamed frames, as long as the junk chain happens to be. One stands for the run, so such
    # samples fold together instead of scattering over chains of every length.
    kept = [f for i, f in enumerate(frames) if f != "[unknown]" or frames[i - 1:i] != [f]]
    folded[";".join([comm, *reversed(kept)])] += 1


def _comm(header: str) -> str:
    """The thread name of a sample's header line: the words before its tid, which comes just
    before the time (``comm tid time:``); a name may hold spaces. ``;`` is the folded format's
    separator, so it is replaced."""
    words = header.split()
    times = [i for i, word in enumerate(words) if _TIME.match(word)]
    end = times[0] - 1 if times and times[0] >= 2 else 1
    return " ".join(words[:end]).replace(";", ":")


def _frame_name(frame: str) -> str:
    """``symbol`` of ``ip symbol+0x1f (dso)``; ``[dso]`` when perf could not name the symbol."""
    _, _, rest = frame.partition(" ")
    symbol, dso = rest, ""
    if rest.endswith(")") and " (" in rest:
        symbol, _, dso = rest.rpartition(" (")
        dso = dso[:-1]
    plus = symbol.rfind("+0x")
    if plus > 0:
        symbol = symbol[:plus]
    if symbol in ("", "[unknown]") and dso not in ("", "[unknown]"):
        return f"[{Path(dso).name}]"
    return (symbol or "[unknown]").replace(";", ":")


def top_stacks(folded: Counter[str], n: int = TOP) -> list[dict[str, Any]]:
    """The ``n`` most sampled stacks: ``{"stack": ..., "samples": ...}``, most first."""
    return [{"stack": stack, "samples": count} for stack, count in folded.most_common(n)]


def top_symbols(folded: Counter[str], n: int = TOP) -> list[dict[str, Any]]:
    """The ``n`` most sampled leaf functions with their share of all samples, most first."""
    leaves: Counter[str] = Counter()
    for stack, count in folded.items():
        leaves[stack.rpartition(";")[2]] += count
    total = sum(leaves.values())
    return [{"symbol": symbol, "samples": count, "share": count / total}
            for symbol, count in leaves.most_common(n)]
