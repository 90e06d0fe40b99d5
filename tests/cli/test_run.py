"""`dse run` as a user runs it: Ctrl-C mid-campaign leaves a consistent study; a rerun resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna

from tests.conftest import REPO, tiny_experiment_text


def _start(experiment: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="200")
    return subprocess.Popen([sys.executable, "-m", "dse.cli", "run", str(experiment)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=REPO)


def read_until_trials(proc: subprocess.Popen[str], count: int) -> list[str]:
    """``proc``'s output up to its ``count``-th finished-trial line (fewer if it ends first)."""
    assert proc.stdout is not None
    output: list[str] = []
    deadline = time.monotonic() + 240
    while sum(line.startswith("#") for line in output) < count and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        output.append(line)
    return output


def test_ctrl_c_then_rerun_completes_without_remeasuring(tiny_campaign: Path) -> None:
    tiny_campaign.write_text(tiny_experiment_text(5, name="interrupted"))
    proc = _start(tiny_campaign)
    output = read_until_trials(proc, 2)
    assert sum(line.startswith("#") for line in output) == 2, "".join(output)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(output) + rest
    assert "Traceback" not in rest
    # The run's output is dse's own: the embedded Ray announces nothing (its token auth included).
    assert "Ray" not in "".join(output) + rest, "".join(output) + rest
    assert "run the same command again to resume" in rest

    storage = f"sqlite:///{tiny_campaign.parent / 'runs' / 'interrupted' / 'study.db'}"
    study = optuna.load_study(study_name="interrupted", storage=storage)
    states = [t.state for t in study.trials]
    assert optuna.trial.TrialState.RUNNING not in states
    first = {t.number: t.values for t in study.trials
             if t.state == optuna.trial.TrialState.COMPLETE}
    assert len(first) >= 2

    again = _start(tiny_campaign)
    out, _ = again.communicate(timeout=600)
    assert again.returncode == 0, out
    assert "Pareto front" in out
    study = optuna.load_study(study_name="interrupted", storage=storage)
    complete = {t.number: t.values for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE}
    # The budget counts distinct candidates measured; a repeat reuses an earlier result.
    assert sum("reused_from" not in t.user_attrs for t in study.trials
               if t.number in complete) == 5
    # What was complete before the interrupt is untouched, and no trial was measured twice.
    assert all(complete[n] == v for n, v in first.items())
    new_numbers = [n for n in complete if n not in first]
    assert min(new_numbers) > max(first)
    # A candidate the interrupt caught mid-measurement is measured again on the rerun, once.
    for stopped in (t for t in study.trials if t.user_attrs.get("interrupted")):
        retries = [t for t in study.trials if t.user_attrs.get("requeued_from") == stopped.number]
        assert len(retries) == 1
        assert retries[0].state == optuna.trial.TrialState.COMPLETE
    assert (tiny_campaign.parents[1] / "dashboards" / "interrupted.html").is_file()


def test_run_with_a_bad_experiment_says_why_and_exits_2(tiny_campaign: Path) -> None:
    tiny_campaign.write_text(tiny_experiment_text(4).replace("budget: {trials: 4}",
                                                             "budget: {trials: many}"))
    proc = subprocess.run([sys.executable, "-m", "dse.cli", "run", str(tiny_campaign)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stdout + proc.stderr
    assert f"{tiny_campaign}: budget.trials: Input should be a valid integer" in proc.stderr
