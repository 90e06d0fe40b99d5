"""``dse export`` refuses, in one line and before any device work, a trial with nothing to
export: one that failed, was infeasible or was screened out. The study is a real Optuna study
on disk, written as a campaign's run would leave it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.conftest import LOCAL_CPU, TINY_SPACE, tiny_experiment_text

CANDIDATE = {"family": "cnn", "arch": {"num_stages": 2}, "precision": "fp32", "batch_size": 8,
             "backend": "onnxruntime", "knobs": {}, "device_profile": "local-cpu"}


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """A campaign folder whose study holds an infeasible, a failed and a screened-out trial."""
    for folder, name, text in [("search_spaces", "tiny.yaml", TINY_SPACE),
                               ("hw_profiles", "local-cpu.yaml", LOCAL_CPU),
                               ("experiments", "tiny.yaml", tiny_experiment_text(3))]:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_text(text)
    run_dir = tmp_path / "experiments" / "runs" / "tiny-campaign"
    run_dir.mkdir(parents=True)
    study = optuna.create_study(study_name="tiny-campaign", directions=["maximize", "minimize"],
                                storage=f"sqlite:///{run_dir / 'study.db'}")
    study.set_user_attr("device_profile", "local-cpu")
    failed = optuna.trial.TrialState.FAIL
    for attrs, state, values in [
            ({"status": "infeasible", "reason": "onnxruntime could not load model.onnx"}, failed,
             None),
            ({"status": "failed", "reason": "RuntimeError: the runner crashed\nat line 2"},
             failed, None),
            ({"status": "ok", "fidelity": "screen",
              "provenance": {"screen_verdict": "dominated by trial 0 on the front"}},
             optuna.trial.TrialState.COMPLETE, [0.5, 1.0])]:
        study.add_trial(optuna.trial.create_trial(
            state=state, values=values, user_attrs={"candidate": CANDIDATE, **attrs}))
    return tmp_path / "experiments" / "tiny.yaml"


def _export(experiment: Path, trial: int, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dse.cli", "export", str(experiment),
                           "--trial", str(trial), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("trial", "says"), [
    (0, "trial 0 on local-cpu is infeasible (onnxruntime could not load model.onnx): only a "
        "measured trial can be exported"),
    (1, "trial 1 on local-cpu is failed (RuntimeError: the runner crashed): only a measured "
        "trial can be exported"),
    (2, "trial 2 on local-cpu was screened out (dominated by trial 0 on the front): it was "
        "never measured in full, so there is no measurement to export with it"),
    (7, "device 'local-cpu' has no trial 7 (its trials: 0 to 2)"),
])
def test_a_trial_without_a_measurement_is_refused(recorded: Path, tmp_path: Path, trial: int,
                                                  says: str) -> None:
    done = _export(recorded, trial, tmp_path / "bundle")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [f"{recorded}: {says}"]
    assert not (tmp_path / "bundle").exists()
