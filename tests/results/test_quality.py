"""Measurement quality in the tables: off the front unless allowed, and summed up in one line."""

from __future__ import annotations

from dse.core.trial_record import StudyAttr
from dse.results import competing_mask, front_frame, has_unclean, quality_summary, trials_frame
from dse.testing import campaign_study, candidate, record_trial

OBJECTIVES = ["accuracy", "latency_p99_ms"]


def _study(allow: bool | None) -> object:
    study = campaign_study("q", OBJECTIVES)
    if allow is not None:
        study.set_user_attr(StudyAttr.NON_OK_ON_FRONT, allow)
    provenance = {"remeasures": "0"}
    # Trial 0: clean. Trial 1: faster and as accurate, but disturbed (re-measured twice).
    record_trial(study, candidate("onnxruntime", "fp32", 1.0, 1),
                 metrics={"accuracy": 0.9, "latency_p99_ms": 2.0},
                 extra_attrs={"measurement_quality": "ok", "provenance": provenance})
    record_trial(study, candidate("onnxruntime", "int8", 1.0, 1),
                 metrics={"accuracy": 0.9, "latency_p99_ms": 1.0},
                 extra_attrs={"measurement_quality": "disturbed",
                              "provenance": {"remeasures": "2"}})
    # Trial 2: an evaluator's, which the harness did not measure: no label, competes.
    record_trial(study, candidate("torch", "fp32", 0.5, 1),
                 metrics={"accuracy": 0.95, "latency_p99_ms": 3.0})
    return study


def test_a_trial_not_measured_cleanly_is_kept_off_the_front_by_default() -> None:
    trials = trials_frame(_study(None))
    assert trials["measurement_quality"].tolist()[:2] == ["ok", "disturbed"]
    assert trials["quality_blocks_front"].tolist() == [False, True, False]
    assert competing_mask(trials).tolist() == [True, False, True]
    assert sorted(front_frame(trials, OBJECTIVES)["trial"]) == [0, 2]
    assert not has_unclean(front_frame(trials, OBJECTIVES)) and has_unclean(trials)
    assert quality_summary(trials) == (
        "3 trials: 1 measured cleanly, 1 disturbed (kept off the front); 2 re-measurement(s) in "
        "all")


def test_a_campaign_can_let_them_on_the_front() -> None:
    trials = trials_frame(_study(True))
    assert trials["quality_blocks_front"].tolist() == [False, False, False]
    # Trial 1 dominates trial 0 once it may compete.
    assert sorted(front_frame(trials, OBJECTIVES)["trial"]) == [1, 2]
    assert has_unclean(front_frame(trials, OBJECTIVES))  # the front shows a quality column
    assert "1 disturbed (allowed on the front)" in quality_summary(trials)


def test_no_summary_without_harness_measurements() -> None:
    study = campaign_study("q", OBJECTIVES)
    record_trial(study, candidate("torch", "fp32", 0.5, 1),
                 metrics={"accuracy": 0.95, "latency_p99_ms": 3.0})
    assert quality_summary(trials_frame(study)) == ""


def test_the_summary_counts_every_trial_with_the_top_reasons_of_failures() -> None:
    """The closing line of a campaign on a slow machine said "31 of 32 trials measured cleanly;
    1 unstable" while six more trials had failed: every trial is counted now."""
    from optuna.trial import TrialState

    study = campaign_study("q", OBJECTIVES)
    metrics = {"accuracy": 0.9, "latency_p99_ms": 2.0}
    for quality, remeasures in (("ok", "0"), ("ok", "1"), ("imprecise", "1"),
                                ("underpowered", "1")):
        record_trial(study, candidate("onnxruntime", "fp32", 1.0, 1), metrics=metrics,
                     extra_attrs={"measurement_quality": quality,
                                  "provenance": {"remeasures": remeasures}})
    short = "latency_p99_ms not measured: 369 timed calls are too few"
    for reason in (short, short, "onnxruntime: out of memory", "a third reason"):
        record_trial(study, candidate("torch", "fp16", 1.0, 1), state=TrialState.FAIL,
                     status="failed", reason=reason)
    record_trial(study, candidate("torch", "int8", 1.0, 1), state=TrialState.FAIL,
                 status="infeasible", reason="torch has no int8 here")
    record_trial(study, candidate("onnxruntime", "fp32", 1.0, 1), metrics=metrics,
                 extra_attrs={"measurement_quality": "ok", "reused_from": 0})
    assert quality_summary(trials_frame(study)) == (
        "10 trials: 2 measured cleanly (1 after re-measuring), 1 imprecise, 1 underpowered (kept "
        "off the front); 3 re-measurement(s) in all; 4 failed (2: " + short + "; 1: onnxruntime: "
        "out of memory; 1 other reason(s)); 1 infeasible; 1 reused an earlier result")
