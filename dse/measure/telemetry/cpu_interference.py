"""What else used the CPUs during a measurement window: other processes, and the hypervisor.

Sources (proc(5)): the aggregate ``cpu`` line of ``/proc/stat`` (time every CPU spent in each
state since boot, in USER_HZ ticks: user nice system idle iowait irq softirq steal guest
guest_nice; guest time is already inside user and nice) and its ``procs_running`` line (threads
runnable now); ``/proc/self/stat`` fields 14-15 (utime, stime: this process's CPU time over all
its threads, in the same ticks).

Over the window, from its first and last readings:

- ``interference_cpu_pct``: CPU time of every other process (busy ticks of the machine less this
  process's), as a share of all the CPUs' time in the window. A single-threaded hog on a 2-core
  machine reads about 50.
- ``steal_pct``: time the hypervisor gave this VM's CPUs to someone else, as a share of the same.

- ``cpu_wait_pct``: how long this process's threads were runnable but waiting for a CPU, as a
  share of the time they were runnable (on a CPU or waiting): from ``/proc/self/task/*/schedstat``
  (sched-stats(5): time on the CPU and time waiting on a run queue, in ns), read at the window's
  two ends only. This is what separates work *beside* the measurement from work *taking its
  CPU*: on this 2-core VM a busy loop on the other core reads 0.1% (and moves neither p50 nor
  p99), two busy loops 45% (p99 0.54 -> 4.4 ms).

The readings have the ticks' resolution (10 ms per CPU at USER_HZ 100): a window shorter than
:data:`MIN_TICKS` ticks of all CPUs together reports both metrics missing rather than a share of
two or three ticks. ``procs_running`` (which counts the measuring thread itself) is kept as a
trace and its mean goes to provenance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from dse.measure.telemetry.base import (
    Probe,
    ProbeResult,
    ProbeSettings,
    Trace,
    Window,
    interval_setting,
    register_probe,
)

# Fewer ticks than this across all CPUs and the shares are too coarse to judge (2 CPUs x 0.1 s).
MIN_TICKS = 20
# The aggregate line's busy states; idle and iowait are not busy, steal is counted apart.
_BUSY = ("user", "nice", "system", "irq", "softirq")
_STATES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class CpuTicks:
    """One reading of ``/proc/stat``: busy, steal and total ticks of all CPUs, threads runnable."""

    busy: int
    steal: int
    total: int
    procs_running: int


def parse_proc_stat(text: str) -> CpuTicks:
    """The aggregate ``cpu`` line and ``procs_running`` of a ``/proc/stat`` text; ValueError when
    the text has no such line (not Linux's format)."""
    ticks: dict[str, int] | None = None
    running = -1
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:]]
            ticks = dict(zip(_STATES, values + [0] * (len(_STATES) - len(values)), strict=False))
        elif fields and fields[0] == "procs_running":
            running = int(fields[1])
    if ticks is None:
        raise ValueError("no aggregate 'cpu' line in /proc/stat")
    total = sum(ticks[state] for state in _STATES)
    return CpuTicks(sum(ticks[state] for state in _BUSY), ticks["steal"], total, running)


def parse_schedstat(text: str) -> tuple[int, int]:
    """(ns on a CPU, ns waiting on a run queue) of a ``/proc/<pid>/task/<tid>/schedstat`` text
    (its third field, the number of timeslices, is not needed)."""
    fields = text.split()
    return int(fields[0]), int(fields[1])


def tasks_schedstat(task_dir: Path) -> tuple[float, float]:
    """Run and wait ns summed over every thread in ``task_dir`` (``/proc/self/task``); a thread
    that ends while it is read is skipped. OSError when the folder or the files are missing."""
    run = wait = 0
    for task in task_dir.iterdir():
        try:
            on_cpu, waiting = parse_schedstat((task / "schedstat").read_text())
        except FileNotFoundError:
            if not task_dir.exists():
                raise
            continue  # the thread ended between the listing and the read
        run, wait = run + on_cpu, wait + waiting
    return float(run), float(wait)


def parse_self_stat(text: str) -> int:
    """utime + stime of a ``/proc/<pid>/stat`` text, in ticks. The command name (field 2) is in
    parentheses and may hold spaces or parentheses itself: fields are counted after the last ')'."""
    after = text[text.rindex(")") + 1:].split()
    # after[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(after[11]) + int(after[12])


class CpuInterferenceSettings(ProbeSettings):
    interval_s: float = interval_setting(0.05)


@register_probe
class CpuInterferenceProbe(Probe):
    """Other processes' and the hypervisor's share of the CPUs over the window (module docstring).
    The device worker runs it in every window, listed in the profile or not."""

    name = "cpu_interference"
    provides = ("interference_cpu_pct", "steal_pct", "cpu_wait_pct")
    units: ClassVar[dict[str, str]] = {"busy": "ticks", "steal": "ticks", "total": "ticks",
                                       "own": "ticks", "procs_running": "threads",
                                       "run_ns": "ns", "wait_ns": "ns"}
    settings_model = CpuInterferenceSettings

    def __init__(self, interval_s: float = 0.05, root: str = "/") -> None:
        super().__init__(interval_s)
        self.root = Path(root)
        # /proc/self is the process (its thread group) whichever thread reads it.
        self._self_stat = self.root / "proc" / "self" / "stat"
        self._tasks = self.root / "proc" / "self" / "task"

    def available(self) -> tuple[bool, str]:
        try:
            parse_proc_stat((self.root / "proc" / "stat").read_text())
            parse_self_stat(self._self_stat.read_text())
        except (OSError, ValueError, IndexError) as exc:
            return False, f"cannot read CPU time from /proc/stat and /proc/self/stat: {exc}"
        return True, ""

    def read(self) -> dict[str, float]:
        try:
            ticks = parse_proc_stat((self.root / "proc" / "stat").read_text())
            own = parse_self_stat(self._self_stat.read_text())
        except (OSError, ValueError, IndexError):
            return dict.fromkeys(self.units, math.nan)
        return {"busy": float(ticks.busy), "steal": float(ticks.steal),
                "total": float(ticks.total), "own": float(own),
                "procs_running": float(ticks.procs_running)}

    def read_at_ends(self) -> dict[str, float]:
        """Every thread's run-queue figures, at the window's ends only: reading each of a
        process's threads every interval would add work of our own inside the window."""
        try:
            run, wait = tasks_schedstat(self._tasks)
        except (OSError, ValueError, IndexError):
            return {"run_ns": math.nan, "wait_ns": math.nan}
        return {"run_ns": run, "wait_ns": wait}

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        first, last = _ends(trace)
        if first is None or last is None:
            reason = "no complete /proc/stat reading at both ends of the window"
            return ProbeResult(missing=dict.fromkeys(self.provides, reason))
        total = last["total"] - first["total"]
        if total < MIN_TICKS:
            reason = (f"the window held {total:.0f} CPU ticks of all CPUs together; shares need "
                      f"at least {MIN_TICKS} (the kernel counts CPU time in 10 ms ticks)")
            return ProbeResult(missing=dict.fromkeys(self.provides, reason))
        own = last["own"] - first["own"]
        foreign = max(0.0, last["busy"] - first["busy"] - own)
        result = ProbeResult(metrics={
            "interference_cpu_pct": 100.0 * foreign / total,
            "steal_pct": 100.0 * (last["steal"] - first["steal"]) / total})
        waited = _wait_share(trace)
        if isinstance(waited, str):
            result.missing["cpu_wait_pct"] = waited
        else:
            result.metrics["cpu_wait_pct"] = waited
        return result

    def provenance(self, trace: Trace) -> dict[str, str]:
        running = [v for v in trace.channels.get("procs_running", []) if math.isfinite(v)]
        if not running:
            return {}
        return {"procs_running_mean": f"{sum(running) / len(running):.2f}"}


def _wait_share(trace: Trace) -> float | str:
    """cpu_wait_pct from the first and last readings that have the run-queue figures, or why
    there is none."""
    run, wait = trace.channels.get("run_ns", []), trace.channels.get("wait_ns", [])
    ends = [i for i in range(min(len(run), len(wait)))
            if math.isfinite(run[i]) and math.isfinite(wait[i])]
    if len(ends) < 2:
        return ("no /proc/self/task/*/schedstat reading at both ends of the window (a kernel "
                "without CONFIG_SCHED_INFO has none)")
    # A thread that ended inside the window takes its figures with it: never below zero.
    ran = max(0.0, run[ends[-1]] - run[ends[0]])
    waited = max(0.0, wait[ends[-1]] - wait[ends[0]])
    if ran + waited <= 0:
        return "this process's threads were never runnable in the window"
    return 100.0 * waited / (ran + waited)


def _ends(trace: Trace) -> tuple[dict[str, float] | None, dict[str, float] | None]:
    """The first and the last reading with every counter, as channel -> value."""
    names = ("busy", "steal", "total", "own")
    complete = [i for i in range(len(trace.timestamps))
                if all(math.isfinite(trace.channels.get(n, [math.nan] * (i + 1))[i]) for n in names)]
    if len(complete) < 2:
        return None, None
    return ({n: trace.channels[n][complete[0]] for n in names},
            {n: trace.channels[n][complete[-1]] for n in names})
