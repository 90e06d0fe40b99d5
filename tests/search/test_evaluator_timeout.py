"""A custom evaluator cannot stop the campaign: a call that hangs is stopped at the trial timeout,
``sys.exit`` and ``KeyboardInterrupt`` inside it fail only its trial, and Ctrl-C still stops the
run. Through the real CLI, the Python API, and the runners of ``dse.search.evaluators.runner``.

The hanging evaluators sleep for an hour (or wait on an event nobody sets), so a timeout is
certain whatever the machine's load; nothing here asserts how long anything took.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pandas as pd
import psutil
import pytest

from dse.app.api import run_campaign
from dse.core.candidate import Candidate
from dse.examples.evaluators import zdt1
from dse.search.evaluators.dispatchers import Evaluator, EvaluatorDispatcher, ReplayEvaluator
from dse.search.evaluators.runner import (
    InlineRunner,
    Outcome,
    ProcessRunner,
    ThreadRunner,
    importable_reference,
)
from tests.conftest import LOCAL_CPU, REPO

HELPERS = "dse_evaluator_helpers"  # the evaluator module written into each test's folder

HELPERS_TEXT = """\
import os
import signal
import sys
import time
from pathlib import Path

from dse.search.evaluators.dispatchers import InfeasibleCandidate


def _score(candidate):
    return {"score": float(candidate.params["x"])}


def hang_on_two(candidate):
    if candidate.params["x"] == 2:
        time.sleep(3600)
    return _score(candidate)


def exit_on_two(candidate):
    if candidate.params["x"] == 2:
        sys.exit(0)
    return _score(candidate)


def interrupt_on_two(candidate):
    if candidate.params["x"] == 2:
        raise KeyboardInterrupt
    return _score(candidate)


def infeasible_or_raise(candidate):
    if candidate.params["x"] == 0:
        raise InfeasibleCandidate("x = 0 cannot be built")
    raise ValueError(f"x = {candidate.params['x']} is too hot")


def act(candidate):  # its process id, after doing what the candidate's act says
    action = candidate.params.get("act")
    if action == "end process":
        os._exit(3)
    if action == "interrupt driver":  # Ctrl-C as the driver gets it, while it waits for this call
        os.kill(os.getppid(), signal.SIGINT)
    if action == "record pid":
        Path(candidate.params["pid_file"]).write_text(str(os.getpid()))
    if action in ("hang", "interrupt driver", "record pid"):
        time.sleep(3600)
    return {"pid": os.getpid()}
"""

SPACE = """\
name: hangs
parameters:
  x: [0, 1, 2, 3]
metrics:
  - {name: score, unit: "1", direction: minimize}
objectives:
  - metric: score
"""


def _experiment_text(evaluator: str) -> str:
    # The baseline is measured first, so the misbehaving candidate (x = 2) always is.
    return ("name: hangs\nsearch_space: ../search_spaces/hangs.yaml\n"
            "devices: [../hw_profiles/sim.yaml]\nsampler: {name: random, seed: 3}\n"
            "budget: {trials: 3, trial_timeout_s: 1}\nbaseline: {params: {x: 2}}\n"
            f"{evaluator}")


@pytest.fixture
def helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The helper evaluators, importable here and (through sys.path) in a worker process."""
    (tmp_path / f"{HELPERS}.py").write_text(HELPERS_TEXT)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield __import__(HELPERS)
    sys.modules.pop(HELPERS, None)


@pytest.fixture
def hangs_campaign(tmp_path: Path) -> Path:
    """A four-candidate campaign on one profile that an evaluator stands in for; the helper
    evaluators sit beside its folders."""
    for folder, name, text in [("search_spaces", "hangs.yaml", SPACE),
                               ("hw_profiles", "sim.yaml",
                                LOCAL_CPU.replace("name: local-cpu", "name: sim")),
                               ("experiments", "hangs.yaml", _experiment_text(""))]:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_text(text)
    (tmp_path / f"{HELPERS}.py").write_text(HELPERS_TEXT)
    return tmp_path / "experiments" / "hangs.yaml"


def _cli_run(experiment: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(experiment.parent.parent), str(REPO)]),
               RAY_USAGE_STATS_ENABLED="0", COLUMNS="200")
    # Without a deadline on the evaluator the run would hang for an hour: fail instead.
    return subprocess.run([sys.executable, "-m", "dse.cli", "run", str(experiment)],
                          capture_output=True, text=True, env=env, cwd=experiment.parent,
                          timeout=300)


def _trials(experiment: Path) -> pd.DataFrame:
    return pd.read_parquet(experiment.parent / "runs" / "hangs" / "trials.parquet")


def _misbehaving_trials_failed(trials: pd.DataFrame, reason: str) -> None:
    """x = 2 was measured once and failed with ``reason`` (its repeats reused that); the budget
    of three trials completed on the other candidates."""
    two = trials[trials["param.x"] == 2]
    measured = two[two["reused_from"].isna()] if "reused_from" in two else two
    assert len(measured) == 1, two
    assert (two["status"] == "failed").all()
    assert two["reason"].str.contains(reason, regex=False).all(), two["reason"].tolist()
    ok = trials[trials["status"] == "ok"]
    # The budget counts distinct candidates: three measured, any repeats reused.
    assert ok["reused_from"].isna().sum() == 3 and (ok["param.x"] != 2).all()
    assert (ok["score [1]"] == ok["param.x"]).all()


# -- through the CLI -------------------------------------------------------------------------------

def test_cli_a_hanging_evaluator_fails_its_trial_at_the_timeout_and_the_run_completes(
        hangs_campaign: Path) -> None:
    hangs_campaign.write_text(_experiment_text(f"evaluator: {HELPERS}:hang_on_two\n"))

    result = _cli_run(hangs_campaign)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    _misbehaving_trials_failed(_trials(hangs_campaign), (
        f"evaluator {HELPERS}:hang_on_two timed out after 1 s (budget.trial_timeout_s); its "
        f"worker process was killed; a fresh one takes the next trial"))


@pytest.mark.parametrize(("function", "reason"), [
    ("exit_on_two", "raised SystemExit (exit code 0): an evaluator cannot stop the campaign, so "
                    "only this trial fails"),
    ("interrupt_on_two", "raised KeyboardInterrupt: an evaluator cannot stop the campaign"),
])
def test_cli_an_evaluator_that_exits_or_interrupts_fails_only_its_trial(
        hangs_campaign: Path, function: str, reason: str) -> None:
    hangs_campaign.write_text(_experiment_text(f"evaluator: {HELPERS}:{function}\n"))

    result = _cli_run(hangs_campaign)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "Pareto front" in result.stdout
    _misbehaving_trials_failed(_trials(hangs_campaign), f"evaluator {HELPERS}:{function} {reason}")


# -- through the Python API ------------------------------------------------------------------------

def test_api_a_hanging_closure_is_abandoned_at_the_timeout_and_the_campaign_goes_on(
        hangs_campaign: Path) -> None:
    release = threading.Event()
    calls: list[int] = []

    def evaluator(candidate: Candidate) -> dict[str, float]:
        calls.append(candidate.params["x"])  # a closure shares the caller's state
        if candidate.params["x"] == 2:
            release.wait()
        return {"score": float(candidate.params["x"])}

    try:
        result = run_campaign(hangs_campaign, evaluator=evaluator, report=False)
    finally:
        release.set()  # let the abandoned call end
    _misbehaving_trials_failed(result.trials, (
        "timed out after 1 s (budget.trial_timeout_s); it runs in a thread of dse, which cannot "
        "be stopped, so the call was abandoned and runs on"))
    assert calls[0] == 2 and calls.count(2) == 1 and len(calls) > 1


# -- the runners -----------------------------------------------------------------------------------

def _candidate(**params: object) -> Candidate:
    return Candidate(params=dict(params), device_profile="sim")


def _pid(outcome: Outcome) -> int:
    assert outcome.kind == "returned", outcome
    assert isinstance(outcome.result, dict)
    pid: int = outcome.result["pid"]
    return pid


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


@pytest.mark.usefixtures("helpers")
def test_a_worker_process_past_its_deadline_is_killed_and_replaced() -> None:
    runner = ProcessRunner(f"{HELPERS}:act")
    try:
        first = _pid(runner.call(_candidate(), None))
        assert first != os.getpid() and _pid(runner.call(_candidate(), None)) == first
        hung = runner.call(_candidate(act="hang"), 0.5)
        assert hung == Outcome("failed", error="timed out after 0.5 s (budget.trial_timeout_s); "
                                               "its worker process was killed; a fresh one "
                                               "takes the next trial")
        assert _gone(first)
        assert _pid(runner.call(_candidate(), 60.0)) not in (first, os.getpid())
        assert runner.started == 2
    finally:
        runner.close()


@pytest.mark.usefixtures("helpers")
@pytest.mark.parametrize("kind", ["process", "thread"])
@pytest.mark.parametrize(("function", "raised"), [
    ("exit_on_two", "raised SystemExit (exit code 0)"),
    ("interrupt_on_two", "raised KeyboardInterrupt"),
])
def test_exit_and_interrupt_inside_the_evaluator_fail_the_call_and_the_runner_goes_on(
        helpers: ModuleType, kind: str, function: str, raised: str) -> None:
    runner = (ProcessRunner(f"{HELPERS}:{function}") if kind == "process"
              else ThreadRunner(getattr(helpers, function)))
    try:
        stopped = runner.call(_candidate(x=2), 60.0)
        assert stopped.kind == "failed" and stopped.error.startswith(raised), stopped
        assert runner.call(_candidate(x=1), 60.0).result == {"score": 1.0}
    finally:
        runner.close()
    if isinstance(runner, ProcessRunner):
        assert runner.started == 1  # the worker lived through it


@pytest.mark.usefixtures("helpers")
def test_an_evaluator_that_ends_its_worker_process_fails_its_call() -> None:
    runner = ProcessRunner(f"{HELPERS}:act")
    try:
        ended = runner.call(_candidate(act="end process"), 60.0)
        assert ended == Outcome("failed", error="ended its worker process (exit code 3); a fresh "
                                                "one takes the next trial")
        _pid(runner.call(_candidate(), 60.0))
        assert runner.started == 2
    finally:
        runner.close()


def test_a_worker_that_cannot_load_its_evaluator_fails_the_call(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    (tmp_path / "dse_broken_evaluators.py").write_text("raise RuntimeError('no licence')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    outcome = ProcessRunner("dse_broken_evaluators:f").call(_candidate(x=0), 60.0)
    assert outcome == Outcome("failed", error="cannot be loaded in its worker process: "
                                              "RuntimeError: no licence")


def test_infeasible_and_exceptions_keep_their_form_in_a_worker_process(
        helpers: ModuleType) -> None:
    dispatcher = EvaluatorDispatcher({"sim": helpers.infeasible_or_raise}, {"score"})
    try:
        infeasible = dispatcher.measure(_candidate(x=0), 60.0)
        raised = dispatcher.measure(_candidate(x=1), 60.0)
    finally:
        dispatcher.cancel()
    assert (infeasible.status, infeasible.reason) == ("infeasible", "x = 0 cannot be built")
    assert (raised.status, raised.reason) == (
        "failed", f"evaluator {HELPERS}:infeasible_or_raise raised ValueError: x = 1 is too hot")
    assert raised.provenance["evaluator_runs_in"] == "worker process"


@pytest.mark.usefixtures("helpers")
def test_ctrl_c_while_a_call_runs_stops_the_driver_and_its_worker() -> None:
    # Ctrl-C as Python delivers it, whatever handler earlier code of this process left (the
    # suite's embedded Ray installs its own): a swallowed SIGINT once hung this test for good.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    runner = ProcessRunner(f"{HELPERS}:act")
    try:
        first = _pid(runner.call(_candidate(), 60.0))
        with pytest.raises(KeyboardInterrupt):
            # A deadline, so a lost interrupt fails the test instead of hanging the suite.
            runner.call(_candidate(act="interrupt driver"), 120.0)
        assert _gone(first)
        # A fresh worker: the interrupted one's late answer is never taken for this call's.
        assert _pid(runner.call(_candidate(), 60.0)) != first
        assert runner.started == 2
    finally:
        runner.close()
        signal.signal(signal.SIGINT, previous)


class _CtrlCLostInAFinaliser:
    """A parameter whose pickling (as the driver sends the call) lets a Ctrl-C land inside a
    finaliser, where Python prints the KeyboardInterrupt as "Exception ignored" and drops it; it
    reaches the worker as a plain string."""

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        _PressesCtrlCWhenDropped()  # dropped at once: its __del__ runs now, inside the pickling
        return (str, ("pickled",))


class _PressesCtrlCWhenDropped:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, inside the finaliser


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.usefixtures("helpers")
def test_a_ctrl_c_that_python_drops_in_a_callback_still_stops_the_call() -> None:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    runner = ProcessRunner(f"{HELPERS}:act")
    try:
        first = _pid(runner.call(_candidate(), 60.0))
        with pytest.raises(KeyboardInterrupt):
            # Without the remembered interrupt the call waits out its deadline (None: timed out).
            runner.call(_candidate(act="hang", lost=_CtrlCLostInAFinaliser()), 120.0)
        assert _gone(first)
    finally:
        runner.close()
        signal.signal(signal.SIGINT, previous)


def test_the_worker_process_ends_with_a_killed_driver(helpers: ModuleType, tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    driver_code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
                   "from dse.core.candidate import Candidate\n"
                   "from dse.search.evaluators.runner import ProcessRunner\n"
                   f"ProcessRunner('{HELPERS}:act').call(Candidate(params={{\n"
                   f"    'act': 'record pid', 'pid_file': {str(pid_file)!r}}}), None)\n")
    driver = subprocess.Popen([sys.executable, "-c", driver_code], cwd=REPO)
    try:
        _wait_for(pid_file.exists, "the worker to start its call")
        worker = int(pid_file.read_text())
    finally:
        driver.kill()  # SIGKILL: no finaliser of the driver runs
        driver.wait()
    _wait_for(lambda: _gone(worker), "the orphaned worker to end")


def _wait_for(condition: object, what: str, limit_s: float = 120.0) -> None:
    """Wait for an event of another process (a bound only against hanging the suite)."""
    assert callable(condition)
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {limit_s:g} s for {what}"
        time.sleep(0.05)


def test_where_each_kind_of_evaluator_runs(helpers: ModuleType, tmp_path: Path) -> None:
    def closure(candidate: Candidate) -> dict[str, float]:
        return zdt1(candidate)

    class Bound:
        def method(self, candidate: Candidate) -> dict[str, float]:
            return zdt1(candidate)

    assert importable_reference(zdt1) == "dse.examples.evaluators:zdt1"
    assert importable_reference(helpers.act) == f"{HELPERS}:act"
    for other in (closure, lambda c: zdt1(c), Bound().method, Bound()):
        assert importable_reference(other) is None, other

    table = tmp_path / "t.csv"
    table.write_text("x1,x2,zdt_f1,zdt_f2\n0.5,0.5,0.5,1.0\n")
    from dse.spec import SearchSpace

    space = SearchSpace.model_validate({
        "name": "free", "parameters": {"x1": [0.5], "x2": [0.5]},
        "metrics": [{"name": n, "unit": "1", "direction": "minimize"} for n in ("zdt_f1", "zdt_f2")],
        "objectives": [{"metric": "zdt_f1"}, {"metric": "zdt_f2"}]})
    evaluators: list[tuple[str, Evaluator]] = [("module function", zdt1), ("closure", closure),
                                               ("replay", ReplayEvaluator(table, space))]
    runs_in = {}
    for label, function in evaluators:
        dispatcher = EvaluatorDispatcher({"sim": function}, {"zdt_f1", "zdt_f2"})
        try:
            measured = dispatcher.measure(_candidate(x1=0.5, x2=0.5), 60.0)
        finally:
            dispatcher.cancel()
        assert measured.status == "ok", measured.reason
        runs_in[label] = measured.provenance["evaluator_runs_in"]
    assert runs_in == {"module function": ProcessRunner.where, "closure": ThreadRunner.where,
                       "replay": InlineRunner.where}
