"""A device's calibrated run-to-run variation: pooled from runs by hand, and a floor on intervals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import t as student_t

from dse.measure import measure_latency
from dse.measure.run_to_run import FORMAT, RunToRun, calibration_path, estimate, load, save
from dse.measure.stats import PERCENTILES, summarize


def _runs(p50s: list[float]) -> list[dict[str, float]]:
    return [{name: v * (0.5 + q) for name, q in PERCENTILES} for v in p50s]  # p50 = v


def test_the_workload_that_varies_most_sets_each_percentiles_figure() -> None:
    found = estimate({"steady": _runs([1.0, 1.1, 0.9]), "moving": _runs([2.0, 2.4, 1.6])},
                     device="dev", measured_at=0.0)
    # steady: shares 1.0, 1.1, 0.9 of its mean (sd 0.1); moving: 1.0, 1.2, 0.8 (sd 0.2).
    assert found.cv["p50"] == pytest.approx(0.2)
    assert found.cv["p99"] == pytest.approx(0.2)  # every percentile scaled alike here
    assert found.workload_cv == pytest.approx({"steady": 0.1, "moving": 0.2})
    assert (found.runs, found.workloads, found.degrees_of_freedom) == (3, 2, 2)
    assert found.per_workload == {"steady": [1.0, 1.1, 0.9], "moving": [2.0, 2.4, 1.6]}


def test_a_workload_measured_once_adds_nothing_and_none_at_all_is_an_error() -> None:
    found = estimate({"twice": _runs([1.0, 1.2]), "once": _runs([5.0])}, device="dev")
    assert found.workloads == 1 and found.degrees_of_freedom == 1
    assert found.cv["p50"] == pytest.approx(math.sqrt(2 * (0.1 / 1.1) ** 2))
    with pytest.raises(ValueError, match="at least two runs"):
        estimate({"once": _runs([1.0])}, device="dev")


def _floor(cv: float, dof: int = 7) -> RunToRun:
    return RunToRun(cv={"p50": cv, "p99": 2 * cv}, runs=dof + 1, workloads=1,
                    degrees_of_freedom=dof, device="dev", measured_at=0.0)


def test_an_interval_is_widened_by_the_factor_of_t_times_the_variation_never_narrowed() -> None:
    floor = _floor(0.05)
    factor = math.exp(float(student_t.ppf(0.975, 7)) * 0.05)
    assert floor.factor("p50") == pytest.approx(factor)
    assert floor.widen("p50", 10.0, (9.9, 10.1)) == pytest.approx((10.0 / factor, 10.0 * factor))
    assert floor.widen("p50", 10.0, (5.0, 10.1)) == pytest.approx((5.0, 10.0 * factor))
    assert floor.widen("p50", 10.0, None) is None  # too few samples stay too few
    assert floor.widen("p90", 10.0, (9.9, 10.1)) == (9.9, 10.1)  # no figure for p90


def test_a_large_variation_never_takes_an_interval_below_zero() -> None:
    """A device calibrated at ±47% on p50: t x cv x value would reach below zero, a factor
    cannot."""
    low, high = _floor(0.47).widen("p50", 1.0, (0.99, 1.01))  # type: ignore[misc]
    assert 0 < low < 0.5 and high > 2.0
    assert low * high == pytest.approx(1.0)


def test_summarize_floors_every_interval_and_keeps_the_runs_own_precision() -> None:
    samples = list(np.random.default_rng(3).normal(10.0, 0.1, 2000))
    alone = summarize(samples, seconds=1.0, block_sizes=[1000, 1000])
    floored = summarize(samples, seconds=1.0, block_sizes=[1000, 1000], run_to_run=_floor(0.05))
    t = float(student_t.ppf(0.975, 7))
    assert floored.p50_ci_ms is not None and floored.p99_ci_ms is not None
    assert floored.p50_ci_ms[1] == pytest.approx(floored.p50_ms * math.exp(t * 0.05))
    assert floored.p99_ci_ms[1] == pytest.approx(floored.p99_ms * math.exp(t * 0.10))
    # Divided by the factor, p99's lower end would lie below every call: it stops at the fastest.
    assert floored.p99_ms / math.exp(t * 0.10) < floored.min_ms == floored.p99_ci_ms[0]
    assert floored.p90_ci_ms == alone.p90_ci_ms
    assert (floored.rel_ci, floored.target_met) == (alone.rel_ci, alone.target_met)
    assert floored.own_rel_ci == alone.own_rel_ci
    assert floored.run_to_run_cv == 0.05 and math.isnan(alone.run_to_run_cv)


def test_the_floor_never_reaches_below_the_fastest_call() -> None:
    samples = list(np.random.default_rng(4).normal(10.0, 0.01, 2000))
    floored = summarize(samples, seconds=1.0, block_sizes=[1000, 1000], run_to_run=_floor(0.3))
    assert floored.p50_ci_ms is not None and floored.p50_ci_ms[0] == floored.min_ms


def test_measure_latency_passes_the_floor_to_its_intervals() -> None:
    stats = measure_latency(lambda: sum(range(200)), min_seconds=0.0, max_seconds=0.5,
                            warmup_max_seconds=0.05, blocks=2, run_to_run=_floor(0.2))
    assert stats.p50_ci_ms is not None
    assert stats.p50_ci_ms[1] >= stats.p50_ms * math.exp(0.2 * float(student_t.ppf(0.975, 7))
                                                         ) - 1e-12


def test_a_saved_calibration_loads_back_and_a_missing_or_damaged_one_says_why(tmp_path: Path
                                                                            ) -> None:
    path = calibration_path(tmp_path, "local-cpu", "host/with:odd")
    assert path.parent == tmp_path / "run_to_run" / "local-cpu"
    assert path.name == "host_with_odd.json"
    missing, why = load(path)
    assert missing is None and "dse calibrate" in why

    save(_floor(0.03), path)
    loaded, summary = load(path)
    assert loaded == _floor(0.03)
    assert summary.startswith("run-to-run variation p50 3.0%, p99 6.0% (8 runs x 1 workload(s)")

    path.write_text("{not json")
    broken, why = load(path)
    assert broken is None and "cannot be used" in why and str(path) in why
    path.write_text(json.dumps({"format": FORMAT + 1}))
    assert "another dse version" in load(path)[1]
