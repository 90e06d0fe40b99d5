"""The `dse` commands of a device farm: ``cluster up`` and ``cluster down`` start and stop a Ray
head on this machine, ``worker`` joins this machine's devices to a farm, ``devices`` lists the
farm's devices (without a farm: this machine and the profiles that fit it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dse.cli.common import AddressOption, fail, plain_console
from dse.core import DseError

if TYPE_CHECKING:
    from rich.table import Table

    from dse.farm import DeviceInfo

DEFAULT_PORT = 6379

cluster_app = typer.Typer(help="Start or stop a device farm's Ray head on this machine.",
                          no_args_is_help=True)

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
    from dse.farm import RAY_WORKER_PORTS, start_head, token_exposure

    try:
        head = start_head(port=port, bind=bind, dashboard=dashboard, num_cpus=num_cpus,
                          temp_dir=str(temp_dir) if temp_dir else None)
    except DseError as exc:
        raise fail(exc) from None
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
    console = plain_console()
    for line in lines:
        console.print(line, markup=False, soft_wrap=True)


@cluster_app.command("down")
def cluster_down(port: Annotated[int, typer.Option(help="Port of the head to stop.")] = DEFAULT_PORT,
                 ) -> None:
    """Stop the Ray head that `dse cluster up` started on this machine (only its processes)."""
    from dse.farm import stop_head

    try:
        pid = stop_head(port)
    except DseError as exc:
        raise fail(exc) from None
    print(f"stopped the Ray head on port {port} (pid {pid})")


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

    from dse.farm import parse_gpus, start_worker
    from dse.spec import HardwareProfile, load_model

    console = plain_console()
    try:
        loaded = load_model(profile, HardwareProfile)
        node = start_worker(loaded, address, gpus=parse_gpus(gpus) if gpus is not None else None,
                            num_cpus=num_cpus, temp_dir=str(temp_dir) if temp_dir else None)
    except DseError as exc:
        raise fail(exc) from None
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


def devices(address: AddressOption = None,
            profiles: Annotated[Path, typer.Option(
                help="Without a farm: the folder of hardware profiles to match against this "
                     "machine.")] = Path("hw_profiles")) -> None:
    """List the farm's devices: profile, node, health, telemetry, busy units (default: the head
    `dse cluster up` started on this machine). Without a farm: this machine, as an embedded
    `dse run` measures it, and the profiles that fit it."""
    from dse.farm import list_devices, local_head_address

    address = address or local_head_address()
    if address is None:
        _print_this_machine(profiles)
        return
    console = plain_console()
    try:
        found = list_devices(address)
    except DseError as exc:
        raise fail(exc) from None
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


def _print_this_machine(profiles: Path) -> None:
    from dse.cli.this_machine import describe_this_machine, this_machine

    console = plain_console()
    console.print("no farm address given and no head of `dse cluster up` runs here: this machine, "
                  "as an embedded `dse run` measures it", markup=False)
    for line in describe_this_machine(this_machine(), profiles):
        console.print(f"  {line}", markup=False)
    console.print("a farm's devices: dse devices --address HOST:PORT (the address `dse cluster up` "
                  "printed)", markup=False)
