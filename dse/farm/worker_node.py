"""`dse worker`: join this machine's device(s) of one profile to a farm as a Ray worker node, and
register them with the farm registry."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dse.core import DeviceError
from dse.farm.connection import check_reachable, connect, disconnect, parse_address, require_token
from dse.farm.node_commands import device_units, launch_env, worker_command
from dse.farm.node_process import (
    listening_ports,
    ray_executable,
    spawn,
    state_dir,
    stop_process_tree,
    wait_for,
)
from dse.farm.resources import WORKER_LABEL

if TYPE_CHECKING:
    from dse.spec import HardwareProfile


@dataclass
class WorkerNode:
    """A Ray worker node started by `dse worker`; ``stop`` ends exactly its processes."""

    process: subprocess.Popen[bytes]
    node_id: str
    ip: str
    units: int
    log: Path
    telemetry: dict[str, str]

    def wait(self) -> int:
        """Block until the node exits (its head went away, or it crashed); its exit status."""
        return self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:  # a terminal's Ctrl-C may have stopped it already
            stop_process_tree(self.process.pid)
        self.process.wait()


def start_worker(profile: HardwareProfile, address: str, gpus: list[str] | None = None,
                 num_cpus: int | None = None, temp_dir: str | None = None,
                 timeout_s: float = 120) -> WorkerNode:
    """Join this machine's device(s) of ``profile`` to the farm and register them."""
    if profile.kind == "replay":
        raise DeviceError(f"profile {profile.name!r} is a replay device: the campaign's driver "
                          f"serves it from its table, so it never joins a farm")
    worker_id = uuid.uuid4().hex[:16]
    command = worker_command(ray_executable(), profile, address=address, worker_id=worker_id,
                             gpus=gpus, num_cpus=num_cpus, temp_dir=temp_dir)
    check_reachable(*parse_address(address))
    require_token(launch_env(command.env, os.environ))
    log = state_dir() / "logs" / f"worker-{profile.name}-{worker_id[:8]}.log"
    proc = spawn(command, log, detach=False)
    deadline = time.monotonic() + timeout_s
    try:
        # A driver needs a raylet on its machine: wait for this node's before connecting.
        wait_for(lambda: any(name == "raylet" for _, name in listening_ports(proc.pid)), proc,
                 log, deadline, address)
        connect(address)  # before Ray is imported: it reads its mode from the environment then
        import ray

        from dse.farm.farm_registry import register_worker

        found: list[dict[str, object]] = []

        def joined() -> bool:
            found[:] = [n for n in ray.nodes()  # type: ignore[no-untyped-call]
                        if n["Alive"] and n["Labels"].get(WORKER_LABEL) == worker_id]
            return bool(found)

        wait_for(joined, proc, log, deadline, address)
        node_id, ip = str(found[0]["NodeID"]), str(found[0]["NodeManagerAddress"])
        telemetry = register_worker(node_id, profile, gpus or [], device_units(profile, gpus or []))
    except BaseException:
        stop_process_tree(proc.pid)
        raise
    finally:
        disconnect()  # the node runs on; this process need not stay a driver
    return WorkerNode(proc, node_id, ip, device_units(profile, gpus or []), log, telemetry)
