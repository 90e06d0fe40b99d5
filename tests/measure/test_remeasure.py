"""The re-measurement policy and the precision gate: which run is measured again, why, and
with which arguments; statistics from real samples (summarize), no harness timing."""

from __future__ import annotations

import numpy as np

from dse.measure.quality_labels import imprecise, measurement_quality
from dse.measure.remeasure import IMPRECISE, INTERFERENCE, UNDERPOWERED, next_run
from dse.measure.stats import summarize
from dse.spec import InterferenceSpec, MeasureSpec

ARGUMENTS = MeasureSpec(percentiles=["p50", "p99"]).latency_arguments()
PRECISION = MeasureSpec(percentiles=["p50", "p99"]).required_precision()


def _steady(n: int = 3000, spread: float = 0.01, seed: int = 0) -> list[float]:
    return list(1.0 + spread * np.random.default_rng(seed).random(n))


def test_a_clean_precise_run_stands() -> None:
    stats = summarize(_steady(), seconds=1.0, block_sizes=[1000] * 3)
    assert not stats.underpowered and not imprecise(stats, PRECISION)
    assert next_run(stats, "", [], ARGUMENTS, InterferenceSpec(), PRECISION) is None
    assert measurement_quality(stats, False, PRECISION)["measurement_quality"] == "ok"


def test_a_disturbed_window_is_measured_again_up_to_the_policy_s_count() -> None:
    stats = summarize(_steady(), seconds=1.0, block_sizes=[1000] * 3)
    policy = InterferenceSpec(max_remeasures=2)
    first = next_run(stats, "other processes used 80%", [], ARGUMENTS, policy, PRECISION)
    assert first is not None and first.kind == INTERFERENCE and first.arguments == ARGUMENTS
    assert next_run(stats, "busy", [INTERFERENCE] * 2, ARGUMENTS, policy, PRECISION) is None
    flag = InterferenceSpec(action="flag")
    assert next_run(stats, "busy", [], ARGUMENTS, flag, PRECISION) is None


def test_an_underpowered_run_is_measured_again_once_its_interference_budget_is_spent() -> None:
    stats = summarize(_steady(200), seconds=0.5, min_samples=368,
                      required_quantiles=(0.5, 0.99))
    again = next_run(stats, "busy", [INTERFERENCE] * 2, ARGUMENTS, InterferenceSpec(), PRECISION)
    assert again is not None and again.kind == UNDERPOWERED
    ignore = InterferenceSpec(action="ignore")
    again = next_run(stats, "busy", [], ARGUMENTS, ignore, PRECISION)
    assert again is not None and again.kind == UNDERPOWERED


def test_an_underpowered_run_is_measured_once_more_asking_twice_the_calls() -> None:
    stats = summarize(_steady(200), seconds=0.5, min_samples=368,
                      required_quantiles=(0.5, 0.99))
    assert stats.underpowered
    again = next_run(stats, "", [], ARGUMENTS, InterferenceSpec(), PRECISION)
    assert again is not None and again.kind == UNDERPOWERED
    assert again.arguments["min_iters"] == 2 * max(200, ARGUMENTS["min_iters"])
    assert "underpowered: 200 calls in 0.5 s" in again.reason
    assert next_run(stats, "", [UNDERPOWERED], ARGUMENTS, InterferenceSpec(), PRECISION) is None
    assert measurement_quality(stats, False, PRECISION)["measurement_quality"] == "underpowered"


def test_an_imprecise_run_is_measured_once_more_over_a_longer_window() -> None:
    """A run whose p99 scatters (a heavy tail, few calls beyond it): its interval is wider
    than the target, which is what the gate is for."""
    rng = np.random.default_rng(5)
    samples = list(1.0 + rng.pareto(1.5, 1200))
    stats = summarize(samples, seconds=1.0, block_sizes=[400] * 3)
    assert stats.p99_ci_ms is not None
    why = imprecise(stats, PRECISION)
    assert why.startswith("imprecise: ") and "p99 ±" in why and "(at most ±50%)" in why
    again = next_run(stats, "", [], ARGUMENTS, InterferenceSpec(), PRECISION)
    assert again is not None and again.kind == IMPRECISE and again.reason == why
    seconds = 2 * ARGUMENTS["max_seconds"]
    assert again.arguments["min_seconds"] == again.arguments["max_seconds"] == seconds
    assert again.arguments["blocks"] == 2 * ARGUMENTS["blocks"]
    # The ceiling stays where it was: twice the window, half the extension.
    assert seconds * again.arguments["max_extension"] == (ARGUMENTS["max_seconds"]
                                                         * ARGUMENTS["max_extension"])
    assert next_run(stats, "", [IMPRECISE], ARGUMENTS, InterferenceSpec(), PRECISION) is None
    quality = measurement_quality(stats, False, PRECISION)
    assert quality == {"measurement_quality": "imprecise", "measurement_flags": "imprecise"}


def test_the_gate_reads_the_run_s_own_precision_not_the_device_floor() -> None:
    """A calibrated floor of ±40% widens every interval of the device alike: it says nothing
    about this run, and would make every trial imprecise."""
    from dse.measure.run_to_run import RunToRun

    floor = RunToRun(cv={"p50": 0.2, "p99": 0.2}, runs=10, workloads=1, degrees_of_freedom=9,
                     device="dev", measured_at=0.0)
    stats = summarize(_steady(), seconds=1.0, block_sizes=[1000] * 3, run_to_run=floor)
    assert stats.p50_ci_ms is not None and stats.p50_ci_ms[1] > 1.3 * stats.p50_ms
    assert not imprecise(stats, PRECISION)


def test_a_percentile_without_interval_is_underpowered_not_imprecise() -> None:
    stats = summarize(_steady(100), seconds=0.1, min_samples=368, required_quantiles=(0.99,))
    assert stats.p99_ci_ms is None and not imprecise(stats, PRECISION)


def test_precision_defaults_fill_what_a_campaign_leaves_out() -> None:
    spec = MeasureSpec(precision={"p99": 0.2}, percentiles=["p50", "p99"])
    assert spec.required_precision() == {"p50": MeasureSpec().precision["p50"], "p99": 0.2}
    assert spec.latency_arguments()["precision"] == {0.5: spec.precision["p50"], 0.99: 0.2}
