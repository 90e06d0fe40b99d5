"""The device an XLA runner compiles and runs on: on a CPU, a client of its own per thread count,
whose intra-op pool has that many threads (why: :mod:`dse.backends.xla.backend`, "Threads")."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.core import BuildError

if TYPE_CHECKING:
    import jax

    from dse.spec import HardwareProfile

_CLIENTS_LOCK = threading.Lock()
# Thread count -> (CPU client with a pool of that size, its pool size read back or -1).
_CPU_CLIENTS: dict[int, tuple[Any, int]] = {}


def _xla_threads() -> int:
    """How many of this process's threads are XLA intra-op pool threads (-1 off Linux)."""
    try:
        names = [Path(f"/proc/self/task/{t}/comm").read_text() for t in os.listdir("/proc/self/task")]
    except OSError:
        return -1
    return sum(name.startswith("tf_XLAEigen") for name in names)


def cpu_client(threads: int) -> tuple[Any, int]:
    """A CPU client whose intra-op pool has ``threads`` threads, made once per count.

    XLA reads ``$NPROC`` for the pool's size when a client is created; the variable is set for
    that moment only and restored, under a lock, so no other client picks it up.
    """
    from jaxlib import xla_client

    with _CLIENTS_LOCK:
        if threads not in _CPU_CLIENTS:
            before, previous = _xla_threads(), os.environ.get("NPROC")
            os.environ["NPROC"] = str(threads)
            try:
                client = xla_client.make_cpu_client()
            finally:
                if previous is None:
                    del os.environ["NPROC"]
                else:
                    os.environ["NPROC"] = previous
            pool = _xla_threads() - before if before >= 0 else -1
            _CPU_CLIENTS[threads] = (client, pool)
        return _CPU_CLIENTS[threads]


def xla_device(profile: HardwareProfile, threads: int) -> tuple[jax.Device, int]:
    """The device XLA compiles for, and the CPU pool's size read back (-1 where not known)."""
    if profile.kind == "cpu":
        client, pool = cpu_client(threads)
        return client.devices()[0], pool
    import jax

    try:
        return jax.devices("cuda")[0], -1
    except RuntimeError as exc:
        raise BuildError(f"device {profile.name!r} is a {profile.kind} device, but jax "
                         f"{jax.__version__} has no CUDA backend ({exc}); install jax's CUDA "
                         f"plugin: pip install 'jax[cuda12]'") from None
