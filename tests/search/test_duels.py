"""Which pairs a device duels, what a duel's answer records, and how fronts use the verdicts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.core.candidate import Candidate
from dse.core.measurement import Measurement
from dse.farm.dispatcher import Done, Job
from dse.measure.duel import DuelRun
from dse.measure.duel_stats import PairedRatio
from dse.search.duel_records import (
    DISTURBED,
    FAILED,
    MEASURED,
    DuelRecord,
    MetricVerdict,
    read_records,
    store_record,
    table_overrides,
    trial_cells,
)
from dse.search.duel_round import duel_record, metric_verdict
from dse.search.duels import DuelPair, choose_pairs, pending_pairs, planned_duel_seconds
from dse.search.pareto import noise_aware_mask, pareto_mask
from dse.spec import MeasureSpec, TrainingSpec
from dse.spec.duel_models import DuelSpec
from dse.testing import campaign_study, candidate, record_trial
from dse.trial.duel_window import DuelReport

OBJECTIVES = ["accuracy", "latency_p50_ms"]


def _measured(accuracy: float, p50: float, low: float, high: float) -> dict[str, float]:
    return {"accuracy": accuracy, "latency_p50_ms": p50, "latency_p50_ci_low_ms": low,
            "latency_p50_ci_high_ms": high}


def _study() -> object:
    """0 and 1: equally accurate, their medians' intervals overlapping; 2: the most accurate,
    far slower; 3: the fastest, least accurate; 4: less accurate than 0 and 1, its interval
    overlapping both; 5 measured by an evaluator (no interval); 6 reuses 0."""
    study = campaign_study("duels", OBJECTIVES)
    for width, metrics in [(1.0, _measured(0.9, 1.0, 0.98, 1.02)),
                           (1.5, _measured(0.9, 1.01, 0.99, 1.03)),
                           (2.0, _measured(0.95, 2.0, 1.9, 2.1)),
                           (0.5, _measured(0.8, 0.5, 0.45, 0.55)),
                           (0.75, _measured(0.85, 1.005, 0.99, 1.02))]:
        record_trial(study, candidate("onnxruntime", "fp32", width, 1), metrics=metrics,
                     extra_attrs={"device_seconds": 8.0})
    record_trial(study, candidate("onnxruntime", "fp32", 0.25, 1),
                 metrics={"accuracy": 0.6, "latency_p50_ms": 1.0})
    record_trial(study, candidate("onnxruntime", "fp32", 1.0, 1),
                 metrics=_measured(0.9, 1.0, 0.98, 1.02), extra_attrs={"reused_from": 0})
    return study


def test_close_calls_whose_order_changes_the_front_are_chosen_most_valuable_first() -> None:
    study = _study()
    pairs = choose_pairs(study.get_trials(), OBJECTIVES, max_pairs=10)  # type: ignore[attr-defined]
    # 0 is on the strict front; 1 and 4 are not. (0, 4) is the closest pair with a front member.
    assert [(p.a, p.b) for p in pairs] == [(0, 4), (0, 1), (1, 4)]
    assert pairs[0].metrics == ("latency_p50_ms",) and pairs[0].quantiles == (0.5,)
    assert pairs[0].candidate_a.arch["width_mult"] == 1.0
    assert [(p.a, p.b) for p in choose_pairs(study.get_trials(), OBJECTIVES, 2)] == [(0, 4), (0, 1)]  # type: ignore[attr-defined]


def test_close_within_makes_near_values_close_calls_but_never_an_exact_one() -> None:
    study = _study()
    pairs = choose_pairs(study.get_trials(), OBJECTIVES, 20, close_within=3.0)  # type: ignore[attr-defined]
    chosen = {(p.a, p.b) for p in pairs}
    assert (2, 3) in chosen and (0, 2) in chosen  # 0.5 ms and 2 ms are within 300% of each other
    assert not any(5 in pair or 6 in pair for pair in chosen)  # the evaluator's, the repeat


def test_pending_pairs_leave_out_duels_that_count_or_failed() -> None:
    study = _study()
    # 40 s of the device's time measured, a tenth of it for duels: 4 s, five duels planned at
    # 0.7 s (warm-up 0.4 s, 6 rounds of two 25 ms blocks), all three pairs; 2% of it, one.
    assert planned_duel_seconds(DuelSpec()) == pytest.approx(0.4 + 6 * 2 * 0.025)
    assert len(pending_pairs(study, OBJECTIVES, DuelSpec())) == 3  # type: ignore[arg-type]
    assert [(p.a, p.b) for p in pending_pairs(study, OBJECTIVES, DuelSpec(time_share=0.02))] == [(0, 4)]  # type: ignore[arg-type]
    spec = DuelSpec(max_pairs=3, time_share=1.0)
    store_record(study, DuelRecord(0, 4, MEASURED))  # type: ignore[arg-type]
    store_record(study, DuelRecord(0, 1, DISTURBED, "other work"))  # type: ignore[arg-type]
    store_record(study, DuelRecord(1, 4, FAILED, "gone"))  # type: ignore[arg-type]
    assert [(p.a, p.b) for p in pending_pairs(study, OBJECTIVES, spec)] == [(0, 1)]  # type: ignore[arg-type]
    # A later duel of a pair replaces its earlier record.
    store_record(study, DuelRecord(0, 1, MEASURED))  # type: ignore[arg-type]
    assert pending_pairs(study, OBJECTIVES, spec) == []  # type: ignore[arg-type]
    assert [(r.a, r.b, r.status) for r in read_records(study.user_attrs)] == [  # type: ignore[attr-defined]
        (0, 4, MEASURED), (1, 4, FAILED), (0, 1, MEASURED)]
    assert pending_pairs(study, OBJECTIVES, DuelSpec(enabled=False)) == []  # type: ignore[arg-type]
    assert pending_pairs(study, ["accuracy"], spec) == []  # type: ignore[arg-type]  # nothing timed


def _pair(batch_a: int = 1, batch_b: int = 1,
          metrics: tuple[str, ...] = ("latency_p50_ms",)) -> DuelPair:
    a = Candidate("cnn", {"width_mult": 1.0}, "fp32", batch_a, "onnxruntime")
    b = Candidate("cnn", {"width_mult": 1.0}, "fp32", batch_b, "onnxruntime")
    return DuelPair(3, 7, a, b, metrics)


def test_throughput_follows_the_median_turned_over_by_the_batches() -> None:
    pair = _pair(1, 8, ("latency_p50_ms", "throughput_sps"))
    latency = PairedRatio(0.2, 0.19, 0.21)  # A's median call a fifth of B's
    p50 = metric_verdict("latency_p50_ms", latency, pair, 0.01)
    assert p50 is not None and p50.verdict == "a_faster"
    found = metric_verdict("throughput_sps", latency, pair, 0.01)
    assert found is not None and found.verdict == "b_faster"  # 8 samples in 5x the time
    assert found.ratio == pytest.approx(0.125 / 0.2)
    assert found.low == pytest.approx(0.125 / 0.21) and found.high == pytest.approx(0.125 / 0.19)
    assert metric_verdict("latency_p99_ms", None, pair, 0.01) is None
    # Equal batches: a throughput within the margin is a tie, as its median is.
    even = _pair(1, 1, ("throughput_sps",))
    close = metric_verdict("throughput_sps", PairedRatio(0.996, 0.994, 0.998), even, 0.01)
    assert close is not None and close.verdict == "tie"
    beyond = metric_verdict("throughput_sps", PairedRatio(0.97, 0.96, 0.98), even, 0.01)
    assert beyond is not None and beyond.verdict == "a_faster"


def _done(answer: object, status: str = "ok", reason: str = "") -> Done:
    pair = _pair()
    job = Job(0, pair.candidate_a, TrainingSpec(), MeasureSpec(), 60.0, method="duel")
    return Done(job, Measurement(pair.candidate_a.candidate_id, status, reason=reason),
                "local-cpu#0", answer)


def test_a_duel_answer_becomes_a_record() -> None:
    run = DuelRun({0.5: PairedRatio(1.04, 1.02, 1.06)}, 0.01, 12, 3.5, 0.4, (50, 48), True)
    record = duel_record(_pair(), _done(DuelReport(run, False, "", 1, "local-cpu@1", 0.0, 1.0)))
    assert (record.status, record.rounds, record.device_id) == (MEASURED, 12, "local-cpu@1")
    assert record.verdicts == (MetricVerdict("latency_p50_ms", "b_faster", 1.04, 1.02, 1.06),)
    shaken = duel_record(_pair(), _done(DuelReport(run, True, "other processes used 90%", 2,
                                                   "local-cpu@1", 0.0, 1.0)))
    assert (shaken.status, shaken.reason) == (DISTURBED, "other processes used 90%")
    refused = duel_record(_pair(), _done("candidate B (abc): the candidate could not be built"))
    assert (refused.status, refused.reason) == (FAILED,
                                                "candidate B (abc): the candidate could not be built")
    late = duel_record(_pair(), _done(None, "failed", "timed out after 60 s; worker restarted"))
    assert (late.status, late.reason) == (FAILED, "timed out after 60 s; worker restarted")
    assert DuelRecord.from_dict(record.to_dict()) == record


def _overrides(verdict: str) -> dict[tuple[int, int], np.ndarray]:
    record = DuelRecord(10, 11, MEASURED, verdicts=(
        MetricVerdict("latency_p50_ms", verdict, 1.0, 0.9, 1.1),))  # type: ignore[arg-type]
    return table_overrides([10, 11, 12], trial_cells([record], [10, 11, 12]), OBJECTIVES)


def test_a_tie_keeps_both_and_a_verdict_decides_against_the_values() -> None:
    values = np.array([[0.9, 1.00],    # trial 10: by its value, faster than 11
                       [0.9, 1.01],    # trial 11: equally accurate
                       [0.5, 5.00]])   # trial 12: dominated by both, whatever they are
    assert pareto_mask(values, OBJECTIVES).tolist() == [True, False, False]
    assert pareto_mask(values, OBJECTIVES, overrides=_overrides("tie")).tolist() == [
        True, True, False]
    assert pareto_mask(values, OBJECTIVES, overrides=_overrides("b_faster")).tolist() == [
        False, True, False]
    lows, highs = values * [1, 0.95], values * [1, 1.05]
    assert noise_aware_mask(values, lows, highs, OBJECTIVES).tolist() == [True, True, False]
    assert noise_aware_mask(values, lows, highs, OBJECTIVES,
                            overrides=_overrides("a_faster")).tolist() == [True, False, False]


def test_a_verdict_closing_a_circle_keeps_the_whole_circle() -> None:
    # Values: 0 faster than 2, 2 faster than 1; the duel says 1 is faster than 0. Each beats
    # another inside the circle and nothing outside beats any: all three stay.
    values = np.array([[0.9, 1.00], [0.9, 1.02], [0.9, 1.01], [0.5, 9.0]])
    record = DuelRecord(0, 1, MEASURED, verdicts=(
        MetricVerdict("latency_p50_ms", "b_faster", 1.01, 1.005, 1.02),))
    overrides = table_overrides([0, 1, 2, 3], trial_cells([record], [0, 1, 2, 3]), OBJECTIVES)
    assert pareto_mask(values, OBJECTIVES, overrides=overrides).tolist() == [True, True, True,
                                                                             False]


def test_only_duels_that_count_reach_the_table() -> None:
    counted = DuelRecord(2, 5, MEASURED, verdicts=(
        MetricVerdict("latency_p50_ms", "a_faster", 0.97, 0.96, 0.98),))
    shaken = DuelRecord(2, 7, DISTURBED, verdicts=(
        MetricVerdict("latency_p50_ms", "tie", 1.0, 0.9, 1.1),))
    cells = trial_cells([counted, shaken], [2, 5, 7])
    assert cells[2] is None
    frame = pd.DataFrame({"cell": cells})
    assert '"verdict":"faster"' in frame.loc[0, "cell"] and '"vs":5' in frame.loc[0, "cell"]
    assert '"verdict":"slower"' in frame.loc[1, "cell"] and '"vs":2' in frame.loc[1, "cell"]
