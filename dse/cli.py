"""The `dse` command line: run | calibrate | validate | report | schema | devices | worker | cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dse.exceptions import DeviceError, DseError, SpecError, Terminated, interrupt_exit_code

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console
    from rich.table import Table

    from dse.api import CampaignResult
    from dse.farm.devices import DeviceInfo
    from dse.search.loop import TrialOutcome
    from dse.spec import Experiment

app = typer.Typer(
    help="Hardware-aware design-space exploration: search architecture and deployment stack "
         "together, measured on real devices.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)

EXIT_SPEC = 2
DEFAULT_PORT = 6379
AddressOption = Annotated[str | None, typer.Option(
    help="Ray head of a device farm (HOST:PORT, from `dse cluster up`); run on a machine of the farm.")]


def _console(stderr: bool = False) -> Console:
    """A console that prints text as it is: parameter values, reasons and paths may hold
    brackets (``[/x]``, a folder ``[draft] v2``) that rich markup would eat or choke on."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, markup=False)


def _stop_signals_like_ctrl_c() -> None:
    """SIGTERM (service managers, containers, batch schedulers) and SIGHUP (a closed terminal) stop
    a command the way Ctrl-C does; the search loop keeps them so once Ray has started."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise Terminated(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)


def _stopped_by(exc: KeyboardInterrupt) -> str:
    import signal

    if isinstance(exc, Terminated):
        return f"stopped by {signal.Signals(exc.signum).name}"
    return "interrupted"


def _fail(exc: DseError) -> typer.Exit:
    problems = exc.problems if isinstance(exc, SpecError) else [str(exc)]
    console = _console(stderr=True)
    for line in problems:
        console.print(line, markup=False, soft_wrap=True)
    return typer.Exit(EXIT_SPEC)


@app.command()
def validate(files: Annotated[list[Path], typer.Argument(help="YAML files to check.")]) -> None:
    """Check search-space, hardware-profile and experiment files; print `ok` or one line a problem."""
    from dse.api import validate_files

    problems = validate_files(files)
    if problems:
        raise _fail(SpecError(problems))
    print("ok")


@app.command()
def schema(out: Annotated[Path, typer.Option(help="Folder for the JSON schemas.")] = Path(
        "schemas")) -> None:
    """Write the JSON schemas of the three YAML kinds (for editor completion)."""
    from dse.spec import write_schemas

    for path in write_schemas(out):
        print(path)


def _progress_printer(console: Console) -> tuple[object, object]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False)
    return progress, progress.add_task("completed trials", total=None)


def _describe(outcome: TrialOutcome) -> str:
    c = outcome.candidate
    head = f"#{outcome.number} {c.device_profile}"
    if c.backend:
        head += f" {c.backend}/{c.precision} b{c.batch_size}"
    if c.params:  # free parameters, as compact as the arch and knobs of the front table
        head += " " + " ".join(f"{key}={_value(value)}" for key, value in c.params.items())
    if outcome.status != "ok":
        return f"{head}: {outcome.status}: {outcome.reason[:80]}"
    reused = f" (reused #{outcome.reused_from})" if outcome.reused_from is not None else ""
    if outcome.fidelity == "screen":
        reused += " (screened out)"
    if outcome.quality not in (None, "ok"):
        reused += f" [{outcome.quality}]"
    m = outcome.metrics
    if "accuracy" in m or "latency_p99_ms" in m or not m:
        return (f"{head}: acc {m.get('accuracy', float('nan')):.3f}, "
                f"p99 {m.get('latency_p99_ms', float('nan')):.3f} ms{reused}")
    # An evaluator's own metrics: the first few, as it reported them.
    return f"{head}: " + ", ".join(f"{k} {v:.4g}" for k, v in list(m.items())[:3]) + reused


def _value(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _abbreviation(key: str) -> str:
    """``num_stages`` -> ``ns``: the terminal table is narrow; its caption spells them out."""
    return "".join(part[0] for part in key.split("_") if part)


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _front_table(front: pd.DataFrame, objectives: list[str]) -> object:
    """The front as a table that fits a terminal: one compact cell per part of the configuration."""
    import pandas as pd
    from rich.table import Table

    from dse.results import PARAM_PREFIX, has_unclean, metric_column

    legend: dict[str, str] = {}
    # Free parameters are the param.* columns that are not the model's or the deployment's.
    own = ("param.family", "param.backend", "param.precision", "param.batch_size",
           "param.arch.", "param.knob.")
    free = [c for c in front.columns if c.startswith(PARAM_PREFIX) and not c.startswith(own)]
    deployed = "param.backend" in front.columns

    def joined(row: pd.Series, prefix: str) -> str:
        cells = []
        for column in row.index:
            if column.startswith(prefix) and not pd.isna(row[column]):
                key = column.removeprefix(prefix)
                legend[_abbreviation(key)] = key
                cells.append(f"{_abbreviation(key)}={row[column]}")
        return " ".join(cells)

    def values(row: pd.Series) -> str:
        return " ".join(f"{c.removeprefix(PARAM_PREFIX)}={_value(row[c])}" for c in free
                        if not pd.isna(row[c]))

    # The device column only when the front spans several devices: a terminal table is narrow;
    # the quality column only when a trial on it was not measured cleanly (non_ok_on_front).
    several = bool(len(front)) and front["device"].nunique() > 1
    unclean = has_unclean(front)
    table = Table(title=f"Pareto front ({len(front)} points)")
    table.add_column("trial", justify="right")
    if several:
        table.add_column("device")
    if deployed:
        table.add_column("runtime")
        table.add_column("batch", justify="right")
        table.add_column("arch", overflow="fold")
        table.add_column("knobs", overflow="fold")
    if free:
        table.add_column("parameters", overflow="fold")
    for name in objectives:
        table.add_column(metric_column(name), justify="right", overflow="fold")
    if unclean:
        table.add_column("quality")
    for _, row in front.iterrows():
        cells = [str(row["trial"]), *([str(row["device"])] if several else [])]
        if deployed:
            cells += [f"{row['param.backend']}/{row['param.precision']}",
                      str(row["param.batch_size"]), joined(row, "param.arch."),
                      joined(row, "param.knob.")]
        if free:
            cells.append(values(row))
        quality = [str(row["measurement_quality"]) if not pd.isna(row["measurement_quality"])
                   else ""] if unclean else []
        table.add_row(*cells, *[_number(row[metric_column(n)]) for n in objectives], *quality)
    table.caption = ", ".join(f"{short}={full}" for short, full in sorted(legend.items()))
    return table


@app.command()
def run(experiment: Annotated[Path, typer.Argument(help="Campaign YAML (experiments/X.yaml).")],
        report: Annotated[bool, typer.Option(help="Write results and dashboard at the end.")] = True,
        address: AddressOption = None,
        ) -> None:
    """Run a campaign (or resume it) until its budget of completed trials is met."""
    from dse.api import load_experiment, run_campaign
    from dse.results import quality_summary

    console = _console()
    _stop_signals_like_ctrl_c()
    try:
        loaded = load_experiment(experiment)
        progress, task = _progress_printer(console)

        def on_trial(outcome: TrialOutcome) -> None:
            progress.update(task, completed=outcome.completed,  # type: ignore[attr-defined]
                            total=outcome.budget)
            console.print(_describe(outcome), markup=False)

        console.print(f"campaign {loaded.name}: {loaded.spec.budget.trials} trials on "
                      f"{', '.join(d.name for d in loaded.devices)}; run folder {loaded.run_dir}")
        with progress:  # type: ignore[attr-defined]
            result = run_campaign(loaded, on_trial=on_trial, report=report, address=address,
                                  on_notice=console.print)
    except DseError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt as exc:
        console.print(f"{_stopped_by(exc)}: the study is consistent; run the same command again "
                      f"to resume")
        raise typer.Exit(interrupt_exit_code(exc)) from None
    if report:
        front = result.pareto()
        console.print(_front_table(front, result.objectives))
        quality = quality_summary(result.trials)
        if quality:
            console.print(f"measurement: {quality}")
        console.print(f"trials:    {result.run_dir / 'trials.parquet'}")
        console.print(f"front:     {result.run_dir / 'pareto.csv'}")
        console.print(f"dashboard: {result.dashboard}")
        _print_search_extras(console, result)


def _print_search_extras(console: Console, result: CampaignResult) -> None:
    """What screening saved and what warm starts seeded, when the campaign used them."""
    from dse.results import load_campaign

    summary = result.screening()
    if summary is not None:
        console.print(
            f"screening: {summary.screened_out} of {summary.screened_out + summary.fully_measured} "
            f"measured trials screened out; device time {summary.screen_device_seconds:.1f} s "
            f"screening + {summary.full_device_seconds:.1f} s full; saved ≈ "
            f"{summary.device_seconds_saved_est:.1f} s (estimate: screened-out trials × median "
            f"full protocol)")
        console.print(f"screening: {result.run_dir / 'screening.json'}")
    for study in load_campaign(result.run_dir, result.experiment.storage):
        plan = study.user_attrs.get("warm_start") or {}
        if plan.get("source"):
            console.print(
                f"warm start: {study.study_name} seeded {len(plan.get('seeded_from_trials', []))} "
                f"of {plan.get('front_size', 0)} front configurations of {plan['source']} "
                f"({len(plan.get('skipped', []))} skipped)")


@app.command()
def calibrate(
        experiment: Annotated[Path, typer.Argument(help="Campaign YAML (experiments/X.yaml).")],
        runs: Annotated[int, typer.Option(min=2, help="Runs, each in a fresh process.")] = 10,
        gap_s: Annotated[float, typer.Option(min=0, help="Seconds between runs.")] = 10.0,
        address: AddressOption = None) -> None:
    """Measure each device's run-to-run variation once; later campaigns widen every interval on
    that device to hold it (measurement.run_to_run: auto)."""
    from dse.calibration import calibrate as calibrate_devices

    console = _console()
    _stop_signals_like_ctrl_c()
    try:
        results = calibrate_devices(experiment, runs=runs, gap_s=gap_s, address=address)
    except DseError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt as exc:
        console.print(f"{_stopped_by(exc)}: no calibration was saved")
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


@app.command("report")
def report_cmd(
        experiment: Annotated[Path, typer.Argument(help="Campaign YAML.")],
        serve: Annotated[bool, typer.Option(
            help="Serve the dashboards folder on http://127.0.0.1:PORT/ and rebuild this "
                 "campaign's page whenever its study changes; Ctrl-C stops.")] = False,
        port: Annotated[int, typer.Option(help="Port for --serve (127.0.0.1 only; 0: any free "
                                               "port).")] = 8000,
        refresh: Annotated[float, typer.Option(help="Seconds between reloads of a live page "
                                                    "(--serve).")] = 5.0) -> None:
    """Write trials.parquet, pareto.csv, the HTML dashboard and dashboards/index.html of a
    campaign's run; with --serve, serve them on localhost and keep them current while it runs."""
    from dse.api import load_experiment, write_report

    try:
        loaded = load_experiment(experiment)
        if serve:
            _serve_dashboards(loaded, port, refresh)
            return
        paths = write_report(loaded)
    except DseError as exc:
        raise _fail(exc) from None
    for path in paths:
        print(path)


def _serve_dashboards(experiment: Experiment, port: int, refresh: float) -> None:
    """Serve until Ctrl-C; a campaign not started yet gets a page that waits for it."""
    from dse.api import write_report
    from dse.report.serve import DashboardServer, LiveCampaign

    storage = experiment.storage
    if storage.started():
        write_report(experiment)  # the tables current too, not only the page
    server = DashboardServer(experiment.dashboard_path.parent,
                             [LiveCampaign(experiment.run_dir, experiment.name, storage)],
                             port=port, refresh_seconds=refresh)
    console = _console()
    console.print(f"serving {experiment.dashboard_path.parent} on {server.url} (this machine "
                  f"only): {server.url}{experiment.dashboard_path.name}; Ctrl-C stops",
                  markup=False, soft_wrap=True)
    with server:
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            console.print("stopped serving", markup=False)


cluster_app = typer.Typer(help="Start or stop a device farm's Ray head on this machine.",
                          no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")

TempDirOption = Annotated[Path | None, typer.Option(
    help="Ray's temp root for this node (default Ray's /tmp/ray); keep the path short.")]


@cluster_app.command("up")
def cluster_up(
        port: Annotated[int, typer.Option(help="Port of the head (Ray's GCS).")] = DEFAULT_PORT,
        bind: Annotated[str, typer.Option(
            help="Address the head advertises to workers: 0.0.0.0 (Ray picks this host's "
                 "address) or one IP of this host.")] = "0.0.0.0",
        dashboard: Annotated[bool, typer.Option(help="Start Ray's dashboard (port 8265, this "
                                                     "machine only).")] = False,
        num_cpus: Annotated[int, typer.Option(help="CPUs the head offers to Ray work (none: "
                                                   "no device work runs on the head).")] = 0,
        temp_dir: TempDirOption = None) -> None:
    """Start a Ray head for a device farm, in the background, with token authentication."""
    from dse.farm.node import RAY_WORKER_PORTS, start_head, token_exposure

    try:
        head = start_head(port=port, bind=bind, dashboard=dashboard, num_cpus=num_cpus,
                          temp_dir=str(temp_dir) if temp_dir else None)
    except DseError as exc:
        raise _fail(exc) from None
    listening = ", ".join(f"{number} ({name})" for number, name in head.ports)
    lines = [
        f"Ray head running (pid {head.pid}); log: {head.log}",
        f"address for workers: {head.address}",
        f"  join a device:  dse worker --profile hw_profiles/<profile>.yaml --address {head.address}",
        f"  list devices:   dse devices --address {head.address}   (on this machine)",
        f"  run a campaign: dse run experiments/<campaign>.yaml --address {head.address}",
        f"ports open now: {listening}; Ray listens on every interface for these.",
        f"Ray worker processes take ports in {RAY_WORKER_PORTS} as they start; workers need "
        f"to reach all of them, and the head theirs: keep the farm on a trusted network.",
        f"token authentication: on; token: {head.token}. Copy it to ~/.ray/auth_token on every "
        f"worker machine (or set RAY_AUTH_TOKEN there). The token is sent unencrypted."
        if head.token else "token authentication: OFF (RAY_AUTH_MODE is set): anyone who reaches "
        "these ports can run code here.",
        f"stop: dse cluster down --port {port}",
    ]
    exposure = token_exposure(head.token)
    if exposure:
        lines.append(exposure)
    console = _console()
    for line in lines:
        console.print(line, markup=False, soft_wrap=True)


@cluster_app.command("down")
def cluster_down(port: Annotated[int, typer.Option(help="Port of the head to stop.")] = DEFAULT_PORT,
                 ) -> None:
    """Stop the Ray head that `dse cluster up` started on this machine (only its processes)."""
    from dse.farm.node import stop_head

    try:
        pid = stop_head(port)
    except DseError as exc:
        raise _fail(exc) from None
    print(f"stopped the Ray head on port {port} (pid {pid})")


@app.command()
def worker(
        profile: Annotated[Path, typer.Option(help="Hardware profile YAML of this machine's "
                                                   "device(s).")],
        address: Annotated[str, typer.Option(help="Ray head of the farm (HOST:PORT).")],
        gpus: Annotated[str | None, typer.Option(
            help="GPUs of a cuda profile, as CUDA_VISIBLE_DEVICES lists them (0,1): one device "
                 "each.")] = None,
        num_cpus: Annotated[int | None, typer.Option(help="CPUs this node offers to Ray (default: "
                                                          "all).")] = None,
        temp_dir: TempDirOption = None) -> None:
    """Join this machine's device(s) to a farm; stays in the foreground until Ctrl-C."""
    import signal

    from dse.farm.node import parse_gpus, start_worker
    from dse.spec import HardwareProfile, load_model

    console = _console()
    try:
        loaded = load_model(profile, HardwareProfile)
        node = start_worker(loaded, address, gpus=parse_gpus(gpus) if gpus is not None else None,
                            num_cpus=num_cpus, temp_dir=str(temp_dir) if temp_dir else None)
    except DseError as exc:
        raise _fail(exc) from None
    missing = {name: why for name, why in node.telemetry.items() if why != "ok"}
    console.print(f"joined {address}: {node.units} device(s) of {loaded.name} ({loaded.kind}) on "
                  f"node {node.node_id[:12]} ({node.ip}); log: {node.log}", markup=False,
                  soft_wrap=True)
    console.print("telemetry ok: " + (", ".join(n for n in node.telemetry if n not in missing)
                                      or "none"), markup=False)
    for name, why in missing.items():
        console.print(f"telemetry missing: {name}: {why}", markup=False, soft_wrap=True)
    console.print("Ctrl-C stops this node", markup=False)

    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop ends it the same way
    try:
        status = node.wait()
    except KeyboardInterrupt:
        node.stop()
        console.print(f"stopped the node of {loaded.name}", markup=False)
        return
    console.print(f"the Ray node exited (status {status}): the head went away or the node "
                  f"failed; log: {node.log}", markup=False)
    raise typer.Exit(1)


def _devices_table(devices: list[DeviceInfo]) -> Table:
    from rich.table import Table

    live = [d for d in devices if d.alive]
    table = Table(title=f"{sum(d.units for d in live)} device(s) on "
                        f"{len({d.node_id for d in live})} live node(s)")
    for name, justify in (("profile", "left"), ("kind", "left"), ("node", "left"),
                          ("host", "left"), ("health", "left"), ("units", "right"),
                          ("busy", "right"), ("telemetry ok", "left"), ("missing", "left")):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for d in devices:
        table.add_row(d.profile, d.kind, d.node_id[:12], f"{d.host} ({d.ip})", d.health,
                      str(d.units), str(d.busy),
                      ", ".join(d.telemetry_available) if d.registered else "unknown",
                      ", ".join(d.telemetry_missing) if d.registered else "unknown")
    return table


@app.command()
def devices(address: AddressOption = None) -> None:
    """List the farm's devices: profile, node, health, telemetry, busy units (default: the head
    `dse cluster up` started on this machine)."""
    from dse.farm.devices import list_devices
    from dse.farm.node import local_head_address

    address = address or local_head_address()
    if address is None:
        raise _fail(DeviceError("give the farm's address: dse devices --address HOST:PORT (no "
                                "head started by `dse cluster up` runs on this machine)"))
    console = _console()
    try:
        found = list_devices(address)
    except DseError as exc:
        raise _fail(exc) from None
    if not found:
        console.print(f"no devices at {address}: join one with `dse worker --profile "
                      f"hw_profiles/<profile>.yaml --address {address}`", markup=False)
        return
    console.print(_devices_table(found))
    for d in found:
        for device_id, detail in {**d.quarantined, **d.dead}.items():
            console.print(f"{d.profile} {device_id}: {detail}", markup=False, soft_wrap=True)
        for name, why in d.telemetry_missing.items():
            console.print(f"{d.profile} on {d.host}: {name} missing: {why}", markup=False,
                          soft_wrap=True)


def main() -> None:
    try:
        app()
    except DseError as exc:  # any error that escaped a command still gets one clear line
        print(exc, file=sys.stderr)
        sys.exit(EXIT_SPEC)


if __name__ == "__main__":
    main()
