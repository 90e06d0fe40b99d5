"""A farm node as a child process of dse: find Ray's ``ray`` command, start ``ray start --block``
with its log, wait until the node is ready, and stop exactly its process tree.

Stopping that child (SIGTERM) stops exactly its node's processes; ``ray stop`` would kill every
Ray process on the machine, other users' included.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dse.core import DeviceError
from dse.farm.connection import connection_error
from dse.farm.node_commands import NodeCommand, launch_env


def ray_executable(python: str = sys.executable, search_path: str | None = None) -> str:
    """The ``ray`` command of this environment (beside its Python), else the one on PATH."""
    beside = Path(python).parent / "ray"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("ray", path=search_path)
    if found is None:
        raise DeviceError(f"the `ray` command is not installed (looked beside {python} and on "
                          f"PATH); install dse's dependencies: pip install 'ray>=2.60'")
    return found


def state_dir() -> Path:
    """Where dse keeps the logs and pid files of the nodes it started on this machine."""
    return Path.home() / ".dse"


def spawn(command: NodeCommand, log: Path, *, detach: bool) -> subprocess.Popen[bytes]:
    """Start a node; its output goes to ``log``. A detached node outlives this process and ignores
    this terminal's Ctrl-C; an attached one is the caller's to stop."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(command.argv, env=launch_env(command.env, os.environ),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=detach)


def log_tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def stop_process_tree(pid: int, timeout_s: float = 60.0) -> None:
    """SIGTERM a ``ray start --block`` process (it stops its node's processes itself), then make
    sure nothing of that tree is left."""
    import psutil

    try:
        parent = psutil.Process(pid)
        children = parent.children(recursive=True)
    except psutil.NoSuchProcess:
        return
    parent.terminate()
    _, alive = psutil.wait_procs([parent], timeout=timeout_s)
    for proc in alive:
        proc.kill()
    left = [p for p in children if p.is_running()]
    for proc in left:
        proc.terminate()
    _, alive = psutil.wait_procs(left, timeout=10)
    for proc in alive:
        proc.kill()


def listening_ports(pid: int) -> list[tuple[int, str]]:
    """(port, process name) of every TCP socket the process tree of ``pid`` listens on."""
    import psutil

    found: set[tuple[int, str]] = set()
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    for proc in procs:
        try:
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found.add((conn.laddr.port, proc.name()))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return sorted(found)


def accepts(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at ``host:port`` now."""
    try:
        socket.create_connection((host, port), timeout=0.5).close()
    except OSError:
        return False
    return True


def wait_for(ready: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path,
             deadline: float, address: str) -> None:
    """Poll ``ready`` until it holds; fail if the node exits, is refused its token, or is late."""
    while not ready():
        if proc.poll() is not None:
            raise DeviceError(f"`ray start` exited with status {proc.returncode}: {log_tail(log)} "
                              f"(log: {log})")
        tail = log_tail(log, lines=20)
        if "InvalidAuthToken" in tail:
            raise DeviceError(connection_error(address, "InvalidAuthToken"))
        if time.monotonic() > deadline:
            raise DeviceError(f"the Ray node did not come up in time: {log_tail(log)} (log: {log})")
        time.sleep(0.3)
