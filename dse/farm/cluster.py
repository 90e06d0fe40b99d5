"""Start or reach the Ray cluster that hosts the device workers.

On a laptop `dse run` starts an embedded Ray that listens on 127.0.0.1 only. Ray resolves a
"127.0.0.1" node address to the host's outward address unless it runs in single-machine mode, and
that mode is chosen by ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` read when Ray is *imported*; so the
variable is set before the first ``import ray`` of the process.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from dse.core import DeviceError
from dse.farm.connection import connect as join_farm
from dse.farm.resources import device_resource

if TYPE_CHECKING:
    from dse.spec import HardwareProfile

# Environment every process of an embedded cluster needs: quiet, no telemetry, loopback only, and
# workers at normal priority (Ray's default niceness of 15 lets any busy process starve a timing).
EMBEDDED_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_worker_niceness": "0",
}


# The Ray session this process started as its embedded cluster, and the device profiles it has:
# a later campaign of the same process (a notebook's second run_campaign) that needs another
# profile restarts that Ray, never one a user or a farm connection made (another session).
_embedded: tuple[str, frozenset[str]] | None = None


def _session() -> str:
    import ray

    return str(ray.get_runtime_context().get_session_name())


def start_embedded(profiles: list[HardwareProfile], num_cpus: int | None = None) -> None:
    """Start an embedded single-node Ray with one device unit per profile (idempotent). When this
    process's embedded Ray lacks a profile (an earlier campaign started it for others), it is
    restarted with the devices of both; a Ray started outside dse that lacks one is an error."""
    global _embedded
    for key, value in EMBEDDED_ENV.items():
        os.environ.setdefault(key, value)
    # Token authentication is what Ray gives a new local cluster anyway; said before Ray is
    # imported, Ray keeps its line announcing it out of every run's output (a user's
    # RAY_AUTH_MODE still wins). Not once Ray is imported: its configuration is read then, and a
    # mode set later would leave this process 'disabled' against a cluster that wants a token.
    if "ray" not in sys.modules:
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    import ray

    wanted = frozenset(p.name for p in profiles)
    if ray.is_initialized():
        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        missing = sorted(name for name in wanted if resources.get(device_resource(name), 0) < 1)
        if not missing:
            return
        if _embedded is None or _embedded[0] != _session():
            raise DeviceError(f"the running Ray cluster (not started by dse) has no device for "
                              f"profiles {missing}: stop it (ray.shutdown()) or give it a "
                              f"{device_resource(missing[0])!r} resource")
        # Campaigns of one process run one after the other, so no worker of the earlier one is
        # still in use: its devices are kept, the new ones added.
        wanted |= _embedded[1]
        ray.shutdown()
        _embedded = None
    try:
        ray.init(
            address="local",
            num_cpus=num_cpus or os.cpu_count() or 1,
            resources={device_resource(name): 1 for name in sorted(wanted)},
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    except (RuntimeError, ConnectionError, OSError) as exc:
        raise DeviceError(f"could not start the embedded Ray cluster: {exc}") from exc
    _embedded = (_session(), wanted)


def connect(address: str) -> None:
    """Join the farm at ``address`` (HOST:PORT of a head `dse cluster up` started) as the
    campaign's driver, with Ray's token authentication; DeviceError saying why when it cannot."""
    join_farm(address)


def shutdown() -> None:
    global _embedded
    import ray

    if ray.is_initialized():
        ray.shutdown()
    _embedded = None
