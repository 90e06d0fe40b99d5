"""The Ray nodes of a device farm: a head (`dse cluster up`) and device workers (`dse worker`).

Everything goes through Ray's own CLI. ``ray start --block`` runs as a child process, so stopping
that child (SIGTERM) stops exactly its node's processes; ``ray stop`` would kill every Ray process
on the machine, other users' included.

What Ray 2.60 does that this module is built around:

- A multi-node cluster needs Ray's cluster mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` unset or 1);
  in single-machine mode ``ray start --address`` refuses to join. In cluster mode Ray turns
  127.0.0.1 into the host's routable address, and the GCS and raylet listen on every interface:
  Ray has no listen-address option. A farm relies on token authentication and a trusted network.
- Token authentication (``RAY_AUTH_MODE=token``): ``ray start --head`` needs a token to exist
  (``ray get-auth-token --generate`` writes ``~/.ray/auth_token``); joining nodes and drivers need
  ``RAY_AUTH_MODE=token`` and the same token (``RAY_AUTH_TOKEN``, the file named by
  ``RAY_AUTH_TOKEN_PATH``, or ``~/.ray/auth_token``, in that order).
- A driver (``ray.init(address=...)``) attaches to a raylet on its own machine, so `dse run` and
  `dse devices` with ``--address`` run on a machine of the farm, usually the head.
- Drivers of a GCS that does not answer hang for minutes; a TCP check first fails fast.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dse.atomic import atomic_write_text
from dse.exceptions import DeviceError
from dse.farm.cluster import device_resource

if TYPE_CHECKING:
    from dse.spec import HardwareProfile

PROFILE_LABEL = "dse.io/profile"
KIND_LABEL = "dse.io/kind"
WORKER_LABEL = "dse.io/worker"  # a fresh id per `dse worker`, to find the node it started
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


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 as ``[::1]:6379``) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DeviceError(f"a Ray address must read HOST:PORT (e.g. 10.0.0.5:6379), got {address!r}")
    return host, int(port)


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


def token_source(environ: Mapping[str, str], home: Path) -> str | None:
    """Where Ray will read its auth token from, in Ray's order, or None when there is none."""
    if environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    path = Path(environ["RAY_AUTH_TOKEN_PATH"]) if environ.get("RAY_AUTH_TOKEN_PATH") else (
        home / ".ray" / "auth_token")
    return str(path) if path.is_file() and path.stat().st_size > 0 else None


def require_token(environ: Mapping[str, str]) -> str | None:
    """Where the token comes from, or None when auth is off; an error if it is on without one."""
    if environ.get("RAY_AUTH_MODE", "token") != "token":
        return None
    source = token_source(environ, Path.home())
    if source is None:
        raise DeviceError("Ray token authentication is on but this machine has no token: copy the "
                          "head's ~/.ray/auth_token to ~/.ray/auth_token here (or set "
                          "RAY_AUTH_TOKEN); RAY_AUTH_MODE=disabled only for a head without auth")
    return source


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


def check_reachable(host: str, port: int, timeout_s: float = 5.0) -> None:
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        raise DeviceError(f"cannot reach the Ray head at {host}:{port} ({exc.strerror or exc}); "
                          f"is `dse cluster up` running there, and port {port} open to this "
                          f"machine?") from None


def connect(address: str) -> None:
    """Attach this process to the farm at ``HOST:PORT`` as a Ray driver.

    Must run on a machine of the farm (Ray drivers use a local raylet) and before this process
    imports Ray in single-machine mode. Token auth is on unless ``RAY_AUTH_MODE`` says otherwise.
    """
    host, port = parse_address(address)
    check_reachable(host, port)
    # Read by Ray when it is imported: a driver of a farm must be in cluster mode.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    token = require_token(os.environ)
    import ray
    from ray._private import ray_constants

    if not ray_constants.ENABLE_RAY_CLUSTER:
        raise DeviceError("this process loaded Ray in single-machine mode "
                          "(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0) and cannot join a farm")
    if ray.is_initialized():
        connected = ray.get_runtime_context().gcs_address
        if parse_address(connected)[1] == port:
            return
        raise DeviceError(f"this process is already connected to the Ray cluster at {connected}")
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, TimeoutError, ray.exceptions.RayError) as exc:
        raise DeviceError(connection_error(address, str(exc), token is not None)) from None


def _disconnect() -> None:
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()


def connection_error(address: str, message: str, token_auth: bool = True) -> str:
    """One line saying why joining the farm failed, with what to do about it."""
    if "InvalidAuthToken" in message or "authentication" in message.lower():
        return (f"the Ray head at {address} rejected this machine's token: use the head's "
                f"~/.ray/auth_token here (or RAY_AUTH_TOKEN), and RAY_AUTH_MODE=token")
    if "No node info found" in message:
        return (f"no Ray node of the farm at {address} runs on this machine: run this on the head "
                f"(or on a machine that joined with `dse worker`)")
    first = message.strip().splitlines()[0] if message.strip() else "no reason given"
    # Ray reports a refused token only in its logs; the error itself just says it failed.
    hint = "; is this machine's Ray token the head's?" if token_auth else ""
    return f"could not connect to the Ray cluster at {address}: {first}{hint}"


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


# -- the head ---------------------------------------------------------------------------------------


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
    if _accepts(local, port):  # else the readiness check below would find the other server
        raise DeviceError(f"port {port} is already in use on this machine (another Ray head?); "
                          f"choose another with --port")
    token = _ensure_token(command.argv[0], launch_env(command.env, os.environ))
    log = state_dir() / "logs" / f"head-{port}.log"
    proc = spawn(command, log, detach=True)
    try:
        _wait_for(lambda: _accepts(local, port), proc, log, time.monotonic() + timeout_s,
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


def _accepts(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
    except OSError:
        return False
    return True


def _wait_for(ready: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path,
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


def _advertised_address(address: str) -> str:
    """Join as a driver (which proves the head works, token included), read the address Ray
    advertises, and create the registry on the head before any worker needs it."""
    connect(address)  # before Ray is imported: it reads its mode from the environment then
    import ray

    from dse.farm.registry import get_registry

    try:
        head = next(n for n in ray.nodes()  # type: ignore[no-untyped-call]
                    if n["Alive"] and "node:__internal_head__" in n["Resources"])
        get_registry()
        return f"{head['NodeManagerAddress']}:{parse_address(address)[1]}"
    finally:
        ray.shutdown()


# -- a device worker ------------------------------------------------------------------------------


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
        _wait_for(lambda: any(name == "raylet" for _, name in listening_ports(proc.pid)), proc,
                  log, deadline, address)
        connect(address)  # before Ray is imported: it reads its mode from the environment then
        import ray

        from dse.farm.registry import register_worker

        found: list[dict[str, object]] = []

        def joined() -> bool:
            found[:] = [n for n in ray.nodes()  # type: ignore[no-untyped-call]
                        if n["Alive"] and n["Labels"].get(WORKER_LABEL) == worker_id]
            return bool(found)

        _wait_for(joined, proc, log, deadline, address)
        node_id, ip = str(found[0]["NodeID"]), str(found[0]["NodeManagerAddress"])
        telemetry = register_worker(node_id, profile, gpus or [], device_units(profile, gpus or []))
    except BaseException:
        stop_process_tree(proc.pid)
        raise
    finally:
        _disconnect()  # the node runs on; this process need not stay a driver
    return WorkerNode(proc, node_id, ip, device_units(profile, gpus or []), log, telemetry)
