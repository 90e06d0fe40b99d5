"""A run folder written before ``memory_peak_mb`` was renamed ``process_rss_peak_mb`` (the whole
process's RSS): its study still opens, and its tables report the metric under the new name."""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd
from optuna.trial import TrialState

from dse.results import (
    front_frame,
    load_campaign,
    study_constraints,
    study_objectives,
    trials_frame,
    write_results,
)
from dse.testing import candidate, record_trial

OLD = "memory_peak_mb"
NEW = "process_rss_peak_mb"


def _run_written_before_the_rename(run_dir: Path) -> Path:
    """A campaign's run folder as the search loop wrote it while the metric was ``memory_peak_mb``:
    study attributes, trial metrics, missing reasons and constraint names all use the old name."""
    run_dir.mkdir(parents=True)
    study = optuna.create_study(storage=f"sqlite:///{run_dir / 'study.db'}",
                                study_name=run_dir.name, directions=["maximize", "minimize"])
    study.set_user_attr("campaign", run_dir.name)
    study.set_user_attr("objectives", ["accuracy", OLD])
    study.set_user_attr("constraints", [f"{OLD} <= 4096"])
    for width, accuracy, memory in [(0.5, 0.80, 600.0), (1.0, 0.90, 700.0), (2.0, 0.95, 5000.0)]:
        record_trial(study, candidate("onnxruntime", "fp32", width, 1),
                     metrics={"accuracy": accuracy, OLD: memory},
                     constraints={f"{OLD} <= 4096": memory - 4096})
    record_trial(study, candidate("torch", "fp32", 1.0, 1), state=TrialState.FAIL,
                 status="failed", reason=f"{OLD} not measured: no memory reading in the window",
                 metrics={"accuracy": 0.85},
                 extra_attrs={"missing": {OLD: "no memory reading in the window"}})
    return run_dir


def test_an_old_run_folder_reports_the_metric_under_its_new_name(tmp_path: Path) -> None:
    run_dir = _run_written_before_the_rename(tmp_path / "runs" / "old")
    studies = load_campaign(run_dir)  # the direct SQLite reader, as reports read
    (study,) = studies
    assert study_objectives(study) == ["accuracy", NEW]
    assert study_constraints(study) == [f"{NEW} <= 4096"]

    trials = trials_frame(studies)
    assert not [c for c in trials.columns if OLD in c]
    assert trials[f"{NEW} [MB]"].tolist()[:3] == [600.0, 700.0, 5000.0]
    assert pd.isna(trials[f"{NEW} [MB]"].iloc[3])
    assert trials[f"constraint.{NEW} <= 4096"].tolist()[:3] == [600 - 4096, 700 - 4096,
                                                                5000 - 4096]
    # The old trials' constraints count: the one above the bound is infeasible.
    assert trials["feasible"].tolist() == [True, True, False, False]
    assert trials["missing"].iloc[3] == f"{NEW}: no memory reading in the window"

    objectives = study_objectives(study)
    front = front_frame(trials, objectives)
    assert front["trial"].tolist() == [0, 1]

    parquet, csv = write_results(studies, run_dir, objectives)
    assert f"{NEW} [MB]" in pd.read_parquet(parquet).columns
    written = pd.read_csv(csv)
    assert written["trial"].tolist() == [0, 1]
    assert written[f"{NEW} [MB]"].tolist() == [600.0, 700.0]
    assert not [c for c in written.columns if OLD in c]
