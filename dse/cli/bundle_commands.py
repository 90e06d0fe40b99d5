"""``dse export`` (a measured trial as a deployable bundle) and ``dse verify`` (a bundle measured
again on a device and compared with its recorded measurement; exit 0 pass, 1 regressed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dse.cli.common import AddressOption, fail, plain_console, stop_signals_like_ctrl_c, stopped_by
from dse.core import DseError, interrupt_exit_code
from dse.deploy import (
    DEFAULT_ACCURACY_TOLERANCE,
    DEFAULT_CONFIRM_GAP_S,
    DEFAULT_CONFIRM_RUNS,
    DEFAULT_TOLERANCE,
)

if TYPE_CHECKING:
    from rich.console import Console

    from dse.app import VerifyReport


def export(
        experiment: Annotated[Path, typer.Argument(help="Campaign YAML (experiments/X.yaml).")],
        trial: Annotated[int, typer.Option(min=0, help="The trial's number in the device's "
                                                       "study (the dashboard's trial column).")],
        out: Annotated[Path, typer.Option(help="The bundle's folder (new or empty).")],
        device: Annotated[str | None, typer.Option(
            help="Device profile name; needed when the campaign has several.")] = None,
        force: Annotated[bool, typer.Option(help="Replace a bundle already at --out.")] = False,
        address: AddressOption = None) -> None:
    """Export a measured trial as a deployable bundle: the artifact as measured, its
    deployment settings, measurements, a standalone run.py and a SHA-256 manifest."""
    from dse.app import export as export_trial

    console = plain_console()
    stop_signals_like_ctrl_c()
    try:
        bundle = export_trial(experiment, trial, out, device=device, address=address,
                              force=force)
    except DseError as exc:
        raise fail(exc) from None
    except KeyboardInterrupt as exc:
        console.print(f"{stopped_by(exc)}: no bundle was written", markup=False)
        raise typer.Exit(interrupt_exit_code(exc)) from None
    d = bundle.deployment
    stack = d["deployment"]
    say = _sayer(console)
    say(f"trial {d['trial']} on {d['device']['profile']}: {stack['backend']} "
        f"{stack['precision']} batch {stack['batch_size']} -> {bundle.folder}")
    if "artifact" in d:
        say(f"  {d['artifact']['file']} ({d['artifact']['bytes']:,} bytes, sha256 "
            f"{d['artifact']['sha256'][:12]}), {len(bundle.files)} files in the manifest")
    else:  # a language model's bundle: its runtime's model folder and its workload
        model, workload = d["model"], d["workload"]
        say(f"  {model['folder']}/: {model['files']} files, {model['bytes']:,} bytes "
            f"({model['format']}); {workload['prompts_file']} and the greedy tokens recorded on "
            f"them, {workload['tokens_file']}; {len(bundle.files)} files in the manifest")
    for note in d.get("notes", []):
        say(f"  note: {note}")
    if d.get("standalone"):
        say(f"  run it without dse: cd {bundle.folder} && pip install -r requirements.txt && "
            f"python run.py")
    say(f"  check it later: dse verify {bundle.folder}")


def verify(
        bundle: Annotated[Path, typer.Argument(help="The bundle's folder (from dse export).")],
        profile: Annotated[Path | None, typer.Option(
            help="Device profile YAML to verify on (default: the bundle's own).")] = None,
        tolerance: Annotated[float, typer.Option(
            min=0.0, help="Relative latency change that counts (0.1 = 10 %).")]
        = DEFAULT_TOLERANCE,
        accuracy_tolerance: Annotated[float, typer.Option(
            min=0.0, max=1.0, help="Accuracy drop that counts (0.01 = one point).")]
        = DEFAULT_ACCURACY_TOLERANCE,
        cache_dir: Annotated[Path | None, typer.Option(
            help="Worker cache (device artifacts, run-to-run calibration).")] = None,
        report: Annotated[Path | None, typer.Option(
            help="JSON report path (default: <bundle>/verify/<time>-<profile>.json).")] = None,
        confirm_runs: Annotated[int, typer.Option(
            min=0, help="Fresh runs, each in a new worker process, that must agree before a "
                        "latency is called regressed (0: one run decides).")]
        = DEFAULT_CONFIRM_RUNS,
        confirm_gap_s: Annotated[float, typer.Option(
            min=0.0, help="Idle seconds before each fresh run after the first.")]
        = DEFAULT_CONFIRM_GAP_S,
        address: AddressOption = None) -> None:
    """Deploy a bundle on a device of a profile, measure it as its trial was measured and
    compare: exit 0 when it performs as recorded (or better), 1 when it regressed (in every
    run: a suspected regression is measured again in fresh processes), failed, or a busy device
    left it inconclusive."""
    from dse.app import verify as verify_bundle

    console = plain_console()
    stop_signals_like_ctrl_c()
    try:
        found = verify_bundle(bundle, profile=profile, address=address, tolerance=tolerance,
                              accuracy_tolerance=accuracy_tolerance, cache_dir=cache_dir,
                              report=report, confirm_runs=confirm_runs,
                              confirm_gap_s=confirm_gap_s)
    except DseError as exc:
        raise fail(exc) from None
    except KeyboardInterrupt as exc:
        console.print(f"{stopped_by(exc)}: nothing was verified", markup=False)
        raise typer.Exit(interrupt_exit_code(exc)) from None
    print_report(console, found)
    raise typer.Exit(found.exit_code)


def _sayer(console: Console) -> Callable[[str], None]:
    def say(text: str) -> None:
        console.print(text, markup=False, soft_wrap=True)

    return say


def _figure(value: float | None, ci: tuple[float, float] | None) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" + (f" [{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "")


def print_report(console: Console, found: VerifyReport) -> None:
    """What ``dse verify`` prints: the verdict, each check with its reasoning, the notes."""
    say = _sayer(console)
    say(f"{found.verdict.upper()}: {found.bundle} on {found.device}"
        + (f" ({found.device_id})" if found.device_id else "")
        + (f": {found.confirmation}" if found.confirmation else ""))
    if found.reason:
        say(f"  {found.reason}")
    for check in found.checks:
        which = f" (run {check.run})" if check.run != 1 else ""
        say(f"  {check.verdict:<9} {check.metric}: {_figure(check.recorded, check.recorded_ci)}"
            f" -> {_figure(check.measured, check.measured_ci)}{which}: {check.why}")
    if len(found.runs) > 1:
        for run in found.runs:
            figures = ", ".join(f"{c.metric} {_figure(c.measured, None)} ms" + (
                f" ({c.change_pct:+.1f}%)" if c.change_pct is not None else "")
                for c in run.checks)
            say(f"  run {run.run}: {figures}, {run.quality or 'no quality label'}, worker pid "
                f"{run.pid or '?'}")
    if found.max_abs_diff is not None:
        say(f"  outputs on the bundle's inputs: max |diff| {found.max_abs_diff:.3g} from those "
            f"recorded, same top output on {found.decisions_agree:.1%}")
    elif found.decisions_agree is not None:  # a language model: its greedy tokens
        say(f"  greedy tokens on the bundle's prompts: {found.decisions_agree:.1%} the ones "
            f"recorded at export")
    if found.measurement_quality:
        say(f"  measurement quality: {found.measurement_quality}")
    for note in found.notes:
        say(f"  note: {note}")
    say(f"  report {found.report_file}")
