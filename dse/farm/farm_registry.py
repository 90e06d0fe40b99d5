"""`FarmRegistry`: what the farm knows beyond Ray's own tables — which profile each worker node
serves, what telemetry works there, and the state the dispatcher gave each device.

It is one detached, named Ray actor (``dse-farm-registry`` in namespace ``dse``) pinned to the head
node, so it outlives campaigns and worker restarts and dies only with the cluster. Ray's node table
stays the authority on liveness; the registry holds what Ray cannot know.

Thread safety: Ray runs one method of an actor at a time (no ``max_concurrency``), so the methods
need no locks. The state is in memory: a new head starts with an empty registry and workers
register again when they join.

Device ids are the dispatcher's; each device state also names its node and profile, which is what
`dse devices` groups by.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any, TypedDict

from dse.core import DeviceError, __version__

if TYPE_CHECKING:
    from dse.spec import HardwareProfile

REGISTRY_NAME = "dse-farm-registry"
REGISTRY_NAMESPACE = "dse"
DEVICE_STATES = ("idle", "busy", "quarantined", "dead")
NODE_FIELDS = ("node_id", "host", "profile", "device_count", "gpus", "telemetry", "dse_version")
# Ray gives every head node this resource; a sliver of it pins the registry there.
_HEAD_RESOURCE = "node:__internal_head__"


class FarmRegistry:
    """Node registrations and device states (wrapped by ``ray.remote`` in :func:`get_registry`)."""

    def __init__(self) -> None:
        self._nodes: dict[str, dict[str, object]] = {}
        self._devices: dict[str, dict[str, object]] = {}

    def register_node(self, info: dict[str, object]) -> None:
        """Record (or replace) a worker node's registration; ``info`` holds every NODE_FIELDS key."""
        missing = [key for key in NODE_FIELDS if key not in info]
        if missing:
            raise ValueError(f"a node registration needs {list(NODE_FIELDS)}, but {missing} are missing")
        if not isinstance(info["profile"], dict) or "name" not in info["profile"]:
            raise ValueError(f"profile must be a HardwareProfile dump with a name, got {info['profile']!r}")
        self._nodes[str(info["node_id"])] = {**info, "registered_at": time.time()}

    def set_device_state(self, device_id: str, profile: str, node_id: str, state: str,
                         detail: str = "") -> None:
        """Record what the dispatcher knows of one device: idle, busy, quarantined or dead."""
        if state not in DEVICE_STATES:
            raise ValueError(f"device state must be one of {list(DEVICE_STATES)}, got {state!r}")
        self._devices[device_id] = {"device_id": device_id, "profile": profile, "node_id": node_id,
                                    "state": state, "detail": detail, "since": time.time()}

    def devices(self) -> list[dict[str, object]]:
        return [dict(entry) for entry in self._devices.values()]

    def nodes(self) -> list[dict[str, object]]:
        return [dict(entry) for entry in self._nodes.values()]


def get_registry() -> Any:
    """The registry actor of the connected cluster, created on the head node if it is not there yet."""
    import ray

    remote_cls = ray.remote(FarmRegistry)
    return remote_cls.options(
        name=REGISTRY_NAME, namespace=REGISTRY_NAMESPACE, lifetime="detached", get_if_exists=True,
        num_cpus=0, resources={_HEAD_RESOURCE: 0.001},
    ).remote()


def find_registry() -> Any | None:
    """The registry actor if one exists; reading the farm's state should not create it."""
    import ray

    try:
        return ray.get_actor(REGISTRY_NAME, namespace=REGISTRY_NAMESPACE)
    except ValueError:  # Ray's answer for "no actor of that name"
        return None


class StateReporter:
    """Tells the registry the state the dispatcher gives each device (what `dse devices` shows).

    Best effort: a registry that cannot be reached must not stop a campaign, so after one failure
    it is not asked again."""

    def __init__(self) -> None:
        self._registry: Any = None  # the registry's handle; False once it proved unreachable

    def report(self, device_id: str, profile: str, node_id: str, state: str,
               detail: str = "") -> None:
        if self._registry is False:
            return
        try:
            if self._registry is None:
                self._registry = get_registry()
            self._registry.set_device_state.remote(device_id, profile, node_id, state, detail)
        except Exception:
            self._registry = False


class NodeFacts(TypedDict):
    host: str
    dse_version: str
    telemetry: dict[str, str]  # probe -> "ok" or why it is unavailable


def node_facts(profile: HardwareProfile) -> NodeFacts:
    """Run on a worker node as a Ray task: its host name, dse version, and whether each telemetry
    probe of the profile works there (``"ok"`` or the probe's reason), as a device worker sees it."""
    from dse.measure import entry_name, make_probe

    telemetry: dict[str, str] = {}
    for entry in profile.telemetry:
        ok, why = make_probe(entry).available()
        telemetry[entry_name(entry)] = "ok" if ok else (why or "unavailable")
    return NodeFacts(host=socket.gethostname(), dse_version=__version__, telemetry=telemetry)


def register_worker(node_id: str, profile: HardwareProfile, gpus: list[str], units: int,
                    timeout_s: float = 120) -> dict[str, str]:
    """Read the node's facts on the node itself, then register it; returns its telemetry."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # No GPU asked for: a campaign may already hold them all. The task then sees every GPU of
    # the node (its CUDA_VISIBLE_DEVICES), and the probes check the first, as a worker would one.
    task = ray.remote(node_facts).options(
        num_cpus=0, num_gpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
    try:
        facts = ray.get(task.remote(profile), timeout=timeout_s)
        info: dict[str, object] = {
            "node_id": node_id, "host": facts["host"], "profile": profile.model_dump(mode="json"),
            "device_count": units, "gpus": list(gpus), "telemetry": facts["telemetry"],
            "dse_version": facts["dse_version"]}
        ray.get(get_registry().register_node.remote(info), timeout=timeout_s)
    except ray.exceptions.RayError as exc:
        raise DeviceError(f"could not register node {node_id} with the farm: {exc}") from None
    return facts["telemetry"]
