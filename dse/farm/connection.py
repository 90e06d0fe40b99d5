"""Join this process to a farm as a Ray driver: the head's address, the auth token, the reasons a
join failed.

What Ray 2.60 does that this module is built around:

- Token authentication (``RAY_AUTH_MODE=token``): joining nodes and drivers need
  ``RAY_AUTH_MODE=token`` and the head's token (``RAY_AUTH_TOKEN``, the file named by
  ``RAY_AUTH_TOKEN_PATH``, or ``~/.ray/auth_token``, in that order).
- A driver (``ray.init(address=...)``) attaches to a raylet on its own machine, so `dse run` and
  `dse devices` with ``--address`` run on a machine of the farm, usually the head.
- Drivers of a GCS that does not answer hang for minutes; a TCP check first fails fast.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from dse.core import DeviceError


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 as ``[::1]:6379``) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DeviceError(f"a Ray address must read HOST:PORT (e.g. 10.0.0.5:6379), got {address!r}")
    return host, int(port)


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


def disconnect() -> None:
    """Stop being a driver, if this process is one (Ray is not imported just to find out)."""
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
