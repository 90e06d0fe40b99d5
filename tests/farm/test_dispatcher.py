"""The dispatcher on a real (embedded) Ray: timeouts, quarantine, a profile with no device, and
the node lock that keeps measurements apart from other dse work."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
import yaml

from dse.core.candidate import Candidate
from dse.core.exceptions import DeviceError
from dse.farm.dispatcher import Dispatcher, Job
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec
from dse.trial.isolation import NodeLock
from tests.conftest import LOCAL_CPU

TINY_ARCH = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}
TRAINING = TrainingSpec(epochs=1, batch_size=256)
MEASURE = MeasureSpec(min_seconds=0.0, max_seconds=0.2, warmup_max_seconds=0.05)


def _candidate(batch: int) -> Candidate:
    return Candidate("cnn", TINY_ARCH, "fp32", batch, "onnxruntime", {"intra_op_threads": 1},
                     "local-cpu")


@pytest.mark.usefixtures("ray_cluster")
def test_a_device_failing_trials_in_a_row_is_quarantined_and_then_none_is_left(
        tmp_path: Path) -> None:
    import ray

    from dse.farm.farm_registry import find_registry

    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    dispatcher = Dispatcher([profile], tmp_path, max_retries=2, quarantine_after=2)
    try:
        for batch in (1, 2):
            result = dispatcher.evaluate(_candidate(batch), TRAINING, MEASURE, timeout_s=0.01)
            assert result.status == "failed"
            assert result.reason == "timed out after 0.01 s; worker restarted"
        [(device, why)] = dispatcher.quarantined().items()
        assert device.endswith("/local-cpu")
        assert why.startswith("2 failed trials in a row; last: timed out")
        with pytest.raises(DeviceError, match="no device of profile 'local-cpu' is left"):
            dispatcher.evaluate(_candidate(4), TRAINING, MEASURE, timeout_s=60)
        registry = find_registry()
        assert registry is not None
        states = {d["state"] for d in ray.get(registry.devices.remote())
                  if d["profile"] == "local-cpu"}
        assert "quarantined" in states
    finally:
        dispatcher.cancel()


@pytest.mark.usefixtures("ray_cluster")
def test_a_profile_without_a_device_in_the_cluster_is_an_error(tmp_path: Path) -> None:
    absent = HardwareProfile.model_validate({**yaml.safe_load(LOCAL_CPU), "name": "jetson-x"})
    with pytest.raises(DeviceError, match=r"no device of profile\(s\) \['jetson-x'\].*dse worker"):
        Dispatcher([absent], tmp_path).start()


@pytest.mark.usefixtures("ray_cluster")
def test_jobs_run_concurrently_and_come_back_by_key(tmp_path: Path) -> None:
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    dispatcher = Dispatcher([profile], tmp_path)
    try:
        for key, batch in enumerate((1, 2, 3)):
            dispatcher.submit(Job(key, _candidate(batch), TRAINING, MEASURE, 120))
        # One device: one job runs, two wait in its profile's queue.
        assert dispatcher.in_flight() == 3
        assert dispatcher.idle("local-cpu") == 0
        done = []
        while len(done) < 3:
            done.extend(dispatcher.wait())
        assert sorted(d.job.key for d in done) == [0, 1, 2]
        for d in done:
            assert d.measurement.status == "ok", d.measurement.reason
            assert d.device_id.startswith("local-cpu@")
            assert d.measurement.provenance["attempts"] == "1"
            assert float(d.measurement.provenance["measure_start"]) >= float(
                d.measurement.provenance["build_end"])
    finally:
        dispatcher.cancel()


class _WatchedLock(NodeLock):
    """A NodeLock that tells the test when each thread (by name) asks for and gets each of the
    lock's files (``.gate``, ``.lock``), so threads can be ordered by events instead of sleeps."""

    def __init__(self, node_id: str, lock_dir: Path, threads: list[str]) -> None:
        super().__init__(node_id, lock_dir)
        # Made up front: threads only look events up, so none is created twice.
        self.asked = {(t, f): threading.Event() for t in threads for f in (".gate", ".lock")}
        self.got = {(t, f): threading.Event() for t in threads for f in (".gate", ".lock")}

    @contextmanager
    def _held(self, path: Path, mode: int) -> Iterator[None]:
        key = (threading.current_thread().name, path.suffix)
        self.asked[key].set()
        with super()._held(path, mode):
            self.got[key].set()
            yield


def _hold(lock_cm: AbstractContextManager[None], order: list[str], name: str,
          release: threading.Event | None = None) -> None:
    """Hold ``lock_cm``, noting entry and exit in ``order``; until ``release`` if one is given."""
    with lock_cm:
        order.append(f"{name}+")
        if release is not None:
            assert release.wait(10), f"{name} was never released"
        order.append(f"{name}-")


def _waited(event: threading.Event, what: str) -> None:
    assert event.wait(10), f"timed out waiting until {what}"


def test_node_lock_measurement_waits_for_builds_and_new_builds_wait_for_it(
        tmp_path: Path) -> None:
    lock = _WatchedLock("test-node", tmp_path, ["build1", "measure", "build2"])
    order: list[str] = []  # list.append is atomic: the order in which holders came and went
    release_build1 = threading.Event()
    build1 = threading.Thread(target=_hold, name="build1",
                              args=(lock.shared(), order, "build1", release_build1))
    measure = threading.Thread(target=_hold, name="measure",
                               args=(lock.exclusive(), order, "measure"))
    # Arrives while the measurement waits: must not jump ahead of it (no writer starvation).
    build2 = threading.Thread(target=_hold, name="build2", args=(lock.shared(), order, "build2"))
    try:
        build1.start()
        _waited(lock.got["build1", ".lock"], "build1 holds the node")
        measure.start()
        # Past the gate and asking for the node: the measurement now waits for build1.
        _waited(lock.asked["measure", ".lock"], "the measurement waits for the node")
        build2.start()
        _waited(lock.asked["build2", ".gate"], "build2 asks for the node")
        assert order == ["build1+"]
    finally:
        release_build1.set()  # a failed step above must not leave build1 holding the node
    for thread in (build1, measure, build2):
        thread.join(10)
        assert not thread.is_alive(), f"{thread.name} is still holding or waiting"
    assert order == ["build1+", "build1-", "measure+", "measure-", "build2+", "build2-"]


def test_builds_share_the_node(tmp_path: Path) -> None:
    lock = NodeLock("test-node", tmp_path)
    # Each build waits inside the lock for the other: both get through only if they overlap.
    both_in = threading.Barrier(2, timeout=10)
    failures: list[BaseException] = []

    def build() -> None:
        with lock.shared():
            try:
                both_in.wait()
            except threading.BrokenBarrierError as exc:
                failures.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert not failures, "two builds did not overlap"
