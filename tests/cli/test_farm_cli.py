"""`dse cluster up/down`, `dse worker` and `dse devices` as a user runs them: one-line errors, and a
real farm of a head and a worker on this machine."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml
from typer.testing import CliRunner

from dse.cli import app
from tests.conftest import REPO

FARM_CPU = """\
name: farm-cpu
kind: cpu
backends: [onnxruntime]
precisions: [fp32]
telemetry: [process_memory, rapl]
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of this test's own: dse's pid files and Ray's token live under it."""
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _one_line_error(args: list[str], says: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_bad_profile_is_one_line_naming_the_file(home: Path) -> None:
    profile = home / "bad.yaml"
    profile.write_text(FARM_CPU.replace("kind: cpu", "kind: gpu"))
    _one_line_error(["worker", "--profile", str(profile), "--address", "127.0.0.1:6379"],
                    f"{profile}: kind:")


def test_an_unreachable_head_is_one_line_naming_it(home: Path) -> None:
    profile = home / "farm-cpu.yaml"
    profile.write_text(FARM_CPU)
    port = _free_port()
    _one_line_error(["worker", "--profile", str(profile), "--address", f"127.0.0.1:{port}"],
                    f"cannot reach the Ray head at 127.0.0.1:{port}")
    _one_line_error(["devices", "--address", f"127.0.0.1:{port}"],
                    f"cannot reach the Ray head at 127.0.0.1:{port}")


def test_gpus_on_a_cpu_profile_are_refused(home: Path) -> None:
    profile = home / "farm-cpu.yaml"
    profile.write_text(FARM_CPU)
    _one_line_error(["worker", "--profile", str(profile), "--address", "127.0.0.1:1",
                     "--gpus", "0,1"], "--gpus is for cuda profiles")


def test_loopback_heads_and_absent_heads_are_explained(home: Path) -> None:
    _one_line_error(["cluster", "up", "--bind", "127.0.0.1"], "loopback")
    _one_line_error(["cluster", "down", "--port", "6390"], "dse runs no head on port 6390")


def test_run_takes_a_farm_address() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert "--address" in result.output


def _dse(*args: str) -> list[str]:
    return [sys.executable, "-m", "dse.cli", *args]


def _stop(procs: list[psutil.Process]) -> None:
    for proc in procs:
        if proc.is_running():
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=30)
    for proc in alive:
        proc.kill()


@pytest.fixture
def farm_dir() -> Iterator[Path]:
    # Short: Ray's socket paths under --temp-dir must fit in 107 characters.
    folder = Path(tempfile.mkdtemp(prefix="dse-farm-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _farm_round_trip(farm_dir: Path, profile_text: str, *worker_args: str) -> list[str]:
    """`dse cluster up`, `dse worker` (then Ctrl-C), `dse devices`, `dse cluster down`, each a
    process of its own in a home of its own; checks that each stops exactly what it started and
    returns the cells of the worker's row in `dse devices`."""
    home = farm_dir / "home"
    home.mkdir()
    name = yaml.safe_load(profile_text)["name"]
    profile = farm_dir / f"{name}.yaml"
    profile.write_text(profile_text)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(HOME=str(home), COLUMNS="200", PYTHONUNBUFFERED="1")
    port, temp = _free_port(), str(farm_dir / "ray")
    address = f"127.0.0.1:{port}"
    started = time.monotonic()

    up = subprocess.run(_dse("cluster", "up", "--port", str(port), "--temp-dir", temp), env=env,
                        cwd=REPO, capture_output=True, text=True, timeout=180)
    worker: subprocess.Popen[str] | None = None
    node_procs: list[psutil.Process] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f":{port}" in up.stdout and "token authentication: on" in up.stdout
        assert (home / ".ray" / "auth_token").is_file()  # made by `cluster up`, read by the rest

        worker = subprocess.Popen(
            _dse("worker", "--profile", str(profile), "--address", address, "--temp-dir", temp,
                 *worker_args),
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert worker.stdout is not None
        said = []
        deadline = time.monotonic() + 180
        while not said or "Ctrl-C stops this node" not in said[-1]:
            line = worker.stdout.readline()
            assert line and time.monotonic() < deadline, "".join(said)
            said.append(line)
        assert f"device(s) of {name}" in said[0], said
        node_procs = psutil.Process(worker.pid).children(recursive=True)
        assert any(p.name() == "raylet" for p in node_procs)

        listed = subprocess.run(_dse("devices", "--address", address), env=env, cwd=REPO,
                                capture_output=True, text=True, timeout=180)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        (row,) = [line for line in listed.stdout.splitlines() if name in line and "│" in line]

        worker.send_signal(signal.SIGINT)
        rest, _ = worker.communicate(timeout=90)
        assert worker.returncode == 0, rest
        assert f"stopped the node of {name}" in rest
        psutil.wait_procs(node_procs, timeout=30)
        assert not [p for p in node_procs if p.is_running() and p.status() != "zombie"]

        # The registry lives on the head: the stopped worker's registration outlives it.
        after = subprocess.run(_dse("devices", "--address", address), env=env, cwd=REPO,
                               capture_output=True, text=True, timeout=180)
        assert "node dead" in after.stdout, after.stdout + after.stderr
    finally:
        if worker is not None and worker.poll() is None:
            _stop([psutil.Process(worker.pid), *node_procs])
        down = subprocess.run(_dse("cluster", "down", "--port", str(port)), env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    head_pid = int(up.stdout.split("(pid ")[1].split(")")[0])
    assert not psutil.pid_exists(head_pid) or psutil.Process(head_pid).status() == "zombie"
    print(f"farm round trip: {time.monotonic() - started:.1f} s")
    return [cell.strip() for cell in row.split("│")[1:-1]]


def test_a_worker_joins_a_head_shows_in_devices_and_stops_alone(farm_dir: Path) -> None:
    cells = _farm_round_trip(farm_dir, FARM_CPU, "--num-cpus", "1")
    profile_name, kind, _, _, health, units, busy, available, missing = cells
    assert (profile_name, kind, health, units, busy) == ("farm-cpu", "cpu", "ok", "1", "0")
    assert available == "process_memory"
    assert missing in ("", "rapl")  # rapl works only on hosts that expose RAPL


FARM_GPU = """\
name: farm-gpu
kind: cuda
backends: [onnxruntime_cuda]
precisions: [fp32]
telemetry: [nvml]
"""


@pytest.mark.gpu
def test_a_gpu_worker_offers_its_gpu_with_nvml(farm_dir: Path) -> None:
    pynvml = pytest.importorskip("pynvml", reason="needs nvidia-ml-py for an NVIDIA GPU")
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        pytest.skip(f"needs an NVIDIA GPU with NVML: {exc}")
    if count < 1:
        pytest.skip("needs an NVIDIA GPU: NVML sees none")
    cells = _farm_round_trip(farm_dir, FARM_GPU, "--gpus", "0", "--num-cpus", "1")
    profile_name, kind, _, _, health, units, busy, available, _ = cells
    assert (profile_name, kind, health, units, busy) == ("farm-gpu", "cuda", "ok", "1", "0")
    assert available == "nvml"
