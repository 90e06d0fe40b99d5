"""A suspected regression confirmed or dismissed across runs (dse.deploy.confirm), on figures
``dse verify`` measured of one bundle on the 2-core development VM: recorded at export
0.3346 ms [0.2746, 0.3947]; quiet runs in fresh processes between 0.307 and 0.574 ms, each with a
narrow interval; the same runner held to one thread, 0.76 ms."""

from __future__ import annotations

import pytest

from dse.deploy.compare import compare_latency
from dse.deploy.confirm import Run, decided, is_disturbed, settled, summary

P50 = "latency_p50_ms"
RECORDED = {P50: 0.3346, "latency_p50_ci_low_ms": 0.2746, "latency_p50_ci_high_ms": 0.3947}
# Three runs must agree: the first and the default two fresh ones.
NEEDED = 3


def _run(number: int, p50: float, low: float, high: float, quality: str = "ok") -> Run:
    now = {P50: p50, "latency_p50_ci_low_ms": low, "latency_p50_ci_high_ms": high}
    check = compare_latency(P50, RECORDED, now, tolerance=0.10)
    return Run(number, [check], quality, is_disturbed(quality))


def test_one_runs_excursion_is_not_called_a_regression() -> None:
    """A quiet run labelled unstable read +30 %, its interval above the recorded one: one run
    alone calls that regressed (the false alarm of the issue); the next fresh run read -8 %, so
    the suspicion is dismissed and the verification stops there."""
    excursion = _run(1, 0.43620, 0.39890, 0.47700, quality="unstable")
    assert decided([excursion], P50, needed=1).verdict == "regressed"
    assert not settled([excursion], NEEDED)
    runs = [excursion, _run(2, 0.3070, 0.3018, 0.3124)]
    assert settled(runs, NEEDED)
    check = decided(runs, P50, NEEDED)
    assert (check.verdict, check.run, check.measured) == ("pass", 2, 0.3070)
    assert "the +30.4% of run 1 not confirmed" in check.why
    assert summary(runs) == ("suspected 30% slower (latency_p50_ms), confirmed in 0 of 1 fresh "
                             "run (-8.2%)")


def test_an_ok_window_slowed_by_the_host_is_dismissed_by_the_next_clean_run() -> None:
    """Labelled ok (1 % foreign CPU, nothing the probes could see) yet +72 %: the next run
    passes it."""
    runs = [_run(1, 0.5745, 0.5667, 0.5823), _run(2, 0.3933, 0.3892, 0.4016)]
    assert decided(runs, P50, NEEDED).verdict == "pass"


def test_a_persistent_slowdown_is_confirmed_by_every_fresh_run() -> None:
    """The runner held to one thread: slower in every run, regressed only once all three
    agree."""
    runs = [_run(1, 0.7616, 0.7537, 0.7695), _run(2, 0.7606, 0.5544, 1.1414)]
    assert not settled(runs, NEEDED)
    runs.append(_run(3, 0.7590, 0.7511, 0.7702))
    assert settled(runs, NEEDED)
    check = decided(runs, P50, NEEDED)
    assert (check.verdict, check.run) == ("regressed", 1)
    assert check.why.endswith("slower in every run (+127.6%, +127.3%, +126.8%)")
    assert summary(runs) == ("suspected 128% slower (latency_p50_ms), confirmed in 2 of 2 "
                             "fresh runs (+127.3%, +126.8%)")


def test_a_first_run_in_a_disturbed_window_decides_alone() -> None:
    """Busy-looping processes on every core: slower is regressed at once, a pass it cannot
    certify is inconclusive; no fresh runs, which would only look for a quiet moment to pass."""
    hog = _run(1, 0.5686, 0.5400, 0.6000, quality="disturbed")
    assert settled([hog], NEEDED)
    assert decided([hog], P50, NEEDED).verdict == "regressed"
    busy = _run(1, 0.5337, 0.3552, 0.8018, quality="disturbed")  # overlaps: a pass alone
    assert settled([busy], NEEDED)
    check = decided([busy], P50, NEEDED)
    assert check.verdict == "inconclusive" and check.why.endswith("no pass is certified")
    assert summary([busy]) == ""


def test_a_suspicion_that_only_disturbed_runs_followed_stays_inconclusive() -> None:
    runs = [_run(1, 0.43620, 0.39890, 0.47700),
            _run(2, 0.5337, 0.3552, 0.8018, quality="disturbed"),
            _run(3, 0.3457, 0.3221, 0.3787, quality="disturbed")]
    assert not settled(runs[:2], NEEDED)
    check = decided(runs, P50, NEEDED)
    assert check.verdict == "inconclusive"
    assert check.why.startswith("slower in 1 of 3 runs (+30.4%), where a regression needs 3")
    assert check.why.endswith("other work disturbed run 2, 3")


@pytest.mark.parametrize(("flags", "disturbed"), [
    ("disturbed", True), ("disturbed,unstable", True), ("", False), ("imprecise", False),
    ("underpowered,unstable", False)])
def test_only_the_disturbed_flag_withholds_a_runs_pass(flags: str, disturbed: bool) -> None:
    assert is_disturbed(flags) is disturbed
