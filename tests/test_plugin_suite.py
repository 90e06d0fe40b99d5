"""dse.testing's suites prove a part that dse does not ship: the toy backend and the toy probe,
defined only in ``tests/test_toy_parts.py`` and loaded as a plugin through ``$DSE_PLUGINS``, pass
every test of :class:`~dse.testing.BackendSuite` and :class:`~dse.testing.ProbeSuite`, run by a
pytest of their own (``tests/toy_plugin_suites.py``) as a plugin's author runs them. And the
suites have teeth: a runner or a probe that breaks its contract fails them."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dse.backends import Runner
from dse.measure.telemetry import Probe, ProbeResult, Trace, Window
from dse.testing import BackendSuite, ProbeSuite
from tests.conftest import REPO
from tests.test_toy_parts import NAME, PLUGIN

SUITES = REPO / "tests" / "toy_plugin_suites.py"


def _suite_tests(suite: type) -> set[str]:
    return {name for name in dir(suite) if name.startswith("test_")}


def _outcomes(report: Path) -> dict[str, dict[str, set[str]]]:
    """class -> test case (with its parameters) -> its outcomes."""
    found: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome = next((child.tag for child in case
                        if child.tag in ("failure", "error", "skipped")), "passed")
        found[case.attrib["classname"].rsplit(".", 1)[-1]][case.attrib["name"]].add(outcome)
    return found


def test_the_toy_parts_loaded_as_a_plugin_pass_the_shipped_suites(tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    env = {**os.environ, "DSE_PLUGINS": PLUGIN, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(SUITES), "-q", "-rs", "-p", "no:cacheprovider",
         "-o", "addopts=", f"--junitxml={report}", f"--basetemp={tmp_path / 'base'}"],
        capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    outcomes = _outcomes(report)
    for suite, subclass in ((BackendSuite, "TestToyBackend"), (ProbeSuite, "TestToyProbe")):
        # Every test of the suite ran against the toy.
        assert {case.split("[")[0] for case in outcomes[subclass]} == _suite_tests(suite), \
            sorted(outcomes[subclass])
    # Every case passed, but the backend's runner tests at int8, which the toy's capability
    # refuses on a CPU: skipped, saying so.
    cases = {**outcomes["TestToyBackend"], **outcomes["TestToyProbe"]}
    skipped = {case for case, seen in cases.items() if seen == {"skipped"}}
    assert {case for case, seen in cases.items() if seen != {"passed"}} == skipped
    assert skipped == {case for case in outcomes["TestToyBackend"] if "[int8]" in case}
    assert len(skipped) >= 10, sorted(skipped)
    assert (f"{NAME} runs no int8 on a cpu device: the toy runner has no int8 on a cpu device"
            in done.stdout), done.stdout[-3000:]


class _Unclosable(Runner):
    """Logits of zeros; close() frees nothing, so it runs on after it."""

    batch_size = 2

    def run(self, x: np.ndarray) -> np.ndarray:
        return np.zeros((len(x), 10), np.float32)

    def describe(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        pass


def test_a_runner_that_runs_after_close_fails_the_backend_suite() -> None:
    bench = SimpleNamespace(images=np.zeros((8, 1, 8, 8), np.float32))
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        BackendSuite().test_close_is_idempotent_and_final(_Unclosable(), bench)


class _Forgetful(Probe):
    """Provides two metrics; its summary reports one and forgets the other."""

    name = "forgetful"
    provides = ("forgetful_a", "forgetful_b")
    units = {"a": "1"}  # noqa: RUF012 - the base class's ClassVar

    def available(self) -> tuple[bool, str]:
        return True, ""

    def read(self) -> dict[str, float]:
        return {"a": 1.0}

    def summarize(self, trace: Trace, window: Window) -> ProbeResult:
        return ProbeResult(metrics={"forgetful_a": 1.0})


def test_a_probe_that_forgets_a_metric_fails_the_probe_suite() -> None:
    with pytest.raises(AssertionError, match=r"the probe provides \['forgetful_a', 'forgetful_b'\]"):
        ProbeSuite().test_life_cycle_over_a_window(_Forgetful())
