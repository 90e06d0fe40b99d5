"""A driver killed outright (SIGKILL: no handler runs, nothing is cleaned up) mid-campaign; the
rerun loses no completed trial, measures none twice, and retries the interrupted one once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import sqlalchemy.exc
from optuna.trial import FrozenTrial, TrialState

from tests.conftest import REPO, tiny_experiment_text
from tests.search._sessions import kill_session, session_processes

BUDGET = 6
ENV = dict(os.environ, PYTHONUNBUFFERED="1", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
           RAY_USAGE_STATS_ENABLED="0")


def _run(experiment: Path) -> list[str]:
    return [sys.executable, "-m", "dse.cli", "run", str(experiment)]


def _read_trials(db: Path, name: str) -> list[FrozenTrial] | None:
    """The study's trials, read-only (never a write to the driver's database); None while the
    database, its tables (Optuna then tries to create them and is refused: StorageInternalError)
    or the study do not exist yet, or the driver holds a write lock."""
    if not db.is_file():
        return None
    storage = f"sqlite:///file:{db}?mode=ro&uri=true"
    try:
        return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    except (KeyError, sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
        return None


def _kill_driver_and_its_ray(driver: subprocess.Popen[bytes]) -> None:
    os.killpg(driver.pid, signal.SIGKILL)  # at once: the trial in flight must still be running
    driver.wait(timeout=30)
    # Ray's workers sit outside the driver's process group but in its session, which outlives it.
    kill_session(driver.pid)
    assert session_processes(driver.pid) == [], "processes of the killed driver survived"


def _in_measurement(trials: list[FrozenTrial]) -> bool:
    """A trial is running whose candidate no trial has measured yet: it is on its device (a
    repeat of a known candidate would finish at once, reusing the known result)."""
    known = {t.user_attrs.get("candidate_id") for t in trials if t.state.is_finished()}
    return any(t.state == TrialState.RUNNING and "candidate_id" in t.user_attrs
               and t.user_attrs["candidate_id"] not in known for t in trials)


def test_sigkill_mid_campaign_then_rerun_loses_nothing_and_measures_nothing_twice(
        tiny_campaign: Path) -> None:
    # Half a second of timing at least, so the kill cannot miss the measurement in flight.
    text = tiny_experiment_text(BUDGET, name="killed").replace(
        "min_seconds: 0.0, max_seconds: 0.5", "min_seconds: 0.5, max_seconds: 0.6")
    assert "min_seconds: 0.5" in text
    tiny_campaign.write_text(text)
    db = tiny_campaign.parent / "runs" / "killed" / "study.db"
    log = tiny_campaign.parent / "first-run.log"
    with log.open("wb") as out:
        driver = subprocess.Popen(_run(tiny_campaign), stdout=out, stderr=subprocess.STDOUT,
                                  env=ENV, cwd=REPO, start_new_session=True)
    try:
        # Kill while a candidate is being measured, after at least two trials completed.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and driver.poll() is None:
            trials = _read_trials(db, "killed") or []
            if sum(t.state == TrialState.COMPLETE for t in trials) >= 2 and _in_measurement(trials):
                break
            time.sleep(0.2)
        assert driver.poll() is None, "the campaign ended before it could be killed:\n" + (
            log.read_text())
        _kill_driver_and_its_ray(driver)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)

    at_kill = _read_trials(db, "killed")
    assert at_kill is not None
    before = {t.number: t for t in at_kill if t.state == TrialState.COMPLETE}
    interrupted = [t for t in at_kill if t.state == TrialState.RUNNING]
    measured_before = sum("reused_from" not in t.user_attrs for t in before.values())
    assert len(before) >= 2 and interrupted and measured_before < BUDGET

    rerun = subprocess.run(_run(tiny_campaign), capture_output=True, text=True, env=ENV,
                           cwd=REPO, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    trials = _read_trials(db, "killed")
    assert trials is not None
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]

    # What was complete before the kill is untouched: same number, values and candidate.
    for number, old in before.items():
        now = trials[number]
        assert now.state == TrialState.COMPLETE
        assert now.values == old.values
        assert now.user_attrs["candidate_id"] == old.user_attrs["candidate_id"]
    # The budget counts distinct candidates measured; a repeat reuses an earlier result.
    assert sum(t.state == TrialState.COMPLETE and "reused_from" not in t.user_attrs
               for t in trials) == BUDGET

    # The trial the kill caught is failed as interrupted, and its configuration re-queued once.
    for stopped in interrupted:
        failed = trials[stopped.number]
        assert failed.state == TrialState.FAIL
        assert failed.user_attrs["reason"] == "the driver stopped while this trial ran"
        assert failed.user_attrs["interrupted"] is True
        retries = [t for t in trials if t.user_attrs.get("requeued_from") == stopped.number]
        assert len(retries) == 1
        assert retries[0].state == TrialState.COMPLETE
        assert retries[0].params == stopped.params

    # No candidate was measured twice: a repeat of a measured candidate carries reused_from.
    measured = [t.user_attrs["candidate_id"] for t in trials
                if t.state == TrialState.COMPLETE and "reused_from" not in t.user_attrs]
    assert len(measured) == len(set(measured))
