"""The `ray start` command lines of a farm's head and device workers, checked against Ray's own
parser, and the checks that run before anything starts."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import yaml

from dse.core.exceptions import DeviceError
from dse.farm.connection import connect, parse_address, require_token, token_source
from dse.farm.head import _ensure_token, token_exposure
from dse.farm.node_commands import check_bind, head_command, launch_env, parse_gpus, worker_command
from dse.farm.node_process import ray_executable
from dse.farm.resources import KIND_LABEL, PROFILE_LABEL, WORKER_LABEL
from dse.spec import HardwareProfile

H100 = """\
name: h100-sxm
kind: cuda
backends: [onnxruntime_cuda, tensorrt]
precisions: [fp32, fp16, int8]
telemetry: [nvml, cuda_memory]
"""

ORIN = """\
name: jetson-orin-nano
kind: jetson
backends: [onnxruntime, tensorrt]
precisions: [fp32, fp16, int8]
telemetry: [jetson_power, tegrastats]
"""


def _profile(text: str, **changes: object) -> HardwareProfile:
    return HardwareProfile.model_validate({**yaml.safe_load(text), **changes})


def _ray_parses(argv: list[str]) -> dict[str, object]:
    """Ray's own `ray start` parser accepts the arguments (every option exists, every value has
    its type); returns the parsed options."""
    from ray.scripts.scripts import start

    assert argv[1] == "start"
    params: dict[str, object] = start.make_context("start", argv[2:]).params
    return params


def test_head_defaults_no_cpus_no_dashboard_token_auth_blocking_child() -> None:
    command = head_command("ray")
    params = _ray_parses(command.argv)
    assert params["head"] and params["block"]
    assert params["port"] == 6379
    assert params["num_cpus"] == 0
    assert params["include_dashboard"] is False
    assert params["node_ip_address"] is None  # 0.0.0.0: Ray picks the routable address
    assert command.env["RAY_AUTH_MODE"] == "token"
    assert command.env["RAY_worker_niceness"] == "0"
    assert command.env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "1"
    assert command.env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "0"


def test_head_with_an_address_a_dashboard_cpus_and_a_temp_dir() -> None:
    command = head_command("ray", port=7000, bind="10.0.0.5", dashboard=True, num_cpus=4,
                           temp_dir="/tmp/farm")
    params = _ray_parses(command.argv)
    assert (params["port"], params["node_ip_address"]) == (7000, "10.0.0.5")
    assert params["include_dashboard"] is True
    assert params["num_cpus"] == 4
    assert params["temp_dir"] == "/tmp/farm"


@pytest.mark.parametrize(("bind", "says"), [("127.0.0.1", "loopback"), ("::1", "loopback"),
                                            ("headnode", "an IP address")])
def test_bind_refuses_loopback_and_names(bind: str, says: str) -> None:
    with pytest.raises(DeviceError, match=says):
        check_bind(bind)


def test_gpu_worker_offers_one_device_per_gpu_and_hands_ray_the_gpus() -> None:
    command = worker_command("ray", _profile(H100), address="10.0.0.5:6379", worker_id="abc123",
                             gpus=parse_gpus("0,1"), num_cpus=8)
    params = _ray_parses(command.argv)
    assert params["address"] == "10.0.0.5:6379"
    assert json.loads(str(params["resources"])) == {"dse_device:h100-sxm": 2}
    assert params["num_gpus"] == 2
    assert params["num_cpus"] == 8
    assert params["block"] and not params["head"]
    assert command.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert command.env["RAY_worker_niceness"] == "0"
    from ray._private.label_utils import parse_node_labels_string

    labels = parse_node_labels_string(str(params["labels"]))  # Ray's own syntax check
    assert labels == {PROFILE_LABEL: "h100-sxm", KIND_LABEL: "cuda", WORKER_LABEL: "abc123"}


def test_jetson_worker_is_one_device_and_claims_no_ray_gpu() -> None:
    command = worker_command("ray", _profile(ORIN), address="10.0.0.5:6379", worker_id="x1")
    params = _ray_parses(command.argv)
    assert json.loads(str(params["resources"])) == {"dse_device:jetson-orin-nano": 1}
    assert params["num_gpus"] == 0
    assert params["num_cpus"] is None  # Ray counts the board's cores
    assert "CUDA_VISIBLE_DEVICES" not in command.env


def test_gpus_belong_to_cuda_profiles_only() -> None:
    with pytest.raises(DeviceError, match="--gpus"):
        worker_command("ray", _profile(H100), address="h:1", worker_id="x")
    with pytest.raises(DeviceError, match="cuda profiles"):
        worker_command("ray", _profile(ORIN), address="h:1", worker_id="x", gpus=["0"])


@pytest.mark.parametrize("text", ["", "a", "0,0", "0,,x"])
def test_bad_gpu_lists_are_refused(text: str) -> None:
    with pytest.raises(DeviceError, match="--gpus must list"):
        parse_gpus(text)


def test_gpu_lists_take_indices_and_uuids() -> None:
    assert parse_gpus(" 0, 3 ") == ["0", "3"]
    assert parse_gpus("GPU-8f0c,MIG-1a2b") == ["GPU-8f0c", "MIG-1a2b"]


def test_a_profile_name_ray_cannot_label_is_refused() -> None:
    with pytest.raises(DeviceError, match="cannot be a Ray node label"):
        worker_command("ray", _profile(ORIN, name="orin-"), address="h:1", worker_id="x")


def test_addresses() -> None:
    assert parse_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert parse_address("[::1]:7000") == ("::1", 7000)
    for bad in ("10.0.0.5", ":6379", "host:port", "host:70000"):
        with pytest.raises(DeviceError, match="HOST:PORT"):
            parse_address(bad)


def test_an_auth_mode_the_user_set_wins() -> None:
    command = head_command("ray")
    assert launch_env(command.env, {"PATH": "/bin"})["RAY_AUTH_MODE"] == "token"
    assert launch_env(command.env, {"RAY_AUTH_MODE": "disabled"})["RAY_AUTH_MODE"] == "disabled"


def test_token_is_found_where_ray_looks(tmp_path: Path) -> None:
    assert token_source({}, tmp_path) is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("abc")
    assert token_source({}, tmp_path) == str(tmp_path / ".ray" / "auth_token")
    other = tmp_path / "token"
    other.write_text("def")
    assert token_source({"RAY_AUTH_TOKEN_PATH": str(other)}, tmp_path) == str(other)
    assert token_source({"RAY_AUTH_TOKEN": "x", "RAY_AUTH_TOKEN_PATH": str(other)},
                        tmp_path) == "RAY_AUTH_TOKEN"


def test_token_auth_without_a_token_is_refused_before_starting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(DeviceError, match="no token"):
        require_token({})
    assert require_token({"RAY_AUTH_MODE": "disabled"}) is None


def test_ray_cli_is_found_beside_python_else_it_says_how_to_install(tmp_path: Path) -> None:
    assert os.access(ray_executable(), os.X_OK)
    with pytest.raises(DeviceError, match="pip install"):
        ray_executable(python=str(tmp_path / "python"), search_path=str(tmp_path))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_head_fails_fast_with_the_address() -> None:
    port = _closed_port()
    with pytest.raises(DeviceError, match=f"cannot reach the Ray head at 127.0.0.1:{port}"):
        connect(f"127.0.0.1:{port}")


def test_a_replay_profile_never_joins_a_farm() -> None:
    from dse.farm.worker_node import start_worker
    from dse.spec import load_model
    from tests.conftest import REPO

    replay = load_model(REPO / "hw_profiles" / "replay" / "replay-example.yaml", HardwareProfile)
    with pytest.raises(DeviceError, match=r"is a replay device.*never joins a farm"):
        start_worker(replay, "127.0.0.1:1")


def test_a_token_dse_generates_is_readable_by_its_owner_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    env = {"RAY_AUTH_MODE": "token", "HOME": str(tmp_path), "PATH": os.environ.get("PATH", "")}
    source = _ensure_token(ray_executable(), env)  # Ray's own generator, as `dse cluster up` runs it
    token = tmp_path / ".ray" / "auth_token"
    assert source == str(token)
    assert token.stat().st_mode & 0o777 == 0o600
    assert token_exposure(source) == ""


def test_a_token_others_can_read_is_warned_about(tmp_path: Path) -> None:
    token = tmp_path / "auth_token"
    token.write_text("secret")
    token.chmod(0o644)
    warning = token_exposure(str(token))
    assert "readable by other users" in warning and "mode 644" in warning
    assert f"chmod 600 {token}" in warning
    assert token_exposure("RAY_AUTH_TOKEN") == "" and token_exposure(None) == ""
