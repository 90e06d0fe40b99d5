"""`list_devices` on the session's real embedded Ray, and how node table, resources and registry
combine (the combination on node records in the shape `ray.nodes()` returns)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from dse.farm.devices import DeviceInfo, farm_devices, list_devices
from dse.farm.farm_registry import find_registry, get_registry, register_worker
from dse.farm.resources import KIND_LABEL
from dse.spec import HardwareProfile
from tests.conftest import LOCAL_CPU, REPO


def _drop_registry() -> None:
    import ray

    registry = find_registry()
    if registry is not None:
        ray.kill(registry, no_restart=True)
        for _ in range(100):
            if find_registry() is None:
                return
            time.sleep(0.05)


@pytest.fixture
def clean_registry(ray_cluster: None) -> Iterator[None]:
    _drop_registry()
    yield
    _drop_registry()


def _local_cpu() -> DeviceInfo:
    (device,) = [d for d in list_devices(None) if d.profile == "local-cpu"]
    return device


def _busy_becomes(expected: int, polls: int = 100) -> DeviceInfo:
    """Resource usage reaches the GCS shortly after it changes; wait for it."""
    for _ in range(polls):
        device = _local_cpu()
        if device.busy == expected:
            return device
        time.sleep(0.1)
    raise AssertionError(f"busy stayed {device.busy}, expected {expected}")


@pytest.mark.usefixtures("clean_registry")
def test_the_embedded_device_shows_unregistered_with_its_unit_in_use_or_not() -> None:
    import ray

    device = _local_cpu()
    assert (device.units, device.alive, device.registered) == (1, True, False)
    assert device.kind == "unknown" and device.telemetry == {}
    assert device.node_id == ray.get_runtime_context().get_node_id()
    assert device.health == "ok"
    # An earlier test's device worker may still be giving the unit back (Ray frees it shortly
    # after the actor ends): wait for that rather than skip; one that never does is a leak.
    assert _busy_becomes(0, polls=300).busy == 0

    @ray.remote(num_cpus=0, resources={"dse_device:local-cpu": 1})
    class Holder:
        def ready(self) -> bool:
            return True

    holder = Holder.remote()  # type: ignore[attr-defined]
    ray.get(holder.ready.remote(), timeout=60)
    assert _busy_becomes(1).busy == 1
    ray.kill(holder)
    assert _busy_becomes(0).busy == 0


@pytest.mark.usefixtures("clean_registry")
def test_registration_and_quarantine_show_on_the_device() -> None:
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    telemetry = register_worker(node_id, profile, [], 1)
    ray.get(get_registry().set_device_state.remote(
        "local-cpu#0", "local-cpu", node_id, "quarantined", "3 failed trials in a row"))

    device = _local_cpu()
    assert device.registered and device.kind == "cpu"
    assert device.telemetry == telemetry
    assert "process_memory" in device.telemetry_available
    assert set(device.telemetry_available) | set(device.telemetry_missing) == set(profile.telemetry)
    assert device.quarantined == {"local-cpu#0": "3 failed trials in a row"}
    assert device.health == "1 quarantined"


def test_without_a_cluster_or_address_it_says_what_to_give() -> None:
    # A fresh process: this one is connected to the session's Ray.
    code = ("from dse.farm.devices import list_devices\n"
            "try:\n    list_devices(None)\nexcept Exception as exc:\n"
            "    print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=120).stdout
    assert out.startswith("DeviceError not connected to a Ray cluster"), out


# A worker node and the head as `ray.nodes()` gives them (Ray 2.60), and a node that died.
HEAD = {"NodeID": "aa01", "Alive": True, "NodeManagerAddress": "10.0.0.1",
        "NodeManagerHostname": "head", "Resources": {"node:__internal_head__": 1.0, "memory": 1e9},
        "Labels": {"ray.io/node-id": "aa01"}}
GPU_NODE = {"NodeID": "bb02", "Alive": True, "NodeManagerAddress": "10.0.0.2",
            "NodeManagerHostname": "gpu1", "Labels": {"ray.io/node-id": "bb02", KIND_LABEL: "cuda"},
            "Resources": {"dse_device:h100-sxm": 2.0, "GPU": 2.0, "CPU": 32.0}}
DEAD_ORIN = {"NodeID": "cc03", "Alive": False, "NodeManagerAddress": "10.0.0.3",
             "NodeManagerHostname": "orin1", "Resources": {}, "Labels": {}}
DEAD_STRANGER = {"NodeID": "dd04", "Alive": False, "NodeManagerAddress": "10.0.0.4",
                 "NodeManagerHostname": "old", "Resources": {}, "Labels": {}}


def _registration(node_id: str, name: str, kind: str, count: int) -> dict[str, Any]:
    return {"node_id": node_id, "host": f"{name}-host",
            "profile": {"name": name, "kind": kind}, "device_count": count, "gpus": [],
            "telemetry": {"jetson_power": "ok", "tegrastats": "tegrastats not found on PATH"},
            "dse_version": "0.1.0"}


def test_nodes_resources_and_registry_combine() -> None:
    available = {"aa01": {"memory": 1e9}, "bb02": {"dse_device:h100-sxm": 0.0, "GPU": 0.0}}
    states = [{"device_id": "h100-sxm#1", "profile": "h100-sxm", "node_id": "bb02",
               "state": "dead", "detail": "worker died: OOM"}]
    devices = farm_devices([HEAD, GPU_NODE, DEAD_ORIN, DEAD_STRANGER], available,
                           [_registration("cc03", "jetson-orin-nano", "jetson", 1)], states)
    gpu, orin = devices
    # The head offers no device; a dead node that never registered is history, not a device.
    assert [d.profile for d in devices] == ["h100-sxm", "jetson-orin-nano"]
    assert (gpu.kind, gpu.units, gpu.busy, gpu.registered) == ("cuda", 2, 2, False)
    assert gpu.dead == {"h100-sxm#1": "worker died: OOM"} and gpu.health == "1 dead"
    assert (orin.alive, orin.units, orin.busy, orin.health) == (False, 1, 0, "node dead")
    assert orin.host == "jetson-orin-nano-host" and orin.kind == "jetson"
    assert orin.telemetry_available == ["jetson_power"]
    assert orin.telemetry_missing == {"tegrastats": "tegrastats not found on PATH"}
