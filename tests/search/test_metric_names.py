"""A campaign's study names its objectives after their metrics (optuna-dashboard and Optuna's plots
label the values by them): a new study, and an older one resumed that had none."""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml

from dse.search.study import open_study, study_progress
from dse.search.study_fingerprint import space_fingerprint
from dse.spec import SamplerSpec, SearchSpace
from tests.conftest import TINY_SPACE

OBJECTIVES = ["accuracy", "latency_p99_ms"]


def _space() -> SearchSpace:
    return SearchSpace.model_validate(yaml.safe_load(TINY_SPACE))


def test_a_new_study_names_its_objectives(tmp_path: Path) -> None:
    study = open_study(tmp_path / "run", "named", _space(), SamplerSpec())
    assert study.metric_names == OBJECTIVES
    stored = optuna.load_study(study_name="named", storage=f"sqlite:///{tmp_path / 'run' / 'study.db'}")
    assert stored.metric_names == OBJECTIVES
    assert study_progress(stored).started == 0


def test_an_older_study_gets_its_names_when_resumed(tmp_path: Path) -> None:
    space = _space()
    (tmp_path / "run").mkdir()
    storage = f"sqlite:///{tmp_path / 'run' / 'study.db'}"
    # As a dse before metric names wrote it: objectives and fingerprint, values unnamed.
    older = optuna.create_study(storage=storage, study_name="older",
                                directions=["maximize", "minimize"])
    older.set_user_attr("objectives", OBJECTIVES)
    older.set_user_attr("space_fingerprint", space_fingerprint(space))
    older.add_trial(optuna.trial.create_trial(values=[0.9, 1.5], user_attrs={"status": "ok"}))
    assert optuna.load_study(study_name="older", storage=storage).metric_names is None

    resumed = open_study(tmp_path / "run", "older", space, SamplerSpec())
    assert resumed.metric_names == OBJECTIVES
    assert optuna.load_study(study_name="older", storage=storage).metric_names == OBJECTIVES
    progress = study_progress(resumed)
    assert (progress.started, progress.completed, progress.running) == (1, 1, 0)
