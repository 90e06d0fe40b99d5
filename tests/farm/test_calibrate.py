"""`dse calibrate` measures a device's run-to-run variation in fresh processes; the device's later
measurements hold it in every interval, and say so in their provenance."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from scipy.stats import t as student_t

from dse.app.api import load_experiment
from dse.core.candidate import Candidate
from dse.core.exceptions import MeasurementError
from dse.farm.worker import DeviceWorker
from dse.measure.run_to_run import RunToRun, load, save
from dse.measure.stats import PERCENTILES
from dse.spec import HardwareProfile, MeasureSpec, TrainingSpec
from dse.trial.calibrate import _one_run
from tests.conftest import LOCAL_CPU, REPO

TINY_ARCH = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}
QUICK = MeasureSpec(min_seconds=0.05, max_seconds=0.3, warmup_max_seconds=0.05, blocks=2)


def _calibrate(experiment: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "dse.cli", "calibrate", str(experiment), *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=600)


def test_dse_calibrate_saves_the_devices_variation_where_its_next_worker_reads_it(
        tiny_campaign: Path) -> None:
    done = _calibrate(tiny_campaign, "--runs", "2", "--gap-s", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run-to-run variation p50" in done.stdout and "saved to" in done.stdout

    experiment = load_experiment(tiny_campaign)
    files = list((experiment.cache_dir / "run_to_run" / "local-cpu").glob("*.json"))
    assert len(files) == 1
    found, _ = load(files[0])
    assert found is not None
    # Two runs of each reference workload: ONNX Runtime and two torch ones on this CPU.
    assert (found.runs, found.workloads, found.degrees_of_freedom) == (2, 3, 1)
    assert set(found.cv) == {name for name, _ in PERCENTILES}
    assert all(len(p50s) == 2 and min(p50s) > 0 for p50s in found.per_workload.values())

    worker = DeviceWorker(experiment.devices[0], str(experiment.cache_dir))
    assert worker.run_to_run == found


def test_a_campaign_of_replay_tables_has_nothing_to_calibrate() -> None:
    done = _calibrate(REPO / "experiments" / "custom-evaluator.yaml")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "no device of this campaign is measured by the farm" in done.stderr


def test_a_worker_floors_its_intervals_with_the_calibration_unless_told_not_to(tmp_path: Path
                                                                               ) -> None:
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    path = DeviceWorker(profile, str(tmp_path)).run_to_run_path
    # A variation far above any run's own (1000%): the floor then decides the interval whatever
    # the machine does meanwhile, and a run without it is certain to be narrower.
    save(RunToRun(cv={"p50": 10.0}, runs=8, workloads=2, degrees_of_freedom=14, device="here",
                  measured_at=0.0), path)
    worker = DeviceWorker(profile, str(tmp_path))
    candidate = Candidate("cnn", TINY_ARCH, "fp32", 4, "onnxruntime", {"intra_op_threads": 1})
    training = TrainingSpec(epochs=1, batch_size=256)

    floored = worker.evaluate(candidate, training, QUICK)
    assert floored.status == "ok", floored.reason
    m = floored.metrics
    half = float(student_t.ppf(0.975, 14)) * 10.0 * m["latency_p50_ms"]
    assert m["latency_p50_ci_high_ms"] - m["latency_p50_ms"] >= half * (1 - 1e-9)
    assert floored.provenance["run_to_run"].startswith("run-to-run variation p50 1000.0%")
    assert floored.provenance["run_to_run_cv_p50"] == "10.00000"

    alone = worker.evaluate(candidate, training, QUICK.model_copy(update={"run_to_run": "off"}))
    assert alone.provenance["run_to_run"] == "off (measurement.run_to_run)"
    assert alone.metrics["latency_p50_ci_high_ms"] - alone.metrics["latency_p50_ms"] < half


def test_an_uncalibrated_device_says_how_to_calibrate_it(tmp_path: Path) -> None:
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    worker = DeviceWorker(profile, str(tmp_path))
    assert worker.run_to_run is None
    assert "dse calibrate" in worker.run_to_run_note


def test_a_calibration_run_that_fails_names_the_cause() -> None:
    request = {"workloads": {"gone": ["torch", "/nonexistent/model.pt", [1, 1, 8, 8]]},
               "device": "cpu", "measure": MeasureSpec().model_dump(mode="json")}
    with pytest.raises(MeasurementError, match=r"exit 1.*No such file"):
        _one_run(request)
