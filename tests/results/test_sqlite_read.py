"""Reading a study straight from SQLite gives exactly the trials Optuna's ORM gives."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from dse.results import load_campaign, trials_frame
from dse.results.sqlite_read import SnapshotStudy, read_trials
from dse.testing import example_run


def _orm_trials(db: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}").get_trials()


def test_direct_read_equals_optunas_own(tmp_path: Path) -> None:
    run_dir = example_run(tmp_path / "runs" / "example")
    db = run_dir / "study.db"
    name = optuna.study.get_all_study_names(f"sqlite:///{db}")[0]
    direct = read_trials(db, name)
    assert direct is not None
    orm = _orm_trials(db, name)
    assert len(direct) == len(orm) > 0
    for ours, theirs in zip(direct, orm, strict=True):
        for field in ("number", "state", "values", "params", "distributions", "user_attrs",
                      "system_attrs", "intermediate_values", "datetime_start",
                      "datetime_complete", "_trial_id"):
            assert getattr(ours, field) == getattr(theirs, field), field
    with pytest.raises(KeyError, match="no study 'nope'"):
        read_trials(db, "nope")


def test_campaign_loads_as_snapshot_and_falls_back_on_an_unknown_schema(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = example_run(tmp_path / "runs" / "example")
    studies = load_campaign(run_dir)
    assert all(isinstance(s, SnapshotStudy) for s in studies)
    expected = trials_frame(studies)

    # A schema this reader does not know (a future Optuna's): Optuna itself reads the study.
    monkeypatch.setattr("dse.results.sqlite_read.KNOWN_SCHEMAS", frozenset({"v9.9.9"}))
    assert read_trials(run_dir / "study.db", studies[0].study_name) is None
    fallback = load_campaign(run_dir)
    assert not any(isinstance(s, SnapshotStudy) for s in fallback)
    assert trials_frame(fallback).equals(expected)
