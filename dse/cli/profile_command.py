"""``dse profile``: profile one trial of a campaign on a device of its profile, and say where the
time goes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dse.cli.common import AddressOption, fail, plain_console, stop_signals_like_ctrl_c, stopped_by
from dse.core import DseError, interrupt_exit_code

if TYPE_CHECKING:
    from rich.console import Console

    from dse.app import TrialProfile

_TOP = 10
# A language model's profile is of one phase: what one run of its table is.
_PHASE_CALLS = {"prefill": "prefill (a run is one request's prefill)",
                "decode": "decode (a run is one decode step)"}


def profile(
        experiment: Annotated[Path, typer.Argument(help="Campaign YAML (experiments/X.yaml).")],
        trial: Annotated[int, typer.Option(min=0, help="The trial's number in the device's "
                                                       "study (the dashboard's trial column).")],
        device: Annotated[str | None, typer.Option(
            help="Device profile name; needed when the campaign has several.")] = None,
        window_s: Annotated[float, typer.Option(min=0.01, help="Seconds each window aims at.")]
        = 0.5,
        perf: Annotated[bool, typer.Option(help="Attach Linux perf (counters, call stacks).")]
        = True,
        phase: Annotated[str | None, typer.Option(
            help="A language model's phase: decode (one call is a decode step; the default) "
                 "or prefill (one call is a request's prefill).")] = None,
        address: AddressOption = None) -> None:
    """Profile a trial's exact configuration on its device: time per operator with the
    backend's own profiler, a roofline verdict per operator, perf counters and call stacks
    (a language model: one phase's operators, --phase)."""
    from dse.app import profile as profile_trial
    from dse.profiling import ProfileSettings

    console = plain_console()
    stop_signals_like_ctrl_c()
    try:
        found = profile_trial(experiment, trial, device=device, address=address,
                              settings=ProfileSettings(window_s=window_s, perf=perf),
                              phase=phase)
    except DseError as exc:
        raise fail(exc) from None
    except KeyboardInterrupt as exc:
        console.print(f"{stopped_by(exc)}: no profile was written", markup=False)
        raise typer.Exit(interrupt_exit_code(exc)) from None
    _print(console, found)


def _ms(value: float | None) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.3f} ms"


def _print(console: Console, found: TrialProfile) -> None:
    s = found.summary

    def say(text: str) -> None:
        console.print(text, markup=False, soft_wrap=True)

    say(f"trial {s.trial} on {s.device}: {s.backend} {s.precision} batch {s.batch_size}"
        + (f", {_PHASE_CALLS[s.phase]}" if s.phase in _PHASE_CALLS else ""))
    if s.profiler_missing:
        say(f"operators: none — {s.profiler_missing}")
    else:
        coverage = "—" if s.coverage is None else f"{s.coverage:.0%}"
        say(f"operators ({s.profiler}, {s.runs} runs): {_ms(s.op_ms_per_run)} per run of a "
            f"{_ms(s.unprofiled_p50_ms)} p50 ({coverage} attributed, "
            f"{_ms(s.unattributed_ms)} not); the campaign measured {_ms(s.trial_p50_ms)}")
        for row in found.ops.head(_TOP).itertuples():
            say(f"  {row.share:6.1%}  {row.ms_per_run:9.4f} ms  {row.op_type:<22} "
                f"{row.verdict:<15} {row.name}")
    c = s.ceilings
    if c.peak_gflops is not None and c.peak_bandwidth_gbs is not None:
        say(f"roofline: {c.peak_gflops:.1f} GFLOP/s, {c.peak_bandwidth_gbs:.1f} GB/s "
            f"({c.source}); verdicts: "
            + ", ".join(f"{name} {count}" for name, count in s.verdicts.items() if count))
    if s.perf.counters:
        say("perf: " + ", ".join(
            f"{c.name} {c.value:,.0f} {c.unit}".rstrip() if c.value is not None
            else f"{c.name} {c.reason}"
            for c in s.perf.counters))
    elif s.perf.stat_missing:
        say(f"perf counters: none — {s.perf.stat_missing}")
    if s.perf.record_missing:
        say(f"perf call stacks: none — {s.perf.record_missing}")
    for note in (s.nsight.nsys_missing, s.nsight.ncu_missing):
        if note and s.device and "not an NVIDIA GPU" not in note:
            say(f"nsight: {note}")
    say(f"profile folder {found.folder}")
    say(f"dashboard {found.page}")
