"""How dse's devices are named inside Ray: the per-profile device resource and the node labels.

The lowest module of the farm: the embedded cluster, the farm's nodes, the dispatcher and
`dse devices` all name devices the same way, so the names live here and import nothing of dse.
"""

from __future__ import annotations

PROFILE_LABEL = "dse.io/profile"
KIND_LABEL = "dse.io/kind"
WORKER_LABEL = "dse.io/worker"  # a fresh id per `dse worker`, to find the node it started


def device_resource(profile_name: str) -> str:
    """The Ray custom resource that pins work to a device of this profile (one unit per device)."""
    return f"dse_device:{profile_name}"
