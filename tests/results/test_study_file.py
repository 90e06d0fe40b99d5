"""A study.db that is a folder, another file, damaged or empty, and a run folder dse may not write:
`dse run` and `dse report` say so in one line naming the file, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.replay_campaign import replay_campaign

REPO = Path(__file__).resolve().parents[2]


def _dse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dse.cli", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=300)


def _campaign(tmp_path: Path) -> tuple[Path, Path]:
    experiment = replay_campaign(tmp_path, "faulty", 4)
    run_dir = tmp_path / "experiments" / "runs" / "faulty"
    run_dir.mkdir(parents=True)
    return experiment, run_dir / "study.db"


def _one_line(done: subprocess.CompletedProcess[str], study: Path, says: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{study}: ") and says in lines[0], lines


def _damaged(study: Path) -> None:
    """A real study database cut in half, as a crash of the disk or a bad copy leaves it."""
    stored = optuna.create_study(study_name="faulty", storage=f"sqlite:///{study}")
    for _ in range(30):
        stored.add_trial(optuna.trial.create_trial(params={"x": 1.0}, distributions={
            "x": optuna.distributions.FloatDistribution(0, 2)}, value=1.0))
    data = study.read_bytes()
    study.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(("make", "says"), [
    (lambda study: study.mkdir(), "is a folder, not the campaign's study database"),
    (lambda study: study.write_bytes(b"\x00junk" * 100), "not an SQLite database"),
    (_damaged, "the study database is damaged (SQLite: "),
])
def test_a_study_db_that_is_no_database_is_one_line_for_run_and_report(
        tmp_path: Path, make: object, says: str) -> None:
    experiment, study = _campaign(tmp_path)
    make(study)  # type: ignore[operator]
    _one_line(_dse("run", str(experiment)), study, says)
    _one_line(_dse("report", str(experiment)), study, says)


def test_an_empty_study_db_is_started_by_a_run_and_explained_by_a_report(tmp_path: Path) -> None:
    experiment, study = _campaign(tmp_path)
    study.touch()
    _one_line(_dse("report", str(experiment)), study, "the study database is empty")
    done = _dse("run", str(experiment))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever a folder's mode says")
def test_a_run_folder_this_user_may_not_write_is_one_line(tmp_path: Path) -> None:
    experiment, study = _campaign(tmp_path)
    study.parent.chmod(0o555)
    try:
        _one_line(_dse("run", str(experiment)), study.parent, "not writable by this user")
    finally:
        study.parent.chmod(0o755)
