"""``budget.trials`` counts distinct candidates measured: a repeat proposal is reused and spends
nothing, a small space measured in full ends the run with a notice at its first repeat (a space too
large to count, after many repeats in a row), a resumed
run counts only what was measured, and a space whose every candidate fails stops with the reason.

Campaigns of free parameters measured by an in-process evaluator: the real search loop and
Optuna storage on disk, no Ray (nothing here is a device measurement)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dse import load_experiment, run_campaign
from dse.core.candidate import Candidate
from dse.core.exceptions import DseError
from dse.search.device_search import DeviceSearch, KnownResult, repeats_to_stop
from tests.conftest import REPO

SPACE = """\
name: small
parameters:
  x: {choices}
metrics:
  - {{name: toy_f1, unit: "1", direction: minimize, description: a toy}}
  - {{name: toy_f2, unit: "1", direction: minimize, description: a toy}}
objectives:
  - metric: toy_f1
  - metric: toy_f2
"""


def _campaign(root: Path, *, choices: str, trials: int, sampler: str = "random") -> Path:
    (root / "space.yaml").write_text(SPACE.format(choices=choices))
    (root / "device.yaml").write_text("name: toy-device\nkind: cpu\nbackends: [onnxruntime]\n"
                                      "precisions: [fp32]\n")
    experiment = root / "campaign.yaml"
    experiment.write_text(f"name: small\nsearch_space: space.yaml\ndevices: [device.yaml]\n"
                          f"sampler: {{name: {sampler}, seed: 0}}\nbudget: {{trials: {trials}}}\n"
                          f"runs_dir: runs\ndashboards_dir: runs\n")
    return experiment


class Counting:
    """An evaluator that counts its calls per candidate (a closure: runs in a thread)."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: dict[str, int] = {}
        self.fail = fail

    def __call__(self, candidate: Candidate) -> dict[str, Any]:
        x = float(candidate.params["x"])
        self.calls[candidate.candidate_id] = self.calls.get(candidate.candidate_id, 0) + 1
        if self.fail:
            raise RuntimeError(f"cannot build x={x}")
        return {"toy_f1": x, "toy_f2": (1 - x) ** 2}


def test_the_budget_counts_distinct_candidates_and_repeats_are_reused(tmp_path: Path) -> None:
    evaluator = Counting()
    experiment = _campaign(tmp_path, choices="[0.0, 0.25, 0.5, 0.75, 1.0, 0.1, 0.2, 0.3]",
                           trials=5)
    trials = run_campaign(load_experiment(experiment), evaluator=evaluator, report=False).trials
    measured = trials[trials["reused_from"].isna()] if "reused_from" in trials else trials
    assert len(measured) == 5 and (measured["status"] == "ok").all()
    assert sorted(evaluator.calls.values()) == [1] * 5  # each distinct candidate measured once
    # Random search over 8 values repeats some: those trials exist, reused, and spent nothing.
    assert len(trials) >= 5


def test_a_space_measured_in_full_ends_the_run_with_a_notice(tmp_path: Path) -> None:
    evaluator = Counting()
    notices: list[str] = []
    experiment = _campaign(tmp_path, choices="[0.0, 0.5, 1.0]", trials=10)
    result = run_campaign(load_experiment(experiment), evaluator=evaluator, report=False,
                          on_notice=notices.append)
    trials = result.trials
    assert sorted(evaluator.calls.values()) == [1, 1, 1]
    # The space holds 3 candidates: once all 3 have results, the first repeat ends the search
    # (no waiting for repeats_to_stop(3) repeats in a row).
    last_new = trials[trials["reused_from"].isna()]["trial"].max()
    after = trials[trials["trial"] > last_new]
    assert len(after) == 1 and after["reused_from"].notna().all()
    assert len(notices) == 1 and "stopped short of budget.trials with 3 distinct" in notices[0]
    # Resumed with the same budget: nothing new to measure, nothing measured twice.
    run_campaign(load_experiment(experiment), evaluator=evaluator, report=False,
                 on_notice=notices.append)
    assert sorted(evaluator.calls.values()) == [1, 1, 1]
    # The resume says how far the campaign was, then that the space holds no more.
    assert len(notices) == 3 and notices[1].startswith("resuming: 3 of 10 trials done"), notices
    assert "stopped short of budget.trials with 3 distinct" in notices[2]


def test_a_resumed_run_counts_only_what_was_measured(tmp_path: Path) -> None:
    evaluator = Counting()
    values = "[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]"
    run_campaign(load_experiment(_campaign(tmp_path, choices=values, trials=3)),
                 evaluator=evaluator, report=False)
    assert len(evaluator.calls) == 3
    trials = run_campaign(load_experiment(_campaign(tmp_path, choices=values, trials=6)),
                          evaluator=evaluator, report=False).trials
    assert len(evaluator.calls) == 6 and sorted(evaluator.calls.values()) == [1] * 6
    measured = trials[trials["reused_from"].isna()] if "reused_from" in trials else trials
    assert (measured["state"] == "COMPLETE").sum() == 6


def test_a_small_space_where_every_candidate_fails_stops_with_the_reason(tmp_path: Path) -> None:
    evaluator = Counting(fail=True)
    experiment = _campaign(tmp_path, choices="[0.0, 0.5]", trials=2)
    with pytest.raises(DseError, match=r"every candidate the sampler proposes on a device "
                                       r"failed \(2 distinct .*cannot build x="):
        run_campaign(load_experiment(experiment), evaluator=evaluator, report=False)
    assert sorted(evaluator.calls.values()) == [1, 1]  # each tried once, never retried


def _search(space_size: int | None, known: int) -> DeviceSearch:
    import optuna

    from dse.spec.loading import load_profile

    calls: list[int] = []

    def count() -> int | None:
        calls.append(1)
        assert len(calls) == 1, "the space is counted once"
        return space_size

    search = DeviceSearch(load_profile(REPO / "hw_profiles" / "local-cpu.yaml"),
                          optuna.create_study(), None, [], [], False, space_size=count)
    search.known = {str(i): KnownResult(i, "ok", "", {}, {}) for i in range(known)}
    return search


def test_a_counted_space_ends_at_the_first_repeat_once_every_candidate_has_a_result() -> None:
    search = _search(space_size=3, known=2)
    search.repeats_in_a_row = 1
    assert not search.exhausted  # one candidate is still unmeasured
    search.known["2"] = KnownResult(2, "failed", "why", {}, {})
    assert search.exhausted


def test_a_space_too_large_to_count_ends_after_repeats_in_a_row() -> None:
    search = _search(space_size=None, known=3)
    assert not search.exhausted  # no repeat yet: not even counted
    search.repeats_in_a_row = repeats_to_stop(3) - 1
    assert not search.exhausted
    search.repeats_in_a_row += 1
    assert search.exhausted
