"""A suspected latency regression confirmed or dismissed by runs in fresh worker processes.

One run's interval holds what varies inside that run. What moves between runs it cannot see: a
run in another process, seconds or minutes later, lands elsewhere (memory layout, the core it got,
a neighbour on the host that no probe inside the machine sees, so the window is labelled ``ok``).
A verification compares a run now with the one run recorded at export, so one run beyond the
tolerance with its interval above the recorded one (:func:`dse.deploy.compare.compare_latency`)
is a suspicion: the latency regressed only when every run of the verification, the first and the
fresh ones, each in a worker process of its own (the later ones after an idle pause: a machine
can stay slower for tens of seconds after heavy use, its own or a neighbour's), regressed by that
rule. One run that did not, in a clean window, dismisses it. Why, with the figures:
docs/measurement.md, "Verifying a bundle".

How a run counts follows its quality label, read as a string:

- ``disturbed`` among its flags (other work took the device even after re-measuring): a first
  run so labelled decides alone, as a single run always did: regressed where it found a latency
  slower (a regression measured on a busy device is still one), else inconclusive, since a pass a
  busy window gave cannot be certified; no fresh runs, which on a busy device would only look
  for a quiet moment to pass in. A fresh run so labelled confirms when it too is slower and
  otherwise says nothing: a latency that no clean run passed, and not every run found slower,
  is ``inconclusive``.
- ``ok`` and every other label (``underpowered``, ``unstable``, ``imprecise``, any a later
  protocol adds): the run counts on its figures. Their interval already says how precise they
  are (a wide one makes a regression harder to call, never easier), and the report names the
  label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from dse.deploy.compare import MetricCheck

#: Fresh runs that must agree with the first before a latency is called regressed.
DEFAULT_CONFIRM_RUNS = 2
#: The idle pause before each fresh run after the first: a virtual machine can run slower for
#: tens of seconds after heavy use of its cores (docs/measurement.md, "Verifying a bundle").
DEFAULT_CONFIRM_GAP_S = 30.0
DISTURBED = "disturbed"


@dataclass(frozen=True)
class Run:
    """One measurement of a verification, each in a fresh worker process.

    Attributes:
        run: its number (1: the first; 2 on: the fresh runs).
        checks: one check per latency the verification decides on, by this run's figures alone
            (their ``run`` is this one's number).
        quality: its ``measurement_quality`` label, as the protocol wrote it.
        disturbed: whether ``disturbed`` is among its ``measurement_flags``.
        pid: the worker process that measured it; ``device_id`` the device.
    """

    run: int
    checks: list[MetricCheck]
    quality: str = ""
    disturbed: bool = False
    pid: str = ""
    device_id: str = ""

    def check(self, metric: str) -> MetricCheck:
        return next(check for check in self.checks if check.metric == metric)


def is_disturbed(flags: str) -> bool:
    """Whether a measurement's ``measurement_flags`` (comma-separated) hold ``disturbed``."""
    return DISTURBED in (flag.strip() for flag in flags.split(","))


def settled(runs: Sequence[Run], needed: int) -> bool:
    """Whether the verification is decided: the first run's window was disturbed (it decides
    alone), or every latency was passed by a clean run or found slower by ``needed`` runs."""
    return runs[0].disturbed or all(
        _passing(runs, check.metric) is not None
        or len(_slower(runs, check.metric)) >= needed for check in runs[0].checks)


def decided(runs: Sequence[Run], metric: str, needed: int) -> MetricCheck:
    """``metric``'s check over every run: regressed when ``needed`` runs found it slower (one,
    where the first run's window was disturbed) and no clean run passed it; the first clean run
    that did not regress decides otherwise; else inconclusive. Figures of the run that decided
    (``run``); the other runs in ``why``."""
    needed = 1 if runs[0].disturbed else needed
    slower, passing = _slower(runs, metric), _passing(runs, metric)
    if passing is not None:
        run, check = passing
        if run.run == 1:
            return check
        return replace(check, run=run.run, why=_passed_why(run, check, slower))
    if len(slower) >= needed:
        check = slower[0]
        if len(runs) == 1:
            return check
        return replace(check, why=f"{check.why}; slower in every run ({_changes(slower)})")
    first = runs[0].check(metric)
    if runs[0].disturbed:
        return replace(first, verdict="inconclusive", why=(
            f"{first.why}; but other work disturbed the window: no pass is certified"))
    touched = ", ".join(str(run.run) for run in runs if run.disturbed)
    return replace(first, verdict="inconclusive", why=(
        f"slower in {len(slower)} of {len(runs)} runs ({_changes(slower)}), where a regression "
        f"needs {needed}, and no clean run passed it: "
        + (f"other work disturbed run {touched}" if touched else "no more runs were made")))


def summary(runs: Sequence[Run]) -> str:
    """What the fresh runs were for and what they found, in one line; "" for a single run.

    Examples:
        >>> from dse.deploy.compare import MetricCheck
        >>> def run(n, pct, verdict):
        ...     return Run(n, [MetricCheck("latency_p50_ms", 1.0, None, 1 + pct / 100, None,
        ...                                pct, verdict, "")])
        >>> summary([run(1, 12.0, "regressed"), run(2, 13.1, "regressed"),
        ...          run(3, 11.4, "regressed")])
        'suspected 12% slower (latency_p50_ms), confirmed in 2 of 2 fresh runs (+13.1%, +11.4%)'
    """
    if len(runs) < 2:
        return ""
    fresh = runs[1:]
    plural = "s" if len(fresh) != 1 else ""
    parts = []
    for check in runs[0].checks:
        if check.verdict == "regressed" and check.change_pct is not None:
            agreeing = _slower(fresh, check.metric)
            parts.append(f"suspected {check.change_pct:.0f}% slower ({check.metric}), confirmed "
                         f"in {len(agreeing)} of {len(fresh)} fresh run{plural} "
                         f"({_changes([run.check(check.metric) for run in fresh])})")
    return "; ".join(parts)


def _slower(runs: Sequence[Run], metric: str) -> list[MetricCheck]:
    return [run.check(metric) for run in runs if run.check(metric).verdict == "regressed"]


def _passing(runs: Sequence[Run], metric: str) -> tuple[Run, MetricCheck] | None:
    """The first run with a clean window that did not find ``metric`` slower."""
    return next(((run, run.check(metric)) for run in runs
                 if not run.disturbed and run.check(metric).verdict != "regressed"), None)


def _passed_why(run: Run, check: MetricCheck, slower: list[MetricCheck]) -> str:
    if slower:
        return (f"run {run.run}: {check.why}; the {_changes(slower)} of run "
                f"{', '.join(str(found.run) for found in slower)} not confirmed: one run's "
                f"excursion, not a regression")
    return f"run {run.run}, the first with a clean window: {check.why}"


def _changes(checks: Sequence[MetricCheck]) -> str:
    return ", ".join("—" if check.change_pct is None else f"{check.change_pct:+.1f}%"
                     for check in checks)
