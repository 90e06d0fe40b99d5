"""Linux ``perf`` around a profiled window: counters (``perf stat``) and sampled call stacks
(``perf record -g``) of one process, all its threads.

:class:`PerfWindow` attaches both to a running process, held disabled until the ``with`` block
starts: perf's control channel (``--control``, events started disabled with ``--delay=-1``)
enables them and perf acknowledges, so the window starts when perf counts, not after a guessed
sleep, and ends the same way. Nothing here raises out of the window: a perf that is absent, not
permitted or crashes leaves its reason in the :class:`~dse.profiling.summary.PerfSection`.

This module runs perf; reading what it wrote is :mod:`dse.profiling.perf_output`'s job.
"""

from __future__ import annotations

import functools
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from dse.profiling.perf_output import (
    derive_ipc,
    first_error_line,
    fold_perf_script,
    parse_perf_stat_csv,
    top_stacks,
    top_symbols,
)
from dse.profiling.summary import PerfCounter, PerfSection

STAT_EVENTS = ("task-clock", "context-switches", "cpu-migrations", "page-faults", "cycles",
               "instructions", "cache-references", "cache-misses", "branches", "branch-misses")
STAT_FILE = "perf-stat.txt"
RECORD_FILE = "perf.data"
FOLDED_FILE = "perf-stacks.folded"
_PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")


def perf_missing(perf: str = "perf") -> str | None:
    """Why ``perf`` cannot count here, in one line, or None when it can.

    Decided by running it once (``perf stat -e task-clock -- true``), cached per process and
    executable: being on PATH is not enough (``perf_event_paranoid``, containers, a ``perf``
    wrapper without the kernel's tools).
    """
    return _perf_missing(perf)


@functools.cache
def _perf_missing(perf: str) -> str | None:
    if shutil.which(perf) is None:
        return f"{perf} is not on PATH (install linux-perf / linux-tools for this kernel)"
    try:
        done = subprocess.run([perf, "stat", "-x,", "-e", "task-clock", "--", "true"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{perf} could not run: {type(exc).__name__}: {exc}"
    counted = [c for c in parse_perf_stat_csv(done.stderr) if c.name == "task-clock"]
    if done.returncode == 0 and counted and counted[0].value is not None:
        return None
    return (f"{perf} cannot count here: {first_error_line(done.stderr) or 'no task-clock count'} "
            f"(kernel.perf_event_paranoid={_paranoid()})")


def _paranoid() -> str:
    try:
        return _PARANOID.read_text().strip()
    except OSError:
        return "unknown"


# ---------------------------------------------------------------- one attached perf process


class _PerfFailed(Exception):
    """A perf process failed; the message is the one-line reason."""


class _AttachedPerf:
    """One ``perf stat`` or ``perf record`` attached to a process, started with its events
    disabled and driven through ``--control fd:CTL,ACK``.

    Pipes rather than named FIFOs: when perf dies, the acknowledgement pipe reads end-of-file at
    once, where a FIFO would leave the wait to its timeout.
    """

    def __init__(self, what: str, argv: list[str], timeout_s: float) -> None:
        self.what, self._argv, self._timeout_s = what, argv, timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl_w = self._ack_r = -1
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        ctl_r, self._ctl_w = os.pipe()
        self._ack_r, ack_w = os.pipe()
        # Open for the process's life, closed by log_line(); perf's stderr, read on failure.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        argv = [*self._argv[:2], "--delay=-1", f"--control=fd:{ctl_r},{ack_w}", *self._argv[2:]]
        # A child inherits its parent thread's signal mask, and Ray runs an actor's methods with
        # SIGINT blocked: perf would never see the SIGINT that stops it. Unblocked for the spawn.
        blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        try:
            # A session of its own: a terminal's Ctrl-C is for dse, which stops perf itself.
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                          stderr=self._log, pass_fds=(ctl_r, ack_w),
                                          start_new_session=True)
        except OSError as exc:
            self.stop()  # closes this side's pipe ends and the log
            self.log_line()
            raise _PerfFailed(f"{self.what} could not start: {exc}") from None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            os.close(ctl_r)
            os.close(ack_w)

    def command(self, word: str) -> None:
        """Send ``word`` (enable, disable) and return once perf has acknowledged it."""
        try:
            os.write(self._ctl_w, f"{word}\n".encode())
        except OSError:
            raise _PerfFailed(self._died()) from None
        # poll, not select: a worker process may hold more than select's 1024 descriptors.
        waiter = select.poll()
        waiter.register(self._ack_r, select.POLLIN)
        deadline, got = time.monotonic() + self._timeout_s, b""
        while b"ack" not in got:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _PerfFailed(f"{self.what} did not acknowledge {word!r} within "
                                  f"{self._timeout_s:g} s")
            ready = waiter.poll(left * 1000)
            chunk = os.read(self._ack_r, 64) if ready else b""
            if ready and not chunk:  # end of file: perf has exited
                raise _PerfFailed(self._died())
            got += chunk

    def stop(self) -> str:
        """SIGINT (perf writes its output and exits), waited for; "" or why it went wrong."""
        proc, reason = self._proc, ""
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=self._timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                reason = (f"{self.what} did not exit within {self._timeout_s:g} s of SIGINT; "
                          f"killed (its output may be incomplete)")
        for fd in (self._ctl_w, self._ack_r):
            if fd >= 0:
                os.close(fd)
        self._ctl_w = self._ack_r = -1
        return reason

    def log_line(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        line = first_error_line(self._log.read().decode(errors="replace"))
        self._log.close()
        self._log = None
        return line

    def _died(self) -> str:
        if self._proc is not None:
            try:
                self._proc.wait(timeout=self._timeout_s)
            except subprocess.TimeoutExpired:
                return f"{self.what} stopped answering its control pipe"
        return f"{self.what} exited: {self.log_line() or 'no message'}"


# ---------------------------------------------------------------- the window


@dataclass
class _Side:
    """One of stat / record: its perf process, why it has no result ("" while fine), and what
    went wrong while stopping it: a perf whose process ended inside the window exits by itself
    with all its data, so that is the reason only when no data came."""

    tool: _AttachedPerf | None
    missing: str
    stopping: str = ""


class PerfWindow:
    """``perf stat`` and ``perf record -g`` on process ``pid`` (all its threads) for the duration
    of a ``with`` block; afterwards :meth:`section` and :attr:`files`.

    Life cycle: entering starts both perf processes with their events disabled, then enables
    each and waits for its acknowledgement, so counting has begun when the block's body runs;
    leaving disables them (acknowledged), stops perf with SIGINT (waited for, killed after
    ``timeout_s``), and reads what perf wrote into ``out_dir``: ``perf-stat.txt`` (``-x,``
    CSV), ``perf.data`` and the stacks folded from ``perf script`` (``perf-stacks.folded``).
    Nothing raises out of it: a side that could not run says why in ``stat_missing`` /
    ``record_missing``, and the body runs either way. An exception from the body is not
    swallowed.

    Args:
        pid: the process to attach to (perf needs the right to trace it: same user, or
            ``CAP_PERFMON``).
        out_dir: where perf's files go (created).
        stat / record: which of the two to run.
        frequency: sampling rate of ``perf record``, Hz (perf caps it at
            ``kernel.perf_event_max_sample_rate``).
        call_graph: ``perf record --call-graph`` mode: ``fp`` (as ``-g``; cheap, but code built
            without frame pointers unwinds one frame deep) or ``dwarf`` (deep stacks from any
            code, ~8 KB copied per sample, slower ``perf script``).
        timeout_s: the longest wait for each acknowledgement, exit and ``perf script``.
        perf: the perf executable.
    """

    def __init__(self, pid: int, out_dir: Path, *, stat: bool = True, record: bool = True,
                 frequency: int = 999, call_graph: str = "fp", timeout_s: float = 30.0,
                 perf: str = "perf") -> None:
        self.pid, self.out_dir, self.timeout_s, self.perf = pid, out_dir, timeout_s, perf
        self._frequency, self._call_graph = frequency, call_graph
        self._stat = _Side(None, "" if stat else "not asked for")
        self._record = _Side(None, "" if record else "not asked for")
        self._section = PerfSection()
        self._files: list[Path] = []

    @property
    def files(self) -> list[Path]:
        """The raw files perf wrote (``perf-stat.txt``, ``perf.data``, ``perf-stacks.folded``)."""
        return list(self._files)

    def section(self) -> PerfSection:
        """Counters (with the derived IPC), stacks and leaf symbols of the window, or why not."""
        return self._section

    def __enter__(self) -> PerfWindow:
        missing = perf_missing(self.perf)
        for side in (self._stat, self._record):
            side.missing = side.missing or (missing or "")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for name in (STAT_FILE, RECORD_FILE, FOLDED_FILE):  # a stale file is no result of this
            (self.out_dir / name).unlink(missing_ok=True)
        try:
            self._stat.tool = self._launch(self._stat, "perf stat", self._stat_argv())
            self._record.tool = self._launch(self._record, "perf record", self._record_argv())
            for side in (self._record, self._stat):
                side.missing = self._send(side, "enable")
        except BaseException:  # Ctrl-C while perf starts: no perf is left attached
            for side in (self._stat, self._record):
                self._stop(side)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for side in (self._stat, self._record):
            side.stopping = self._send(side, "disable")
            self._stop(side)
        counters, stat_missing = self._read_stat()
        stacks, record_missing = self._read_record()
        self._section = PerfSection(
            counters=[*counters, derive_ipc(counters)] if counters else [],
            stat_missing=stat_missing, stacks=top_stacks(stacks), symbols=top_symbols(stacks),
            record_missing=record_missing)

    def _stat_argv(self) -> list[str]:
        return [self.perf, "stat", "-x,", "-o", str(self.out_dir / STAT_FILE),
                "-e", ",".join(STAT_EVENTS), "-p", str(self.pid)]

    def _record_argv(self) -> list[str]:
        # No build-id cache: perf would copy every binary sampled into ~/.debug on each stop.
        return [self.perf, "record", "--no-buildid-cache", "--call-graph", self._call_graph,
                "-F", str(self._frequency), "-o", str(self.out_dir / RECORD_FILE),
                "-p", str(self.pid)]

    def _launch(self, side: _Side, what: str, argv: list[str]) -> _AttachedPerf | None:
        if side.missing:
            return None
        tool = _AttachedPerf(what, argv, self.timeout_s)
        try:
            tool.start()
        except _PerfFailed as failed:
            side.missing = str(failed)
            return None
        return tool

    @staticmethod
    def _send(side: _Side, word: str) -> str:
        """Why ``word`` could not be sent (the side's earlier reason stands); "" when it was."""
        if side.tool is None or side.missing:
            return side.missing
        try:
            side.tool.command(word)
        except _PerfFailed as failed:
            return str(failed)
        return ""

    @staticmethod
    def _stop(side: _Side) -> None:
        if side.tool is not None:
            side.stopping = side.stopping or side.tool.stop()

    def _read_stat(self) -> tuple[list[PerfCounter], str]:
        path = self.out_dir / STAT_FILE
        if self._stat.tool is None:
            return [], self._stat.missing
        log = self._stat.tool.log_line()
        counters = parse_perf_stat_csv(_text(path))
        if counters:  # the section's contract: no reason when there are counters
            self._files.append(path)
            return counters, ""
        return [], (self._stat.missing or self._stat.stopping
                    or f"perf stat wrote no counters: {log or 'no message'}")

    def _read_record(self) -> tuple[Counter[str], str]:
        path = self.out_dir / RECORD_FILE
        if self._record.tool is None:
            return Counter(), self._record.missing
        log = self._record.tool.log_line()
        if not path.is_file():
            return Counter(), (self._record.missing or self._record.stopping
                               or f"perf record wrote no data: {log or 'no message'}")
        self._files.append(path)
        stacks, why = self._script(path)
        if not stacks:
            return stacks, self._record.missing or self._record.stopping or why
        folded = self.out_dir / FOLDED_FILE
        try:
            folded.write_text("".join(f"{s} {n}\n" for s, n in stacks.most_common()))
            self._files.append(folded)
        except OSError:  # the section holds the top stacks; the full list is a convenience
            folded.unlink(missing_ok=True)
        return stacks, ""

    def _script(self, data: Path) -> tuple[Counter[str], str]:
        """The folded stacks of ``perf script`` on ``data``, or why there are none."""
        argv = [self.perf, "script", "-i", str(data), "-F", "comm,tid,time,period,event,ip,sym,dso"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                                  timeout=self.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Counter(), f"perf script failed: {type(exc).__name__}: {exc}"
        stacks = fold_perf_script(done.stdout)
        if stacks:
            return stacks, ""
        detail = first_error_line(done.stderr) or "no samples in the window"
        return Counter(), f"perf record took no call stacks: {detail}"


def _text(path: Path) -> str:
    """The file's text, or "" when there is none to read."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
