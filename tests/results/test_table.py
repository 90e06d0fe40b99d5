"""dse.results.table: one row per trial, unit-suffixed columns, the feasible Pareto front."""

from __future__ import annotations

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from dse.results import front_frame, trials_frame
from dse.search.pareto import pareto_mask
from dse.testing import (
    EXAMPLE_CONSTRAINT,
    EXAMPLE_FRONT,
    EXAMPLE_OBJECTIVES,
    campaign_study,
    candidate,
    example_study,
    record_trial,
)

OBJECTIVES = list(EXAMPLE_OBJECTIVES)


@pytest.fixture
def trials() -> pd.DataFrame:
    return trials_frame(example_study())


def test_front_holds_the_feasible_nondominated_trials_sorted_by_first_objective(
        trials: pd.DataFrame) -> None:
    front = front_frame(trials, OBJECTIVES)
    assert sorted(front["trial"]) == sorted(EXAMPLE_FRONT)
    assert front["trial"].tolist() == [2, 1, 0]  # accuracy 0.85, 0.90, 0.95
    assert front["accuracy [fraction]"].is_monotonic_increasing


def test_an_infeasible_trial_would_dominate_but_never_competes(trials: pd.DataFrame) -> None:
    complete = trials[trials["state"] == "COMPLETE"]
    values = complete[["accuracy [fraction]", "latency_p99_ms [ms]"]].to_numpy()
    ignoring_feasibility = complete[pareto_mask(values, OBJECTIVES)]["trial"].tolist()
    assert ignoring_feasibility == [4]  # it beats every other trial...
    row = trials.set_index("trial").loc[4]
    assert not row["feasible"]
    assert row[f"constraint.{EXAMPLE_CONSTRAINT}"] > 0
    assert 4 not in front_frame(trials, OBJECTIVES)["trial"].tolist()  # ...yet is off the front


def test_columns_are_ordered_and_metrics_carry_units(trials: pd.DataFrame) -> None:
    assert trials.columns.tolist() == [
        "trial", "state", "status", "reason", "missing", "feasible",
        "measurement_quality", "quality_blocks_front", "remeasures", "device", "candidate_id",
        "param.family", "param.backend", "param.precision", "param.batch_size",
        "param.arch.depth", "param.arch.width_mult",
        "param.knob.intra_op_threads", "param.knob.num_threads",
        "accuracy [fraction]", "latency_p50_ms [ms]", "latency_p99_ms [ms]",
        "process_rss_peak_mb [MB]", "energy_j",
        f"constraint.{EXAMPLE_CONSTRAINT}",
        "started", "completed", "duration_s", "reused_from",
    ]


def test_one_row_per_trial_with_state_status_and_reason(trials: pd.DataFrame) -> None:
    by_trial = trials.set_index("trial")
    assert by_trial.index.tolist() == list(range(9))
    assert by_trial.loc[5, "state"] == "FAIL"
    assert by_trial.loc[5, "status"] == "infeasible"
    assert "int8" in str(by_trial.loc[5, "reason"])
    assert by_trial.loc[6, "state"] == "RUNNING"
    assert by_trial["status"].isna()[6]
    assert by_trial["completed"].isna()[6]
    assert by_trial.loc[7, "accuracy [fraction]"] == 0.8  # a failed trial keeps what it measured
    assert by_trial.loc[8, "reused_from"] == 3
    assert by_trial["feasible"].tolist() == [True, True, True, True, False, False, False, False,
                                             True]
    assert (by_trial["device"] == "local-cpu").all()


def test_mixed_parameter_types_become_text_and_absent_ones_missing(trials: pd.DataFrame) -> None:
    threads = trials["param.knob.num_threads"]
    assert threads.dtype == "str"
    assert threads.dropna().tolist() == ["1", "auto", "2", "1", "auto"]
    assert trials["param.knob.intra_op_threads"].dtype == "Int64"
    assert trials["param.knob.intra_op_threads"].isna().sum() == 5  # torch trials have no such knob
    assert trials["param.arch.width_mult"].dtype == "float64"


def test_an_unknown_metric_keeps_its_bare_name(trials: pd.DataFrame) -> None:
    assert trials["energy_j"].dropna().tolist() == [0.2]


def test_a_declared_constraint_without_a_value_is_not_feasible() -> None:
    study = campaign_study("c", OBJECTIVES, [EXAMPLE_CONSTRAINT])
    record_trial(study, candidate("torch", "fp32", 1.0, 1),
                 metrics={"accuracy": 0.9, "latency_p99_ms": 1.0})
    frame = trials_frame(study)
    assert not frame.loc[0, "feasible"]
    assert front_frame(frame, OBJECTIVES).empty


def test_objective_values_fill_metrics_the_attrs_lack() -> None:
    study = campaign_study("c", OBJECTIVES)
    study.add_trial(optuna.trial.create_trial(values=[0.7, 2.5]))
    frame = trials_frame(study)
    assert frame.loc[0, "accuracy [fraction]"] == 0.7
    assert frame.loc[0, "latency_p99_ms [ms]"] == 2.5
    assert front_frame(frame, OBJECTIVES).empty  # no status "ok": not a dse measurement


def test_a_study_without_measurements_still_has_its_columns() -> None:
    study = campaign_study("c", OBJECTIVES, [EXAMPLE_CONSTRAINT])
    assert trials_frame(study).columns.tolist() == [
        "trial", "state", "status", "reason", "missing", "feasible",
        "measurement_quality", "quality_blocks_front", "remeasures", "device", "candidate_id",
        "accuracy [fraction]", "latency_p99_ms [ms]", f"constraint.{EXAMPLE_CONSTRAINT}",
        "started", "completed", "duration_s", "reused_from"]
    record_trial(study, candidate("torch", "int8", 1.0, 1), state=TrialState.FAIL,
                 status="infeasible", reason="unsupported")
    frame = trials_frame(study)
    front = front_frame(frame, OBJECTIVES)
    assert front.empty
    assert front.columns.tolist() == frame.columns.tolist()


def test_fields_from_a_newer_candidate_are_flattened_not_dropped() -> None:
    study = campaign_study("c", OBJECTIVES)
    newer = {**candidate("onnxruntime", "fp32", 1.0, 1), "compiler": {"opt_level": 3},
             "sparsity": 0.5}
    record_trial(study, newer, metrics={"accuracy": 0.9, "latency_p99_ms": 1.0})
    frame = trials_frame(study)
    assert frame.loc[0, "param.compiler.opt_level"] == 3
    assert frame.loc[0, "param.sparsity"] == 0.5
    columns = frame.columns.tolist()
    assert columns.index("param.compiler.opt_level") > columns.index("param.knob.intra_op_threads")


def test_a_known_metric_that_is_not_a_number_names_the_trial() -> None:
    study = campaign_study("c", OBJECTIVES)
    study.add_trial(optuna.trial.create_trial(
        values=[0.9, 1.0], user_attrs={"metrics": {"process_rss_peak_mb": "lots"}}))
    with pytest.raises(ValueError, match=r"trial 0: metric 'process_rss_peak_mb'"):
        trials_frame(study)


def test_a_front_point_measured_twice_is_kept_twice() -> None:
    study = campaign_study("c", OBJECTIVES)
    for _ in range(2):
        record_trial(study, candidate("torch", "fp32", 1.0, 1),
                     metrics={"accuracy": 0.9, "latency_p99_ms": 1.0})
    assert front_frame(trials_frame(study), OBJECTIVES)["trial"].tolist() == [0, 1]


def test_a_reused_repeat_is_not_listed_again_on_the_front() -> None:
    study = campaign_study("c", OBJECTIVES)
    record_trial(study, candidate("torch", "fp32", 1.0, 1),
                 metrics={"accuracy": 0.9, "latency_p99_ms": 1.0})
    record_trial(study, candidate("torch", "fp32", 1.0, 1),
                 metrics={"accuracy": 0.9, "latency_p99_ms": 1.0}, extra_attrs={"reused_from": 0})
    assert front_frame(trials_frame(study), OBJECTIVES)["trial"].tolist() == [0]


def test_missing_metrics_keep_their_reasons() -> None:
    study = campaign_study("c", OBJECTIVES)
    record_trial(study, candidate("torch", "fp32", 1.0, 1),
                 metrics={"accuracy": 0.9, "latency_p99_ms": 1.0},
                 extra_attrs={"missing": {"power_mean_w": "no RAPL domain",
                                          "energy_per_inference_mj": "no RAPL domain"}})
    record_trial(study, candidate("torch", "fp32", 2.0, 1),
                 metrics={"accuracy": 0.95, "latency_p99_ms": 2.0})
    frame = trials_frame(study)
    assert frame["missing"].tolist()[0] == ("energy_per_inference_mj: no RAPL domain; "
                                            "power_mean_w: no RAPL domain")
    assert frame["missing"].isna().tolist() == [False, True]
