"""What devices a farm has: `dse devices`.

Ray's node table says which nodes are alive and what ``dse_device:<profile>`` units each offers;
its per-node available resources say how many units device workers hold; the farm registry adds
what Ray cannot know: the profile's kind, the host's telemetry, and devices the dispatcher
quarantined or saw die. A node that never registered (the embedded cluster of `dse run`) still
shows, with kind and telemetry unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dse.core import DeviceError
from dse.farm.connection import connect
from dse.farm.resources import KIND_LABEL

DEVICE_PREFIX = "dse_device:"


@dataclass(frozen=True)
class DeviceInfo:
    """The devices of one profile on one node."""

    profile: str
    kind: str  # cpu | cuda | jetson; "unknown" when the node never registered
    node_id: str
    host: str
    ip: str
    alive: bool  # the node, as Ray's node table has it
    units: int  # devices of this profile on the node
    busy: int  # units a device worker holds now (total - available)
    registered: bool
    telemetry: dict[str, str] = field(default_factory=dict)  # probe -> "ok" or why not
    quarantined: dict[str, str] = field(default_factory=dict)  # device id -> detail
    dead: dict[str, str] = field(default_factory=dict)  # device id -> detail

    @property
    def telemetry_available(self) -> list[str]:
        return [name for name, state in self.telemetry.items() if state == "ok"]

    @property
    def telemetry_missing(self) -> dict[str, str]:
        return {name: state for name, state in self.telemetry.items() if state != "ok"}

    @property
    def health(self) -> str:
        if not self.alive:
            return "node dead"
        faults = [f"{len(ids)} {what}" for what, ids in (("quarantined", self.quarantined),
                                                          ("dead", self.dead)) if ids]
        return ", ".join(faults) or "ok"


def list_devices(address: str | None = None) -> list[DeviceInfo]:
    """The farm's devices, one entry per (node, profile). With an address this process joins the
    farm as a driver (see ``dse.farm.connection.connect``); without, it reads the Ray it is
    connected to."""
    if address is not None:
        connect(address)  # before Ray is imported: it reads its mode from the environment then
    import ray
    from ray._private.state import available_resources_per_node

    from dse.farm.farm_registry import find_registry

    if not ray.is_initialized():
        raise DeviceError("not connected to a Ray cluster: give the farm's address (HOST:PORT)")
    nodes = ray.nodes()  # type: ignore[no-untyped-call]
    available = available_resources_per_node()  # type: ignore[no-untyped-call]
    registry = find_registry()
    registrations: list[dict[str, Any]] = []
    states: list[dict[str, Any]] = []
    if registry is not None:
        registrations, states = ray.get([registry.nodes.remote(), registry.devices.remote()])
    return farm_devices(nodes, available, registrations, states)


def farm_devices(nodes: Iterable[Mapping[str, Any]], available: Mapping[str, Mapping[str, float]],
                 registrations: Iterable[Mapping[str, Any]],
                 states: Iterable[Mapping[str, Any]]) -> list[DeviceInfo]:
    """Join Ray's node table (``ray.nodes()``), its per-node available resources and the
    registry's contents into device entries. Dead nodes show only if they registered."""
    registered = {str(r["node_id"]): r for r in registrations}
    states = list(states)
    out: list[DeviceInfo] = []
    for node in nodes:
        node_id = str(node["NodeID"])
        registration = registered.get(node_id)
        units = {name.removeprefix(DEVICE_PREFIX): total
                 for name, total in node.get("Resources", {}).items()
                 if name.startswith(DEVICE_PREFIX)}
        if not units and registration is not None:  # a dead node no longer lists its resources
            units = {str(registration["profile"]["name"]): float(registration["device_count"])}
        for profile, total in units.items():
            free = available.get(node_id, {}).get(DEVICE_PREFIX + profile, 0.0)
            mine = [s for s in states if s["node_id"] == node_id and s["profile"] == profile]
            out.append(DeviceInfo(
                profile=profile,
                kind=_kind(node, registration),
                node_id=node_id,
                host=str(registration["host"]) if registration else str(
                    node.get("NodeManagerHostname", "")),
                ip=str(node.get("NodeManagerAddress", "")),
                alive=bool(node["Alive"]),
                units=round(total),
                busy=max(0, round(total - free)) if node["Alive"] else 0,
                registered=registration is not None,
                telemetry=dict(registration["telemetry"]) if registration else {},
                quarantined={s["device_id"]: s["detail"] for s in mine if s["state"] == "quarantined"},
                dead={s["device_id"]: s["detail"] for s in mine if s["state"] == "dead"},
            ))
    return sorted(out, key=lambda d: (d.profile, not d.alive, d.host, d.node_id))


def _kind(node: Mapping[str, Any], registration: Mapping[str, Any] | None) -> str:
    if registration is not None:
        return str(registration["profile"]["kind"])
    return str(node.get("Labels", {}).get(KIND_LABEL, "unknown"))
