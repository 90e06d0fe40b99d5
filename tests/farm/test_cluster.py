"""The embedded cluster: it listens on the loopback interface only, and a later campaign of the
same process that needs another device profile gets it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO


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


# Run in a process of its own: this pytest process already holds the session's embedded Ray.
_TWO_CAMPAIGNS = """
import yaml, ray
from dse.core import DeviceError
from dse.farm import cluster
from dse.farm.resources import device_resource
from dse.spec import HardwareProfile

def profile(name):
    return HardwareProfile.model_validate(yaml.safe_load(
        f"name: {name}\\nkind: cpu\\nbackends: [onnxruntime]\\nprecisions: [fp32]\\n"))

cluster.start_embedded([profile("first")], num_cpus=1)
session = ray.get_runtime_context().get_session_name()
cluster.start_embedded([profile("first")], num_cpus=1)  # already there: nothing restarts
same = ray.get_runtime_context().get_session_name() == session
cluster.start_embedded([profile("second")], num_cpus=1)  # a later campaign's other device
have = ray.cluster_resources()
print(same, have.get(device_resource("first")), have.get(device_resource("second")))
cluster.shutdown()
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)  # the user's own Ray
try:
    cluster.start_embedded([profile("third")], num_cpus=1)
except DeviceError as exc:
    print(str(exc))
ray.shutdown()
"""


def test_a_second_campaign_in_one_process_gets_its_device_and_a_users_ray_is_left_alone(
        tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _TWO_CAMPAIGNS], capture_output=True, text=True,
                          cwd=REPO, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "True 1.0 1.0"
    assert lines[1] == ("the running Ray cluster (not started by dse) has no device for profiles "
                        "['third']: stop it (ray.shutdown()) or give it a 'dse_device:third' "
                        "resource")
