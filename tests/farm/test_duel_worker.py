"""A duel on the device worker: two candidates built from the caches in one process, timed
against each other under the node lock, with the device's probes around the window."""

from __future__ import annotations

from pathlib import Path

import yaml

from dse.core.candidate import Candidate
from dse.farm.worker import DeviceWorker
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec
from dse.trial.duel_window import DuelReport, DuelRequest
from tests.conftest import LOCAL_CPU

TINY_ARCH = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}


def test_a_duel_of_two_real_runners_orders_them_as_their_work_does(tmp_path: Path) -> None:
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    worker = DeviceWorker(profile, str(tmp_path))
    knobs = {"intra_op_threads": 1}
    one = Candidate("cnn", TINY_ARCH, "fp32", 1, "onnxruntime", knobs)
    many = Candidate("cnn", TINY_ARCH, "fp32", 64, "onnxruntime", knobs)  # 64 images a call
    # Other work on this shared machine is recorded, not acted on: the verdict is the point.
    measure = MeasureSpec.model_validate({
        "interference": {"action": "ignore"},
        "duels": {"max_seconds": 2.0, "block_seconds": 0.02}})
    training = TrainingSpec(epochs=1, batch_size=256)
    report = worker.duel(DuelRequest(many, one, training, measure, (0.5,)))
    assert isinstance(report, DuelReport), report
    assert report.run.verdicts() == {0.5: "b_faster"}
    assert report.run.ratios[0.5] is not None and report.run.ratios[0.5].low > 1
    assert (report.disturbed, report.attempts, report.device_id) == (False, 1, worker.device_id)
    assert report.window_start < report.window_end

    # A candidate the device cannot build is a one-line reason, not an error.
    refused = worker.duel(DuelRequest(
        one, Candidate("cnn", TINY_ARCH, "int8", 1, "torch", {"num_threads": 1}), training,
        measure, (0.5,)))
    assert isinstance(refused, str) and refused.startswith("candidate B (")
    assert "int8" in refused
