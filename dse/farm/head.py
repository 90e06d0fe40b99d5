"""The farm's head node on this machine (`dse cluster up` / `dse cluster down`): start it with an
auth token, record it, find it again, stop it.

``ray start --head`` with token authentication needs a token to exist; Ray's own generator
(``ray get-auth-token --generate``) writes ``~/.ray/auth_token``, which workers and drivers of the
farm then need a copy of.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dse.core import DeviceError
from dse.farm.connection import connect, parse_address, require_token, token_source
from dse.farm.node_commands import ALL_INTERFACES, head_command, launch_env
from dse.farm.node_process import (
    accepts,
    listening_ports,
    ray_executable,
    spawn,
    state_dir,
    stop_process_tree,
    wait_for,
)
from dse.util import atomic_write_text


@dataclass(frozen=True)
class HeadInfo:
    """A head started by `dse cluster up`: what to tell workers and what it opened."""

    pid: int
    address: str  # the address Ray advertises, to give `dse worker --address`
    ports: list[tuple[int, str]]  # (port, process) listening now
    log: Path
    token: str | None  # where the auth token is read from; None when auth is off


def _head_record(port: int) -> Path:
    return state_dir() / "cluster" / f"head-{port}.json"


def recorded_head(port: int) -> dict[str, object] | None:
    """The head dse started on this port of this machine, if it still runs (a stale record goes)."""
    import psutil

    record = _head_record(port)
    try:
        data: dict[str, object] = json.loads(record.read_text())
        cmdline = psutil.Process(int(str(data["pid"]))).cmdline()
    except (OSError, ValueError, KeyError, psutil.NoSuchProcess, psutil.AccessDenied):
        record.unlink(missing_ok=True)
        return None
    if not {"start", "--head", str(port)} <= set(cmdline):  # the pid went to another program
        record.unlink(missing_ok=True)
        return None
    return data


def local_head_address() -> str | None:
    """The address of the one head dse runs on this machine, if there is exactly one."""
    ports = [int(p.stem.removeprefix("head-")) for p in (state_dir() / "cluster").glob("head-*.json")
             if p.stem.removeprefix("head-").isdigit()]
    running = [head for head in map(recorded_head, ports) if head is not None]
    return str(running[0]["address"]) if len(running) == 1 else None


def start_head(port: int = 6379, bind: str = ALL_INTERFACES, dashboard: bool = False,
               num_cpus: int = 0, temp_dir: str | None = None, timeout_s: float = 90) -> HeadInfo:
    """Start a detached head node, wait until drivers can join it, create the farm registry."""
    command = head_command(ray_executable(), port=port, bind=bind, dashboard=dashboard,
                           num_cpus=num_cpus, temp_dir=temp_dir)
    running = recorded_head(port)
    if running is not None:
        raise DeviceError(f"dse already runs a head on port {port} (pid {running['pid']}); "
                          f"stop it first with `dse cluster down --port {port}`")
    local = "127.0.0.1" if bind == ALL_INTERFACES else bind
    if accepts(local, port):  # else the readiness check below would find the other server
        raise DeviceError(f"port {port} is already in use on this machine (another Ray head?); "
                          f"choose another with --port")
    token = _ensure_token(command.argv[0], launch_env(command.env, os.environ))
    log = state_dir() / "logs" / f"head-{port}.log"
    proc = spawn(command, log, detach=True)
    try:
        wait_for(lambda: accepts(local, port), proc, log, time.monotonic() + timeout_s,
                 f"{local}:{port}")
        address = _advertised_address(f"{local}:{port}")
    except BaseException:
        stop_process_tree(proc.pid)
        raise
    atomic_write_text(_head_record(port), json.dumps({"pid": proc.pid, "address": address,
                                                     "log": str(log)}))
    return HeadInfo(proc.pid, address, listening_ports(proc.pid), log, token)


def stop_head(port: int = 6379) -> int:
    """Stop the head `dse cluster up` started on this port; returns its pid."""
    running = recorded_head(port)
    if running is None:
        raise DeviceError(f"dse runs no head on port {port} on this machine (a head started with "
                          f"`ray start --head` stops with `ray stop`)")
    pid = int(str(running["pid"]))
    stop_process_tree(pid)
    _head_record(port).unlink(missing_ok=True)
    return pid


def _ensure_token(ray_cli: str, env: Mapping[str, str]) -> str | None:
    """Make sure the head has a token to enforce (Ray's own generator writes ~/.ray/auth_token),
    readable by its owner only when dse made it."""
    if env.get("RAY_AUTH_MODE") != "token":
        return None
    if token_source(env, Path.home()) is None:
        # The command prints the token; it is not echoed here.
        made = subprocess.run([ray_cli, "get-auth-token", "--generate"], env=dict(env),
                              capture_output=True, text=True, check=False)
        if made.returncode != 0:
            raise DeviceError(f"`ray get-auth-token --generate` failed: {made.stderr.strip()}")
        created = token_source(env, Path.home())
        if created is not None and Path(created).is_file():
            # Ray writes it 0644: any local user could read it, join the farm and run code on
            # every device.
            Path(created).chmod(0o600)
    return require_token(env)


def token_exposure(source: str | None) -> str:
    """A warning when the token file ``source`` can be read by other users of this machine,
    else "" (also for a token from the environment, which has no file)."""
    if source is None or not Path(source).is_file():
        return ""
    mode = Path(source).stat().st_mode & 0o777
    if not mode & 0o077:
        return ""
    return (f"warning: the Ray token {source} is readable by other users of this machine "
            f"(mode {mode:o}): whoever reads it can join the farm and run code on every device; "
            f"`chmod 600 {source}`")


def _advertised_address(address: str) -> str:
    """Join as a driver (which proves the head works, token included), read the address Ray
    advertises, and create the registry on the head before any worker needs it."""
    connect(address)  # before Ray is imported: it reads its mode from the environment then
    import ray

    from dse.farm.farm_registry import get_registry

    try:
        head = next(n for n in ray.nodes()  # type: ignore[no-untyped-call]
                    if n["Alive"] and "node:__internal_head__" in n["Resources"])
        get_registry()
        return f"{head['NodeManagerAddress']}:{parse_address(address)[1]}"
    finally:
        ray.shutdown()
