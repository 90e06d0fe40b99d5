"""The farm registry on the session's real embedded Ray: one detached actor on the head, node
registrations, device states, and a worker's registration with facts read on its node."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from dse import __version__
from dse.farm.farm_registry import (
    REGISTRY_NAME,
    REGISTRY_NAMESPACE,
    find_registry,
    get_registry,
    register_worker,
)
from dse.spec import HardwareProfile
from tests.conftest import LOCAL_CPU


def _drop_registry() -> None:
    import ray

    registry = find_registry()
    if registry is not None:
        ray.kill(registry, no_restart=True)
        # The name is free again once Ray has seen the actor die.
        for _ in range(100):
            if find_registry() is None:
                return
            time.sleep(0.05)


@pytest.fixture
def registry(ray_cluster: None) -> Iterator[Any]:
    """A registry of this test's own (the session's is dropped before and after)."""
    _drop_registry()
    yield get_registry()
    _drop_registry()


def _node(node_id: str, **changes: object) -> dict[str, object]:
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    return {"node_id": node_id, "host": "bench-1", "profile": profile.model_dump(mode="json"),
            "device_count": 1, "gpus": [], "telemetry": {"process_memory": "ok"},
            "dse_version": __version__, **changes}


def test_one_named_registry_per_cluster(registry: Any) -> None:
    import ray

    again = get_registry()
    assert again._actor_id == registry._actor_id
    found = ray.get_actor(REGISTRY_NAME, namespace=REGISTRY_NAMESPACE)
    assert found._actor_id == registry._actor_id
    assert ray.get(registry.nodes.remote()) == []


def test_nodes_are_registered_and_replaced(registry: Any) -> None:
    import ray

    ray.get(registry.register_node.remote(_node("n1")))
    ray.get(registry.register_node.remote(_node("n2", host="bench-2")))
    ray.get(registry.register_node.remote(_node("n1", telemetry={"process_memory": "no psutil"})))
    nodes = {n["node_id"]: n for n in ray.get(registry.nodes.remote())}
    assert set(nodes) == {"n1", "n2"}
    assert nodes["n1"]["telemetry"] == {"process_memory": "no psutil"}
    assert nodes["n2"]["host"] == "bench-2"
    assert nodes["n1"]["profile"]["name"] == "local-cpu"
    assert nodes["n1"]["registered_at"] > 0


def test_a_registration_without_its_fields_says_which(registry: Any) -> None:
    import ray

    info = _node("n1")
    del info["telemetry"], info["gpus"]
    with pytest.raises(ValueError, match=r"\['gpus', 'telemetry'\] are missing"):
        ray.get(registry.register_node.remote(info))


def test_device_states_are_kept_and_checked(registry: Any) -> None:
    import ray

    ray.get(registry.set_device_state.remote("local-cpu#0", "local-cpu", "n1", "busy"))
    ray.get(registry.set_device_state.remote("local-cpu#0", "local-cpu", "n1", "quarantined",
                                             "3 failures in a row: CUDA error"))
    ray.get(registry.set_device_state.remote("local-cpu#1", "local-cpu", "n2", "idle"))
    devices = {d["device_id"]: d for d in ray.get(registry.devices.remote())}
    assert devices["local-cpu#0"]["state"] == "quarantined"
    assert devices["local-cpu#0"]["detail"] == "3 failures in a row: CUDA error"
    assert devices["local-cpu#1"] | {"since": 0} == {
        "device_id": "local-cpu#1", "profile": "local-cpu", "node_id": "n2", "state": "idle",
        "detail": "", "since": 0}
    with pytest.raises(ValueError, match=r"one of \['idle', 'busy', 'quarantined', 'dead'\]"):
        ray.get(registry.set_device_state.remote("local-cpu#0", "local-cpu", "n1", "broken"))


def test_a_worker_registers_with_telemetry_read_on_its_node(registry: Any) -> None:
    import ray

    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    node_id = ray.get_runtime_context().get_node_id()
    telemetry = register_worker(node_id, profile, [], 1)
    assert list(telemetry) == profile.telemetry
    assert telemetry["process_memory"] == "ok"
    assert all(reason for reason in telemetry.values())  # "ok" or why not, never empty
    (node,) = ray.get(registry.nodes.remote())
    assert node["node_id"] == node_id
    assert node["device_count"] == 1 and node["gpus"] == []
    assert node["telemetry"] == telemetry
    assert node["dse_version"] == __version__
