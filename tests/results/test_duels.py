"""A campaign's duels in its tables: each trial's side as a column, the front deciding by it, and
the words the CLI and the dashboard print."""

from __future__ import annotations

import optuna

from dse.core.columns import DUEL_COLUMN
from dse.results import duel_summary, duel_text, front_frame, metric_columns, trials_frame
from dse.search.duel_records import (
    DISTURBED,
    FAILED,
    MEASURED,
    DuelRecord,
    MetricVerdict,
    store_record,
)
from dse.testing import campaign_study, candidate, record_trial

OBJECTIVES = ["accuracy", "latency_p50_ms"]


def _study(name: str = "duels") -> optuna.Study:
    """Trials 0 and 1 equally accurate, 1 a hair slower by its value; 2 far slower."""
    study = campaign_study(name, OBJECTIVES)
    for width, p50 in [(1.0, 1.00), (1.5, 1.01), (2.0, 3.0)]:
        record_trial(study, candidate("onnxruntime", "fp32", width, 1),
                     metrics={"accuracy": 0.9, "latency_p50_ms": p50,
                              "latency_p50_ci_low_ms": 0.97 * p50,
                              "latency_p50_ci_high_ms": 1.03 * p50})
    return study


def _decided(a: int, b: int, verdict: str, ratio: float, low: float, high: float) -> DuelRecord:
    return DuelRecord(a, b, MEASURED, verdicts=(
        MetricVerdict("latency_p50_ms", verdict, ratio, low, high),),  # type: ignore[arg-type]
        rounds=14, seconds=2.5, device_id="local-cpu@1")


def test_without_duels_the_table_has_no_duel_column() -> None:
    frame = trials_frame(_study())
    assert DUEL_COLUMN not in frame.columns
    assert front_frame(frame, OBJECTIVES)["trial"].tolist() == [0]
    assert duel_summary([_study("other")]) == ""


def test_a_tie_puts_both_on_the_front_and_says_so() -> None:
    study = _study()
    store_record(study, _decided(0, 1, "tie", 0.99, 0.97, 1.01))
    frame = trials_frame(study)
    assert DUEL_COLUMN in frame.columns and DUEL_COLUMN not in metric_columns(frame)
    assert frame[DUEL_COLUMN].isna().tolist() == [False, False, True]
    front = front_frame(frame, OBJECTIVES)
    assert front["trial"].tolist() == [0, 1]
    assert [duel_text(cell) for cell in front[DUEL_COLUMN]] == ["p50 tie with #1",
                                                              "p50 tie with #0"]
    assert duel_summary([study]) == "1 duel: 1 tie"


def test_a_verdict_against_the_values_decides_the_front() -> None:
    study = _study()
    # The duel found 1 faster than 0 by 3% (0's median call 1.03 times 1's).
    store_record(study, _decided(0, 1, "b_faster", 1.03, 1.02, 1.04))
    front = front_frame(trials_frame(study), OBJECTIVES)
    assert front["trial"].tolist() == [1]
    assert duel_text(front.loc[0, DUEL_COLUMN]) == "p50 2.9 % ±0.9 % faster than #0"
    assert duel_summary([study]) == (
        "1 duel: 1 decided (trial 1 faster than 0 by 2.9 % ±0.9 % on p50)")


def test_the_campaign_line_counts_every_duel_and_only_counted_ones_decide() -> None:
    study = _study()
    store_record(study, _decided(0, 1, "a_faster", 0.96, 0.95, 0.97))
    store_record(study, DuelRecord(0, 2, DISTURBED, "other processes used 80% of the CPUs' time",
                                   verdicts=(MetricVerdict("latency_p50_ms", "tie", 1, 0.5, 2),)))
    store_record(study, DuelRecord(1, 2, FAILED, "candidate B (x): the candidate could not be "
                                                 "built: gone"))
    assert duel_summary([study]) == (
        "3 duels: 1 decided (trial 0 faster than 1 by 4.0 % ±1.0 % on p50), 1 disturbed by other "
        "work (timed again on the next run), 1 failed (candidate B (x): the candidate could not "
        "be built: gone)")
    frame = trials_frame(study)
    assert frame[DUEL_COLUMN].notna().tolist() == [True, True, False]  # 2 only in uncounted ones
    assert front_frame(frame, OBJECTIVES)["trial"].tolist() == [0]


def test_several_devices_name_the_device_of_each_decided_duel() -> None:
    first, second = _study("cpu-a"), _study("cpu-b")
    first.set_user_attr("device_profile", "cpu-a")
    second.set_user_attr("device_profile", "cpu-b")
    store_record(second, _decided(0, 1, "a_faster", 0.9, 0.85, 0.95))
    assert duel_summary([first, second]) == (
        "1 duel: 1 decided (cpu-b trial 0 faster than 1 by 10.0 % ±5.0 % on p50)")
