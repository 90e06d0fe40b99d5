"""The `dse` commands on a campaign: ``run`` it (or resume it) until its budget is met,
``calibrate`` its devices' run-to-run variation, and ``report`` it (or serve its dashboards while
it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dse.cli.common import AddressOption, fail, plain_console, stop_signals_like_ctrl_c, stopped_by
from dse.cli.trial_display import describe, front_table, progress_printer
from dse.core import DseError, StudyAttr, interrupt_exit_code

if TYPE_CHECKING:
    import optuna
    import pandas as pd
    from rich.console import Console

    from dse.app import CampaignResult
    from dse.search import TrialOutcome
    from dse.spec import Experiment


def run(experiment: Annotated[Path, typer.Argument(help="Campaign YAML (experiments/X.yaml).")],
        report: Annotated[bool, typer.Option(help="Write results and dashboard at the end.")] = True,
        address: AddressOption = None,
        ) -> None:
    """Run a campaign (or resume it) until its budget of completed trials is met."""
    from dse.app import ResumeNotice, load_experiment, run_campaign

    console = plain_console()
    stop_signals_like_ctrl_c()
    try:
        loaded = load_experiment(experiment)
        objectives = [o.metric for o in loaded.space.objectives]
        progress, task = progress_printer(console, loaded.spec.budget.trials * len(loaded.devices))

        def on_trial(outcome: TrialOutcome) -> None:
            progress.update(task, completed=outcome.completed)  # type: ignore[attr-defined]
            if outcome.reused_from is None:  # a reused repeat measured nothing: no line
                console.print(describe(outcome, objectives), markup=False)

        def on_notice(notice: str) -> None:
            if isinstance(notice, ResumeNotice):  # the bar starts where the campaign stands
                progress.update(task, completed=notice.done)  # type: ignore[attr-defined]
            console.print(notice, markup=False)

        console.print(_first_line(loaded, report), markup=False)
        with progress:  # type: ignore[attr-defined]
            result = run_campaign(loaded, on_trial=on_trial, report=report, address=address,
                                  on_notice=on_notice)
    except DseError as exc:
        raise fail(exc) from None
    except KeyboardInterrupt as exc:
        console.print(f"{stopped_by(exc)}: the study is consistent; run the same command again "
                      f"to resume")
        raise typer.Exit(interrupt_exit_code(exc)) from None
    if report:
        _print_results(console, result)


def _first_line(experiment: Experiment, report: bool) -> str:
    """What the run is about to do and where everything it writes goes."""
    devices = ", ".join(d.name for d in experiment.devices)
    each = "each of " if len(experiment.devices) > 1 else ""
    dashboard = f"dashboard {experiment.dashboard_path}" if report else "no report (--no-report)"
    return (f"campaign {experiment.name}: {experiment.spec.budget.trials} distinct candidates on "
            f"{each}{devices}; run folder {experiment.run_dir}; {dashboard}")


def _print_results(console: Console, result: CampaignResult) -> None:
    """The front, the measurement's quality, where the files are, and what screening and warm
    starts did: from one read of the campaign's studies."""
    from dse.results import duel_summary, front_frame, load_campaign, quality_summary, trials_frame

    studies = load_campaign(result.run_dir, result.experiment.storage)
    trials = trials_frame(studies)
    console.print(front_table(front_frame(trials, result.objectives), result.objectives))
    quality = quality_summary(trials)
    if quality:
        console.print(f"measurement: {quality}")
    duels = duel_summary(studies)
    if duels:
        console.print(f"duels:     {duels}")
    console.print(f"trials:    {result.run_dir / 'trials.parquet'}")
    console.print(f"front:     {result.run_dir / 'pareto.csv'}")
    console.print(f"dashboard: {result.dashboard}")
    _print_search_extras(console, result, studies, trials)


def _print_search_extras(console: Console, result: CampaignResult, studies: list[optuna.Study],
                         trials: pd.DataFrame) -> None:
    """What screening saved and what warm starts seeded, when the campaign used them."""
    from dse.results import screening_summary

    summary = screening_summary(trials)
    if summary is not None:
        console.print(
            f"screening: {summary.screened_out} of {summary.screened_out + summary.fully_measured} "
            f"measured trials screened out; device time {summary.screen_device_seconds:.1f} s "
            f"screening + {summary.full_device_seconds:.1f} s full; saved ≈ "
            f"{summary.device_seconds_saved_est:.1f} s (estimate: screened-out trials × median "
            f"full protocol)")
        console.print(f"screening: {result.run_dir / 'screening.json'}")
    for study in studies:
        plan = study.user_attrs.get(StudyAttr.WARM_START) or {}
        if plan.get("source"):
            console.print(
                f"warm start: {study.study_name} seeded {len(plan.get('seeded_from_trials', []))} "
                f"of {plan.get('front_size', 0)} front configurations of {plan['source']} "
                f"({len(plan.get('skipped', []))} skipped)")


def calibrate(
        experiment: Annotated[Path, typer.Argument(help="Campaign YAML (experiments/X.yaml).")],
        runs: Annotated[int, typer.Option(min=2, help="Runs, each in a fresh process.")] = 10,
        gap_s: Annotated[float, typer.Option(min=0, help="Seconds between runs.")] = 10.0,
        address: AddressOption = None) -> None:
    """Measure each device's run-to-run variation once; later campaigns widen every interval on
    that device to hold it (measurement.run_to_run: auto)."""
    from dse.app import calibrate as calibrate_devices

    console = plain_console()
    stop_signals_like_ctrl_c()
    try:
        results = calibrate_devices(experiment, runs=runs, gap_s=gap_s, address=address)
    except DseError as exc:
        raise fail(exc) from None
    except KeyboardInterrupt as exc:
        console.print(f"{stopped_by(exc)}: no calibration was saved")
        raise typer.Exit(interrupt_exit_code(exc)) from None
    for result in results:
        if result.calibration is None:
            console.print(f"{result.device_id}: calibration failed: {result.error}", markup=False,
                          soft_wrap=True)
            continue
        console.print(f"{result.device_id}: {result.calibration.describe()}; saved to "
                      f"{result.path}", markup=False, soft_wrap=True)
    if any(result.calibration is None for result in results):
        raise typer.Exit(1)


def report_cmd(
        experiment: Annotated[Path, typer.Argument(help="Campaign YAML.")],
        serve: Annotated[bool, typer.Option(
            help="Serve the dashboards folder on http://127.0.0.1:PORT/ and rebuild this "
                 "campaign's page whenever its study changes; Ctrl-C stops.")] = False,
        port: Annotated[int, typer.Option(help="Port for --serve (127.0.0.1 only; 0: any free "
                                               "port).")] = 8000,
        refresh: Annotated[float, typer.Option(help="Seconds between reloads of a live page "
                                                    "(--serve).")] = 5.0) -> None:
    """Write trials.parquet, pareto.csv, the HTML dashboard and its folder's index.html of a
    campaign's run; with --serve, serve them on localhost and keep them current while it runs."""
    from dse.app import load_experiment, write_report

    try:
        loaded = load_experiment(experiment)
        if serve:
            _serve_report(loaded, port, refresh)
            return
        paths = write_report(loaded)
    except DseError as exc:
        raise fail(exc) from None
    for path in paths:
        print(path)


def _serve_report(experiment: Experiment, port: int, refresh: float) -> None:
    """Serve until Ctrl-C; a campaign not started yet gets a page that waits for it."""
    from dse.app import write_report
    from dse.report import DashboardServer, LiveCampaign

    storage = experiment.storage
    if storage.started():
        write_report(experiment)  # the tables current too, not only the page
    server = DashboardServer(experiment.dashboard_path.parent,
                             [LiveCampaign(experiment.run_dir, experiment.name, storage,
                                           experiment.path)],
                             port=port, refresh_seconds=refresh)
    console = plain_console()
    console.print(f"serving {experiment.dashboard_path.parent} on {server.url} (this machine "
                  f"only): {server.url}{experiment.dashboard_path.name}; Ctrl-C stops",
                  markup=False, soft_wrap=True)
    with server:
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            console.print("stopped serving", markup=False)
