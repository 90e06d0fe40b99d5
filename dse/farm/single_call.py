"""One call on one device of a profile, for the commands that work on a single configuration
(``dse profile``, ``dse export``, ``dse verify``): the farm joined at ``address`` (else an
embedded local Ray with that one device), one worker started, the call, the worker stopped: each
call runs in a worker process of its own, which ``dse verify``'s fresh runs rely on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dse.spec import HardwareProfile


def call_device(profile: HardwareProfile, cache_dir: Path, address: str | None, method: str,
                args: tuple[Any, ...], timeout_s: float) -> Any:
    """``DeviceWorker.<method>(*args)`` on a device of ``profile`` whose worker caches under
    ``cache_dir``; its answer, or the reason in one line when no device answered."""
    from dse.farm.cluster import connect, start_embedded
    from dse.farm.dispatcher import Dispatcher

    if address:
        connect(address)
    else:
        start_embedded([profile])
    farm = Dispatcher([profile], cache_dir)
    try:
        return farm.one_call(profile.name, method, args, timeout_s)
    finally:
        farm.cancel()
