"""Two `dse run` of one campaign: the second is refused while the first runs, and takes over once
the first is killed; nothing is measured twice and the budget holds."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from pathlib import Path

import optuna

from tests.cli.test_run import _start, read_until_trials
from tests.conftest import tiny_experiment_text

BUDGET = 6


def _first_trial(proc: subprocess.Popen[str]) -> list[str]:
    """Read ``proc``'s output until its first trial line (the lease is held by then)."""
    lines = read_until_trials(proc, 1)
    if not any(line.startswith("#") for line in lines):
        raise AssertionError("".join(lines))
    return lines


def _complete(campaign: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    storage = f"sqlite:///{campaign.parent / 'runs' / name / 'study.db'}"
    trials = optuna.load_study(study_name=name, storage=storage).trials
    return [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]


def test_a_second_driver_is_refused_while_the_first_runs(tiny_campaign: Path) -> None:
    tiny_campaign.write_text(tiny_experiment_text(BUDGET, name="two-drivers"))
    first = _start(tiny_campaign)
    _first_trial(first)
    second = _start(tiny_campaign)
    out, _ = second.communicate(timeout=300)
    assert second.returncode == 2, out
    refusal = [line for line in out.splitlines() if "is being run by pid" in line]
    assert len(refusal) == 1 and f"pid {first.pid} on " in refusal[0], out
    assert "Traceback" not in out
    rest, _ = first.communicate(timeout=600)
    assert first.returncode == 0, rest
    complete = _complete(tiny_campaign, "two-drivers")
    assert len(complete) == BUDGET
    # Reuses are not measurements: every candidate measured at most once.
    measured = Counter(t.user_attrs["candidate_id"] for t in complete
                       if "reused_from" not in t.user_attrs)
    assert max(measured.values()) == 1


def test_a_killed_drivers_lease_is_taken_over_and_said_so(tiny_campaign: Path) -> None:
    tiny_campaign.write_text(tiny_experiment_text(BUDGET, name="take-over"))
    first = _start(tiny_campaign)
    _first_trial(first)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    second = _start(tiny_campaign)
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0, out
    assert f"took over the lease of pid {first.pid} on " in out
    assert f"its process {first.pid} is gone" in out
    assert len(_complete(tiny_campaign, "take-over")) == BUDGET
