"""Second looks: which trials not measured cleanly are measured once more at the end of a
device's search, and how a second look stands in the tables (the front, the closing line)."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from dse.app.campaign_setup import campaign_finished, resume_notice
from dse.core.trial_record import StudyAttr, TrialAttr
from dse.results import front_frame, quality_summary, trials_frame
from dse.results.table import looks_apart
from dse.search.device_search import _requeue_once, counts_toward_budget
from dse.search.second_looks import look_is_slower, outranked, pending_second_looks
from dse.search.study import StudyProgress
from dse.testing import campaign_study, candidate, record_trial

OBJECTIVES = ["accuracy", "latency_p50_ms"]


def _trial(study: optuna.Study, width: float, accuracy: float, p50: float,
           quality: str | None, **attrs: Any) -> int:
    return record_trial(study, candidate("onnxruntime", "fp32", width, 1),
                        metrics={"accuracy": accuracy, "latency_p50_ms": p50},
                        extra_attrs={"candidate_id": f"w{width}", "measurement_quality": quality,
                                     **attrs})


def _study() -> optuna.Study:
    """0, 1: clean; 2: disturbed, dominated by both; 3: unstable, on the front by its values;
    4: imprecise, dominated by 0 only; 5: a repeat of 2; 6: disturbed, but its candidate also has
    the clean 1; 7: underpowered, screened only; 8: disturbed, failed nothing (an evaluator's
    value has no label: 9)."""
    study = campaign_study("looks", OBJECTIVES)
    _trial(study, 1.0, 0.9, 1.0, "ok")                          # 0
    _trial(study, 0.5, 0.8, 0.5, "ok")                          # 1
    _trial(study, 0.75, 0.7, 2.0, "disturbed")                  # 2
    _trial(study, 2.0, 0.95, 0.6, "unstable")                   # 3
    _trial(study, 1.5, 0.85, 1.5, "imprecise")                  # 4
    _trial(study, 0.75, 0.7, 2.0, "disturbed", reused_from=2)   # 5
    _trial(study, 0.5, 0.8, 0.4, "disturbed")                   # 6
    _trial(study, 3.0, 0.99, 5.0, "underpowered", fidelity="screen")  # 7
    _trial(study, 4.0, 0.5, 9.0, "disturbed")                   # 8
    _trial(study, 5.0, 0.5, 9.0, None)                          # 9
    return study


def test_the_most_promising_unclean_trials_are_owed_one_second_look_each() -> None:
    study = _study()
    # 3 is dominated by no clean trial, 4 by one, 2 by both, 8 by both; 6's candidate is settled
    # by the clean 1, 5 is a repeat, 7 only a screen, 9 no harness measurement.
    assert [t.number for t in pending_second_looks(study, OBJECTIVES, 8)] == [3, 4, 2, 8]
    assert [t.number for t in pending_second_looks(study, OBJECTIVES, 2)] == [3, 4]
    assert pending_second_looks(study, OBJECTIVES, 0) == []

    # A second look taken counts against the limit and settles its candidate, whatever it found;
    # one an interrupt stopped is owed again.
    _trial(study, 2.0, 0.95, 0.7, "unstable", second_look_of=3)
    _trial(study, 1.5, 0.85, 1.5, "imprecise", second_look_of=4, interrupted=True)
    assert [t.number for t in pending_second_looks(study, OBJECTIVES, 3)] == [4, 2]
    # A campaign that lets unclean trials on the front needs none.
    study.set_user_attr(StudyAttr.NON_OK_ON_FRONT, True)
    assert pending_second_looks(study, OBJECTIVES, 8) == []


def test_a_second_look_counts_no_budget_and_is_never_requeued() -> None:
    study = _study()
    number = _trial(study, 2.0, 0.95, 0.55, "ok", second_look_of=3)
    looked = study.get_trials()[number]
    assert not counts_toward_budget(looked)
    assert counts_toward_budget(study.get_trials()[0])
    # An interrupted second look is owed again by the second-look round, not queued for the
    # search (a plain trial is).
    batch = optuna.distributions.CategoricalDistribution([1, 8])
    for attrs in ({"second_look_of": 3}, {}):
        study.add_trial(optuna.trial.create_trial(
            params={"batch": 8}, distributions={"batch": batch}, values=[0.9, 1.0],
            user_attrs={"status": "ok", **attrs}))
    looked_again, plain = study.get_trials()[-2:]
    _requeue_once(study, looked_again)
    assert study.get_trials(states=(TrialState.WAITING,)) == []
    _requeue_once(study, plain)
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 1


def test_a_clean_second_look_competes_in_place_of_its_first() -> None:
    study = _study()
    # Trial 2's second look is clean and fast: it is on the front, 2 itself stays off it.
    look = _trial(study, 0.75, 0.7, 0.3, "ok", second_look_of=2)
    trials = trials_frame(study)
    assert trials.set_index("trial").loc[look, "second_look_of"] == 2
    assert trials["second_look_of"].isna().sum() == len(trials) - 1
    front = front_frame(trials, OBJECTIVES)
    assert look in set(front["trial"]) and 2 not in set(front["trial"])

    # Where unclean trials may be on the front, the first is superseded all the same: the front
    # lists each configuration once, by its latest measurement.
    study.set_user_attr(StudyAttr.NON_OK_ON_FRONT, True)
    front = front_frame(trials_frame(study), OBJECTIVES)
    assert look in set(front["trial"]) and 2 not in set(front["trial"])
    assert 3 in set(front["trial"])  # no second look: its unclean value stands

    line = quality_summary(trials_frame(study))
    assert line.startswith("11 trials: 2 measured cleanly, 3 disturbed, 1 imprecise, "
                           "1 underpowered, 1 unstable (allowed on the front)")
    assert line.endswith("; 1 second look at the end of the search: 1 clean; "
                         "1 reused an earlier result")


def test_a_second_look_that_failed_leaves_its_first_where_it_was() -> None:
    study = _study()
    record_trial(study, candidate("onnxruntime", "fp32", 2.0, 1), status="failed",
                 reason="the device went away", state=TrialState.FAIL,
                 extra_attrs={"candidate_id": "w2.0", "second_look_of": 3})
    study.set_user_attr(StudyAttr.NON_OK_ON_FRONT, True)
    assert 3 in set(front_frame(trials_frame(study), OBJECTIVES)["trial"])
    # It was taken (not interrupted): 3 is owed nothing more.
    study.set_user_attr(StudyAttr.NON_OK_ON_FRONT, False)
    assert 3 not in [t.number for t in pending_second_looks(study, OBJECTIVES, 8)]


def test_the_resume_notice_names_the_second_looks_left() -> None:
    progress = {"local-cpu": StudyProgress(started=12, completed=10, running=0)}
    assert not campaign_finished(progress, 10, 2)
    notice = resume_notice(progress, 10, duels_left=1, looks_left=2)
    assert notice is not None and str(notice) == (
        "resuming: 10 of 10 trials done; every device has its budget.trials; 2 second looks "
        "and 1 duel of close calls left to run")
    notice = resume_notice(progress, 10, looks_left=1)
    assert notice is not None and str(notice).endswith(
        "; 1 second look left to run")


def test_a_warm_start_seeds_from_the_second_look_not_its_first() -> None:
    from dse.search.warm_start import _front

    study = _study()
    # Trial 3's second look is clean and a little slower: it, not 3, is the front's point now.
    look = _trial(study, 2.0, 0.95, 0.65, "ok", second_look_of=3)
    completed = [t for t in study.get_trials() if t.state == TrialState.COMPLETE]
    numbers = [t.number for t in _front(study, completed)]
    assert look in numbers and 3 not in numbers


def _clean_study() -> optuna.Study:
    """Clean trials only, by (accuracy, p50): 0 (0.9, 1.0) and 1 (0.8, 0.5) on the front; 2
    (0.8, 0.6) behind 1 by 20% in latency; 3 (0.7, 0.9) behind 1 by 80%; 4 (0.9, 1.2) behind 0
    by 20%; 5 a screen; 6 a repeat of 2."""
    study = campaign_study("near", OBJECTIVES)
    _trial(study, 1.0, 0.9, 1.0, "ok")                          # 0
    _trial(study, 0.5, 0.8, 0.5, "ok")                          # 1
    _trial(study, 0.6, 0.8, 0.6, "ok")                          # 2
    _trial(study, 0.7, 0.7, 0.9, "ok")                          # 3
    _trial(study, 1.2, 0.9, 1.2, "ok")                          # 4
    _trial(study, 3.0, 0.5, 9.0, "ok", fidelity="screen")       # 5
    _trial(study, 0.6, 0.8, 0.6, "ok", reused_from=2)           # 6
    return study


def test_clean_trials_near_the_front_are_owed_a_look_after_the_unclean() -> None:
    study = _clean_study()
    # Within 1.5x of the front on latency (accuracy does not move with the machine's speed):
    # 2 and 4 (each dominated by one), then the front's own 0 and 1; 3 would need 1.8x and is
    # dominated by two.
    assert [t.number for t in pending_second_looks(study, OBJECTIVES, 8, 1.5)] == [2, 4, 0, 1]
    assert [t.number for t in pending_second_looks(study, OBJECTIVES, 8, 2.0)] == [2, 4, 3, 0, 1]
    assert pending_second_looks(study, OBJECTIVES, 8, 1.0) == []
    # The unclean come first and share the limit.
    _trial(study, 2.0, 0.95, 0.6, "unstable")                   # 7
    assert [t.number for t in pending_second_looks(study, OBJECTIVES, 3, 1.5)] == [7, 2, 4]
    # A candidate looked at once is owed nothing more.
    _trial(study, 0.6, 0.8, 0.7, "ok", second_look_of=2)        # 8
    assert [t.number for t in pending_second_looks(study, OBJECTIVES, 8, 1.5)] == [7, 4, 0, 1]


def test_a_look_is_slower_by_its_speed_bound_objectives_only() -> None:
    objectives = ["accuracy", "latency_p99_ms", "throughput_sps"]
    assert look_is_slower([0.9, 1.3, 900.0], [0.9, 1.0, 1000.0], objectives)
    assert not look_is_slower([0.9, 0.8, 1100.0], [0.9, 1.0, 1000.0], objectives)
    assert not look_is_slower([0.9, 1.0, 1000.0], [0.9, 1.0, 1000.0], objectives)  # a tie
    # Accuracy and memory do not move with the machine's speed: they decide nothing.
    assert not look_is_slower([0.1, 1.0], [0.9, 1.0], ["accuracy", "latency_p50_ms"])
    assert look_is_slower([500.0, 1.1], [10.0, 1.0], ["process_rss_peak_mb", "latency_p50_ms"])


def test_of_two_clean_looks_the_faster_competes() -> None:
    study = _clean_study()
    # 2's look read faster than 2 (a slow spell in the first): the look takes 2's place, and
    # at 0.45 ms it beats 1 on latency.
    faster = _trial(study, 0.6, 0.8, 0.45, "ok", second_look_of=2)
    # 1's look read slower: it is marked, and 1 keeps its place.
    slower = _trial(study, 0.5, 0.8, 0.7, "ok", second_look_of=1,
                    **{TrialAttr.SLOWER_THAN_FIRST: True})
    trials = trials_frame(study)
    assert trials[TrialAttr.SLOWER_THAN_FIRST].sum() == 1
    assert bool(trials.set_index("trial").loc[slower, TrialAttr.SLOWER_THAN_FIRST])
    front = set(front_frame(trials, OBJECTIVES)["trial"])
    assert front == {0, faster}
    assert outranked(study.get_trials()) == {2, slower}
    # Both looks lie over 1.25x from their firsts (0.7 against 0.5 ms, 0.45 against 0.6).
    assert quality_summary(trials).endswith(
        "; 2 second looks at the end of the search: 2 clean, 1 slower than the first (which "
        f"kept its place); 2 candidates timed at least 1.25x apart at their two clean looks "
        f"(trials 1 and {slower}: 1.4x, 2 and {faster}: 1.3x): their speed on the device moves; "
        "1 reused an earlier result")


def test_a_labelled_look_takes_no_clean_firsts_place() -> None:
    study = _clean_study()
    # 1 was measured cleanly and is on the front; its look near the front met a disturbed
    # window. The clean result keeps its place; the labelled look is the one left out.
    look = _trial(study, 0.5, 0.8, 0.9, "disturbed", second_look_of=1)
    front = set(front_frame(trials_frame(study), OBJECTIVES)["trial"])
    assert 1 in front and look not in front
    assert outranked(study.get_trials()) == {look}
    # Where labels keep nothing off the front, the look stands in its first's place as ever.
    assert outranked(study.get_trials(), non_ok_on_front=True) == {1}
    study.set_user_attr(StudyAttr.NON_OK_ON_FRONT, True)
    front = set(front_frame(trials_frame(study), OBJECTIVES)["trial"])
    assert 1 not in front


def test_two_clean_looks_far_apart_are_named_in_the_closing_line() -> None:
    study = _clean_study()
    # 2's look read 2x faster (0.6 -> 0.3 ms): beyond LOOKS_APART. 0's look 1.1x slower: within.
    far = _trial(study, 0.6, 0.8, 0.3, "ok", second_look_of=2)
    _trial(study, 1.0, 0.9, 1.1, "ok", second_look_of=0, **{TrialAttr.SLOWER_THAN_FIRST: True})
    trials = trials_frame(study)
    assert looks_apart(trials, trials[trials[TrialAttr.SECOND_LOOK_OF].notna()]) == [
        (2, far, 2.0)]
    assert quality_summary(trials).endswith(
        "; 2 second looks at the end of the search: 2 clean, 1 slower than the first (which kept "
        f"its place); 1 candidate timed at least 1.25x apart at its two clean looks (trials 2 and "
        f"{far}: 2.0x): its speed on the device moves; 1 reused an earlier result")


def test_a_look_far_from_an_unclean_first_is_no_sign_of_a_moving_speed() -> None:
    study = _study()
    # 2 was disturbed (2.0 ms): its clean look at 0.7 ms is what the label was for.
    _trial(study, 0.75, 0.7, 0.7, "ok", second_look_of=2)
    trials = trials_frame(study)
    assert looks_apart(trials, trials[trials[TrialAttr.SECOND_LOOK_OF].notna()]) == []
    assert "apart" not in quality_summary(trials)


def test_a_look_is_compared_with_the_first_of_its_own_device() -> None:
    import pandas as pd

    from dse.core import metric_column

    p50 = metric_column("latency_p50_ms")
    trials = pd.DataFrame({
        "device": ["a", "b", "a", "b"], "trial": [0, 0, 1, 1],
        TrialAttr.MEASUREMENT_QUALITY: ["ok"] * 4,
        TrialAttr.SECOND_LOOK_OF: pd.array([None, None, 0, 0], dtype="Int64"),
        p50: [1.0, 2.0, 1.05, 1.0]})
    # On a, 1.05 against its own 1.0; on b, 1.0 against 2.0: only b's look moved.
    second = trials[trials[TrialAttr.SECOND_LOOK_OF].notna()]
    assert looks_apart(trials, second) == [(0, 1, 2.0)]
