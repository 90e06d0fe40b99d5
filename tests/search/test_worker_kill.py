"""A device worker killed outright (SIGKILL) while it measures: the dispatcher notices the dead
actor, the trial runs again on a fresh worker, and the campaign meets its budget with no trial
lost, none failed for it and no candidate measured twice. A candidate whose worker dies on every
attempt is failed, once its retries are spent, with a reason naming each death.

The campaign is a real `dse run` in a child process (its own embedded Ray), so the test can kill
one of that Ray's worker processes without touching the session's cluster. "While it measures"
is read from the kernel: a DeviceWorker holds its node's lock file exclusively (flock, see
``dse.trial.isolation``) only for a measurement, and /proc/locks lists the holder's pid.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest
import yaml
from optuna.trial import TrialState

from dse.core.candidate import Candidate
from dse.core.measurement import Measurement
from dse.farm.dispatcher import Dispatcher
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec
from dse.trial.isolation import LOCK_DIR
from tests.conftest import LOCAL_CPU, REPO, tiny_experiment_text
from tests.search._sessions import kill_session, session_processes

BUDGET = 2
ENV = dict(os.environ, PYTHONUNBUFFERED="1", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
           RAY_USAGE_STATS_ENABLED="0")



def _device_workers(leader: int) -> list[psutil.Process]:
    """The DeviceWorker actors of the driver's Ray (Ray titles an actor's process after it)."""
    workers = []
    for process in session_processes(leader):
        try:
            if " ".join(process.cmdline()).startswith("ray::DeviceWorker"):
                workers.append(process)
        except psutil.Error:
            continue
    return workers


def _exclusive_holders() -> set[int]:
    """Pids holding a node lock (LOCK_DIR/<node>.lock) exclusively: measuring right now."""
    inodes = set()
    for lock in LOCK_DIR.glob("*.lock"):
        try:
            stat = lock.stat()
        except FileNotFoundError:
            continue
        inodes.add((os.major(stat.st_dev), os.minor(stat.st_dev), stat.st_ino))
    holders = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 5738 fe:00:2146523 0 EOF"
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue
        major, minor, inode = fields[5].split(":")
        if (int(major, 16), int(minor, 16), int(inode)) in inodes:
            holders.add(int(fields[4]))
    return holders


@pytest.mark.skipif(not Path("/proc/locks").is_file(),
                    reason="needs Linux /proc/locks to see a worker measuring")
def test_a_worker_killed_mid_measurement_is_replaced_and_its_trial_runs_again(
        tiny_campaign: Path) -> None:
    # 1.5 s of timing at least, so the worker is found (0.1 s polls) while it measures.
    text = tiny_experiment_text(BUDGET, name="worker-kill").replace(
        "min_seconds: 0.0, max_seconds: 0.5", "min_seconds: 1.5, max_seconds: 2.0")
    assert "min_seconds: 1.5" in text
    tiny_campaign.write_text(text)
    log = tiny_campaign.parent / "driver.log"
    with log.open("wb") as out:
        driver = subprocess.Popen(
            [sys.executable, "-m", "dse.cli", "run", str(tiny_campaign), "--no-report"],
            stdout=out, stderr=subprocess.STDOUT, env=ENV, cwd=REPO, start_new_session=True)
    killed: int | None = None
    try:
        deadline = time.monotonic() + 180
        while killed is None and time.monotonic() < deadline and driver.poll() is None:
            measuring = _exclusive_holders()
            for worker in _device_workers(driver.pid):
                if worker.pid in measuring:
                    os.kill(worker.pid, signal.SIGKILL)
                    killed = worker.pid
                    break
            time.sleep(0.1)
        assert killed is not None, "no worker was caught measuring:\n" + log.read_text()
        driver.wait(timeout=240)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=30)
        kill_session(driver.pid)
    output = log.read_text()
    assert driver.returncode == 0, output
    assert "Traceback" not in output, output

    db = tiny_campaign.parent / "runs" / "worker-kill" / "study.db"
    storage = f"sqlite:///file:{db}?mode=ro&uri=true"
    trials = optuna.load_study(study_name="worker-kill", storage=storage).get_trials()
    # The budget met with nothing failed, left running or lost: the killed attempt is no trial.
    assert [t.state for t in trials] == [TrialState.COMPLETE] * BUDGET, output
    retried = [t for t in trials if t.user_attrs.get("provenance", {}).get("attempts") == "2"]
    assert len(retried) == 1, [t.user_attrs for t in trials]
    provenance = retried[0].user_attrs["provenance"]
    assert "died" in provenance["earlier_attempts"], provenance
    assert provenance["pid"] != str(killed)  # measured by the successor
    assert retried[0].user_attrs["status"] == "ok"
    measured = [t.user_attrs["candidate_id"] for t in trials if "reused_from" not in t.user_attrs]
    assert len(measured) == len(set(measured))


class DyingWorker:
    """A device worker whose process dies (SIGKILL, by its own hand) on every evaluate."""

    def __init__(self, profile: HardwareProfile, cache_dir: str, device_id: str = "") -> None:
        self.profile = profile

    def identity(self) -> dict[str, str]:
        return {"device_profile": self.profile.name, "device_id": f"dying@{os.getpid()}",
                "pid": str(os.getpid())}

    def evaluate(self, candidate: Candidate, training: TrainingSpec,
                 measure: MeasureSpec) -> Measurement:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable: the process is gone")


@pytest.mark.usefixtures("ray_cluster")
def test_a_candidate_whose_worker_dies_every_time_fails_with_each_death_named(
        tmp_path: Path) -> None:
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    candidate = Candidate("cnn", {"num_stages": 1}, "fp32", 1, "onnxruntime", {}, "local-cpu")
    dispatcher = Dispatcher([profile], tmp_path, max_retries=1, worker_class=DyingWorker)
    try:
        result = dispatcher.evaluate(candidate, TrainingSpec(), MeasureSpec(), timeout_s=120)
    finally:
        dispatcher.cancel()
    assert result.status == "failed"
    assert result.reason.startswith("failed on 2 devices: device dying@"), result.reason
    # Two workers, each named, each dead: the retry ran in a fresh process.
    dead = re.findall(r"device (dying@\d+) died: ActorDiedError", result.reason)
    assert len(dead) == 2 and dead[0] != dead[1], result.reason
