"""Linux perf around a window: the parsers on perf's real output, and PerfWindow on a real child."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dse.profiling.perf import (
    FOLDED_FILE,
    RECORD_FILE,
    STAT_EVENTS,
    STAT_FILE,
    PerfWindow,
    perf_missing,
)
from dse.profiling.perf_output import (
    derive_ipc,
    first_error_line,
    fold_perf_script,
    parse_perf_stat_csv,
    top_stacks,
    top_symbols,
)
from dse.profiling.summary import PerfCounter, PerfSection

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "perf"
HARDWARE = ("cycles", "instructions", "cache-references", "cache-misses", "branches",
            "branch-misses")
# A frame of CPython's interpreter or C API (_PyEval_EvalFrameDefault, PyLong_FromLong, ...).
PYTHON_FRAME = re.compile(r"(^|;)_?Py[A-Z_]")


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


def _by_name(counters: list[PerfCounter]) -> dict[str, PerfCounter]:
    return {counter.name: counter for counter in counters}


def test_stat_csv_of_a_window_keeps_every_event_and_why_hardware_ones_have_no_value() -> None:
    counters = parse_perf_stat_csv(_read("stat-window.csv"))
    assert [c.name for c in counters] == list(STAT_EVENTS)
    named = _by_name(counters)
    assert named["task-clock"] == PerfCounter("task-clock", 56.86, "msec", "")
    assert named["context-switches"].value == 19.0
    for event in HARDWARE:
        assert named[event] == PerfCounter(event, None, "", "<not supported>")


def test_user_space_only_counts_keep_the_events_name_and_say_what_they_cover() -> None:
    named = _by_name(parse_perf_stat_csv(_read("stat-user-space.csv")))
    assert list(named) == list(STAT_EVENTS)
    assert named["task-clock"] == PerfCounter("task-clock", 18.51, "msec", "user space only")
    assert named["page-faults"].value == 815.0
    assert named["cycles"] == PerfCounter("cycles", None, "", "<not supported>")


def test_not_counted_events_have_no_value_and_say_so() -> None:
    never = _by_name(parse_perf_stat_csv(_read("stat-never-enabled.csv")))
    assert never["task-clock"] == PerfCounter("task-clock", None, "msec", "<not counted>")
    assert never["page-faults"].reason == "<not counted>"
    assert never["cycles"].reason == "<not supported>"
    group = _by_name(parse_perf_stat_csv(_read("stat-group.csv")))
    assert group["task-clock"].reason == "<not counted>"  # its group's sibling is unsupported
    assert group["page-faults"] == PerfCounter("page-faults", 1371.0, "", "")


def test_scaled_counts_keep_their_value_and_ipc_is_derived_from_counted_events() -> None:
    counters = parse_perf_stat_csv(_read("stat-hardware-written.csv"))
    named = _by_name(counters)
    assert named["cycles"].value == 4129730185.0
    assert named["cycles"].reason == "scaled: counted 79.98% of the window (multiplexed)"
    assert named["task-clock"].reason == ""
    ipc = derive_ipc(counters)
    assert ipc.value == pytest.approx(6874567201 / 4129730185)
    assert ipc.reason == ""


def test_ipc_is_absent_with_the_reason_when_cycles_are_not_counted() -> None:
    ipc = derive_ipc(parse_perf_stat_csv(_read("stat-window.csv")))
    assert ipc == PerfCounter("ipc", None, "instructions/cycle", "cycles: <not supported>")
    assert derive_ipc([]).reason == "cycles: not asked for"
    modified = [PerfCounter("cpu_core/cycles/", 10.0), PerfCounter("instructions:u", 25.0)]
    assert derive_ipc(modified).value == 2.5


def test_frame_pointer_stacks_fold_with_the_thread_as_root() -> None:
    text = _read("script-fp.txt")
    folded = fold_perf_script(text)
    samples = sum(1 for line in text.splitlines() if line.startswith("python "))
    assert sum(folded.values()) == samples
    assert all(stack.startswith("python;") for stack in folded)
    assert folded.most_common(2) == [("python;_PyObject_Malloc", 17), ("python;_PyObject_Free", 11)]
    # A kernel part of the stack (root may sample the kernel) stays above the user frame.
    assert folded["python;PyIter_Next;asm_sysvec_apic_timer_interrupt;irqentry_exit_to_user_mode;"
                  "schedule;__schedule;finish_task_switch.isra.0"] == 1
    # 127 junk frames of a frame-pointer walk through libpython fold into one.
    assert folded["python;[unknown];dict_traverse"] == 1
    stacks = top_stacks(folded, 5)
    assert [s["stack"] for s in stacks[:2]] == ["python;_PyObject_Malloc", "python;_PyObject_Free"]
    assert [s["samples"] for s in stacks] == sorted((s["samples"] for s in stacks), reverse=True)


def test_dwarf_stacks_fold_root_first_with_inlined_frames() -> None:
    folded = fold_perf_script(_read("script-dwarf.txt"))
    assert sum(folded.values()) == 12
    first = ("python;_start;__libc_start_main_impl;__libc_start_call_main;Py_BytesMain;"
             "pymain_main;Py_RunMain;pymain_run_python;pymain_run_command;PyRun_SimpleStringFlags;"
             "PyRun_StringFlags;run_mod;run_eval_code_obj;PyEval_EvalCode;_PyEval_Vector;"
             "_PyEval_EvalFrame;_PyEval_EvalFrameDefault;builtin_sum;builtin_sum_impl;Py_DECREF")
    assert first in folded


def test_symbol_offsets_are_dropped_and_leaf_shares_add_up() -> None:
    assert fold_perf_script(_read("script-default.txt")) == {
        "python;_PyObject_Malloc": 4, "python;_PyObject_Free": 2, "python;PyIter_Next": 1,
        "python;rangeiter_next": 1}
    folded = fold_perf_script(_read("script-fp.txt"))
    symbols = top_symbols(folded)
    assert len(symbols) == 18  # every leaf there is
    assert symbols[0] == {"symbol": "_PyObject_Malloc", "samples": 17,
                          "share": 17 / sum(folded.values())}
    assert sum(s["share"] for s in top_symbols(folded, 1000)) == pytest.approx(1.0)


def test_the_first_error_line_skips_perfs_usage_text() -> None:
    assert first_error_line(_read("stat-no-such-process.stderr")) == (
        "Problems finding threads of monitor")
    assert first_error_line(_read("record-no-such-process.stderr")) == (
        "Couldn't create thread/CPU maps: No such process")


def test_a_missing_perf_is_a_reason_and_the_window_still_runs(tmp_path: Path) -> None:
    absent = str(tmp_path / "no-perf-here")
    assert perf_missing(absent) == f"{absent} is not on PATH (install linux-perf / linux-tools " \
                                   f"for this kernel)"
    ran = []
    with PerfWindow(1, tmp_path / "out", perf=absent) as window:
        ran.append(True)
    section = window.section()
    assert ran == [True]
    assert section.stat_missing == section.record_missing == perf_missing(absent)
    assert section.counters == [] and section.stacks == [] and window.files == []


@pytest.fixture
def perf_here() -> None:
    reason = perf_missing()
    if reason is not None:
        pytest.skip(f"perf cannot run here: {reason}")


@pytest.mark.usefixtures("perf_here")
def test_a_process_that_is_gone_leaves_perfs_reason(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    with PerfWindow(int(gone.stdout), tmp_path) as window:
        pass
    section = window.section()
    assert section.stat_missing.startswith("perf stat exited: ")  # then perf's own words
    assert section.record_missing.startswith("perf record exited: ")
    assert section.counters == [] and section.stacks == [] and window.files == []


# The child waits for a line on stdin before it works, so perf attaches to a started
# interpreter and the work falls inside the window.
_WORK = """\
import sys
sys.stdin.readline()
total = 0
for i in range(300_000):
    total += i * i
print(total)
"""


@pytest.fixture
def waiting_child() -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen([sys.executable, "-c", _WORK], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    yield child
    child.kill()
    child.wait()


@pytest.mark.usefixtures("perf_here")
def test_window_on_a_real_child_counts_and_samples_its_work(
        tmp_path: Path, waiting_child: subprocess.Popen[str]) -> None:
    with PerfWindow(waiting_child.pid, tmp_path) as window:
        out, _ = waiting_child.communicate("go\n", timeout=60)
    assert int(out) == sum(i * i for i in range(300_000))
    section = window.section()
    assert section.stat_missing == "" and section.record_missing == ""
    named = _by_name(section.counters)
    assert named["task-clock"].value is not None and named["task-clock"].value > 0
    assert named["task-clock"].unit == "msec"
    for event in HARDWARE:  # counted where the machine has a PMU, else perf's reason
        counter = named[event]
        assert (counter.value is not None) or counter.reason in ("<not supported>",
                                                                 "<not counted>")
    counted = all(named[e].value is not None for e in ("cycles", "instructions"))
    assert (named["ipc"].value is not None) == counted
    assert any(PYTHON_FRAME.search(s["stack"]) for s in section.stacks)
    assert section.symbols and section.symbols[0]["samples"] >= section.symbols[-1]["samples"]
    assert {p.name for p in window.files} == {STAT_FILE, RECORD_FILE, FOLDED_FILE}


# Works on the first line, then stays alive (reading a second one): perf attached to it can only
# stop when it is told to, as on a device worker, whose process lives on after the window.
_WORK_AND_STAY = _WORK + "sys.stdout.flush()\nsys.stdin.readline()\n"


@pytest.mark.usefixtures("perf_here")
def test_a_window_opened_where_sigint_is_blocked_still_stops_perf(tmp_path: Path) -> None:
    """Ray runs an actor's methods with SIGINT blocked, and a child inherits the mask: perf
    never saw the SIGINT that stops it, and every profile on a device worker lost its counters
    after a 30 s wait."""
    import signal
    import threading

    child = subprocess.Popen([sys.executable, "-c", _WORK_AND_STAY], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    sections: list[PerfSection] = []

    def in_a_blocked_thread() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        with PerfWindow(child.pid, tmp_path, record=False, timeout_s=5.0) as window:
            child.stdin.write("go\n")
            child.stdin.flush()
            child.stdout.readline()
        sections.append(window.section())

    try:
        thread = threading.Thread(target=in_a_blocked_thread)
        thread.start()
        thread.join()
    finally:
        child.kill()
        child.wait()
    (section,) = sections
    assert section.stat_missing == "", section.stat_missing
    assert _by_name(section.counters)["task-clock"].value
