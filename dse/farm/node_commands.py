"""The ``ray start`` command lines of a farm's nodes (the head of `dse cluster up`, the device
workers of `dse worker`) and the environment each node runs in, checked before anything starts.

Every node runs Ray's cluster mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` unset or 1): in
single-machine mode ``ray start --address`` refuses to join. In cluster mode Ray turns 127.0.0.1
into the host's routable address, and the GCS and raylet listen on every interface: Ray has no
listen-address option. A farm relies on token authentication and a trusted network.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dse.core import DeviceError
from dse.farm.connection import parse_address
from dse.farm.resources import KIND_LABEL, PROFILE_LABEL, WORKER_LABEL, device_resource

if TYPE_CHECKING:
    from dse.spec import HardwareProfile

ALL_INTERFACES = "0.0.0.0"
RAY_WORKER_PORTS = "10002-19999"  # `ray start`'s default range for worker processes
# Every farm node: cluster mode, no usage reporting, workers at normal priority (Ray's default
# niceness of 15 lets any busy process starve a timing), token authentication on, and a prompt
# stop: Ray otherwise drains a node for up to 30 s on SIGTERM, waiting on actors that never end
# (the registry, device workers); the dispatcher retries an interrupted trial elsewhere.
NODE_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_worker_niceness": "0",
    "RAY_AUTH_MODE": "token",
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
}
_LABEL_VALUE_MAX = 63


@dataclass(frozen=True)
class NodeCommand:
    """A ``ray start`` command line and the variables its node needs on top of the caller's."""

    argv: list[str]
    env: dict[str, str]


def parse_gpus(text: str) -> list[str]:
    """``"0,1"`` -> ``["0", "1"]``: GPU indices or GPU-/MIG- UUIDs, as CUDA_VISIBLE_DEVICES takes."""
    gpus = [part.strip() for part in text.split(",") if part.strip()]
    bad = [g for g in gpus if not (g.isdigit() or g.startswith(("GPU-", "MIG-")))]
    if not gpus or bad or len(set(gpus)) != len(gpus):
        raise DeviceError(f"--gpus must list distinct GPU indices or GPU-/MIG- UUIDs separated by "
                          f"commas (e.g. 0,1), got {text!r}")
    return gpus


def device_units(profile: HardwareProfile, gpus: list[str]) -> int:
    """Devices a worker node offers: one per GPU given on a cuda profile, else the one board/CPU."""
    if profile.kind == "cuda":
        if not gpus:
            raise DeviceError(f"profile {profile.name!r} is a cuda profile: say which GPUs it "
                              f"covers with --gpus (e.g. --gpus 0 or --gpus 0,1)")
        return len(gpus)
    if gpus:
        raise DeviceError(f"--gpus is for cuda profiles; {profile.name!r} is a {profile.kind} "
                          f"profile, one device per node")
    return 1


def node_labels(profile: HardwareProfile, worker_id: str) -> str:
    """The ``--labels`` value: profile name, kind and this worker's id (Ray's key=value list)."""
    name = profile.name
    if len(name) > _LABEL_VALUE_MAX or not name[-1].isalnum():
        raise DeviceError(f"profile name {name!r} cannot be a Ray node label: it must be at most "
                          f"{_LABEL_VALUE_MAX} characters and end with a letter or digit")
    return f"{PROFILE_LABEL}={name},{KIND_LABEL}={profile.kind},{WORKER_LABEL}={worker_id}"


def head_command(ray_cli: str, *, port: int = 6379, bind: str = ALL_INTERFACES,
                 dashboard: bool = False, num_cpus: int = 0,
                 temp_dir: str | None = None) -> NodeCommand:
    """``ray start --head``: no CPUs by default (no device work runs on the head), dashboard off."""
    check_bind(bind)
    argv = [ray_cli, "start", "--head", "--port", str(port), "--num-cpus", str(num_cpus),
            "--include-dashboard", str(dashboard).lower(), "--disable-usage-stats", "--block"]
    if bind != ALL_INTERFACES:
        argv += ["--node-ip-address", bind]
    if temp_dir is not None:
        argv += ["--temp-dir", temp_dir]
    return NodeCommand(argv, dict(NODE_ENV))


def worker_command(ray_cli: str, profile: HardwareProfile, *, address: str, worker_id: str,
                   gpus: list[str] | None = None, num_cpus: int | None = None,
                   temp_dir: str | None = None) -> NodeCommand:
    """``ray start --address``: one ``dse_device:<profile>`` unit per device, profile labels, and
    for cuda the GPUs as Ray GPUs so each device worker gets one GPU and its CUDA_VISIBLE_DEVICES."""
    parse_address(address)
    gpus = gpus or []
    units = device_units(profile, gpus)
    argv = [ray_cli, "start", "--address", address,
            "--resources", json.dumps({device_resource(profile.name): units}),
            "--labels", node_labels(profile, worker_id),
            # Without GPUs a node claims none, so a cpu worker never takes a GPU of its machine.
            "--num-gpus", str(len(gpus)), "--disable-usage-stats", "--block"]
    if num_cpus is not None:
        argv += ["--num-cpus", str(num_cpus)]
    if temp_dir is not None:
        argv += ["--temp-dir", temp_dir]
    env = dict(NODE_ENV)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    return NodeCommand(argv, env)


def check_bind(bind: str) -> None:
    """0.0.0.0 or one IP address of this host; loopback is refused (see the module docstring)."""
    try:
        ip = ipaddress.ip_address(bind)
    except ValueError:
        raise DeviceError(f"--bind must be 0.0.0.0 or an IP address of this host, got {bind!r}") from None
    if ip.is_loopback:
        raise DeviceError(f"--bind {bind}: Ray 2.60 accepts no worker node on a loopback-only head; "
                          f"use --bind 0.0.0.0 or this host's address on the farm network (a "
                          f"single machine needs no farm: `dse run` starts its own Ray)")


def launch_env(command_env: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """The started node's environment: the caller's plus the node's, except that a
    ``RAY_AUTH_MODE`` the user set explicitly (e.g. ``disabled``) is kept."""
    env = {**environ, **command_env}
    if "RAY_AUTH_MODE" in environ:
        env["RAY_AUTH_MODE"] = environ["RAY_AUTH_MODE"]
    return env
