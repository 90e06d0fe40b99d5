"""Two `dse run` of one campaign: the second is refused while the first runs, and takes over once
the first is killed; nothing is measured twice and the budget holds.

The campaign is the shipped free-parameter space measured by an evaluator that, after its first
candidate, waits until the test releases it: the first driver is certainly still running when the
second arrives, and with neither training nor Ray the tests stay short. The lease does not care
what measures."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import optuna
import pytest

from tests.cli.test_run import read_until_trials
from tests.conftest import REPO

BUDGET = 6
SLOW_EVALUATOR = """\
import time
from pathlib import Path

from dse.examples.evaluators import zdt1

HERE = Path(__file__).parent


def slowly(candidate):
    with (HERE / "calls").open("a") as calls:
        calls.write("x")
    if (HERE / "calls").stat().st_size > 1:
        deadline = time.monotonic() + 120
        while not (HERE / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return zdt1(candidate)
"""


@pytest.fixture
def slow_campaign(tmp_path: Path) -> Path:
    """The experiment file of a campaign measured by ``slow_evaluator:slowly``, which sits
    beside its folders; creating ``release`` there lets it go past its first candidate."""
    (tmp_path / "search_spaces").mkdir()
    shutil.copyfile(REPO / "search_spaces" / "free-params-example.yaml",
                    tmp_path / "search_spaces" / "free.yaml")
    (tmp_path / "hw_profiles").mkdir()
    (tmp_path / "hw_profiles" / "sim.yaml").write_text(
        "name: sim\nkind: cpu\nbackends: [onnxruntime]\nprecisions: [fp32]\n")
    (tmp_path / "slow_evaluator.py").write_text(SLOW_EVALUATOR)
    (tmp_path / "experiments").mkdir()
    return tmp_path / "experiments" / "slow.yaml"


def _experiment_text(name: str) -> str:
    return (f"name: {name}\nsearch_space: ../search_spaces/free.yaml\n"
            f"devices: [../hw_profiles/sim.yaml]\nevaluator: slow_evaluator:slowly\n"
            f"sampler: {{name: random, seed: 1}}\nbudget: {{trials: {BUDGET}}}\n")


def _start(experiment: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="200",
               PYTHONPATH=os.pathsep.join([str(experiment.parent.parent), str(REPO)]))
    return subprocess.Popen([sys.executable, "-m", "dse.cli", "run", str(experiment)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=REPO)


def _first_trial(proc: subprocess.Popen[str]) -> list[str]:
    """Read ``proc``'s output until its first trial line (the lease is held by then)."""
    lines = read_until_trials(proc, 1)
    if not any(line.startswith("#") for line in lines):
        raise AssertionError("".join(lines))
    return lines


def _complete(campaign: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    """The campaign's completed trials that measured (a reuse of an earlier result is not one:
    the budget counts distinct candidates)."""
    storage = f"sqlite:///{campaign.parent / 'runs' / name / 'study.db'}"
    trials = optuna.load_study(study_name=name, storage=storage).trials
    return [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE
            and "reused_from" not in t.user_attrs]


def test_a_second_driver_is_refused_while_the_first_runs(slow_campaign: Path) -> None:
    slow_campaign.write_text(_experiment_text("two-drivers"))
    first = _start(slow_campaign)
    _first_trial(first)
    second = _start(slow_campaign)
    out, _ = second.communicate(timeout=300)
    (slow_campaign.parent.parent / "release").touch()
    assert second.returncode == 2, out
    refusal = [line for line in out.splitlines() if "is being run by pid" in line]
    assert len(refusal) == 1 and f"pid {first.pid} on " in refusal[0], out
    assert "Traceback" not in out
    rest, _ = first.communicate(timeout=600)
    assert first.returncode == 0, rest
    complete = _complete(slow_campaign, "two-drivers")
    assert len(complete) == BUDGET
    # Reuses are not measurements: every candidate measured at most once.
    measured = Counter(t.user_attrs["candidate_id"] for t in complete)
    assert max(measured.values()) == 1


def test_a_killed_drivers_lease_is_taken_over_and_said_so(slow_campaign: Path) -> None:
    slow_campaign.write_text(_experiment_text("take-over"))
    first = _start(slow_campaign)
    _first_trial(first)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    (slow_campaign.parent.parent / "release").touch()
    second = _start(slow_campaign)
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0, out
    assert f"took over the lease of pid {first.pid} on " in out
    assert f"its process {first.pid} is gone" in out
    assert len(_complete(slow_campaign, "take-over")) == BUDGET
