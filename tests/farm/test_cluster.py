"""The embedded cluster listens on the loopback interface only."""

from __future__ import annotations

import os

import psutil
import pytest


@pytest.mark.usefixtures("ray_cluster")
def test_embedded_ray_listens_on_loopback_only() -> None:
    import ray

    assert ray.util.get_node_ip_address() == "127.0.0.1"
    ray_pids = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
    listening = [c for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in ray_pids]
    assert listening, "found no listening socket of the Ray processes"
    for conn in listening:
        assert conn.laddr.ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1"), conn
