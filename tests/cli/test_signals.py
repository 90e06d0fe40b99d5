"""SIGTERM and SIGHUP stop `dse run` the way Ctrl-C does: trials in flight failed as interrupted,
exit 128 + the signal, no stack dump, and no trial left RUNNING."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import optuna
import pytest

from dse.core.exceptions import Terminated, interrupt_exit_code
from dse.search.interrupts import StickyInterrupt
from tests.cli.test_run import _start, read_until_trials
from tests.conftest import tiny_experiment_text


def test_a_stop_signal_mid_campaign_ends_it_like_ctrl_c(tiny_campaign: Path) -> None:
    # SIGTERM end to end; SIGHUP takes the same handler (the unit test below shows both raise
    # Terminated), so a second campaign of 25-85 s on the CI machine would show nothing more.
    stop = signal.SIGTERM
    name = f"stopped-{stop.name.lower()}"
    tiny_campaign.write_text(tiny_experiment_text(8, name=name))
    proc = _start(tiny_campaign)
    output = read_until_trials(proc, 1)
    assert sum(line.startswith("#") for line in output) == 1, "".join(output)
    proc.send_signal(stop)
    rest, _ = proc.communicate(timeout=120)
    out = "".join(output) + rest
    assert proc.returncode == 128 + stop, out
    assert "Traceback" not in out and "SIGABRT" not in out and "*** " not in out
    assert f"stopped by {stop.name}: the study is consistent" in out

    storage = f"sqlite:///{tiny_campaign.parent / 'runs' / name / 'study.db'}"
    trials = optuna.load_study(study_name=name, storage=storage).trials
    assert optuna.trial.TrialState.RUNNING not in [t.state for t in trials]
    for trial in trials:
        if trial.user_attrs.get("interrupted"):
            assert trial.state == optuna.trial.TrialState.FAIL
            assert trial.user_attrs["reason"] == (f"stopped by {stop.name} before the "
                                                  f"measurement finished")


def test_sigterm_and_sighup_raise_terminated_and_ctrl_c_stays_a_keyboard_interrupt() -> None:
    for stop, code in [(signal.SIGTERM, 143), (signal.SIGHUP, 129)]:
        # Python's default, or Ray's driver handler when a test before this one ran ray.init here.
        before = signal.getsignal(stop)
        with StickyInterrupt() as interrupts:
            with pytest.raises(Terminated) as caught:
                os.kill(os.getpid(), stop)
            assert caught.value.signum == stop
            assert interrupt_exit_code(caught.value) == code
            with pytest.raises(Terminated):
                interrupts.check()  # remembered, as Ctrl-C is
        assert signal.getsignal(stop) is before  # given back as it was
    assert interrupt_exit_code(KeyboardInterrupt()) == 130


def test_an_interrupt_inside_a_deferred_block_is_raised_when_it_ends() -> None:
    reached_end = False
    with StickyInterrupt() as interrupts, pytest.raises(KeyboardInterrupt), interrupts.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        reached_end = True  # the block finishes: the trial it creates is recorded
    assert reached_end
