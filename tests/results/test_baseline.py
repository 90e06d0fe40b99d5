"""The baseline: validated against the space, queued first in each new study, and every trial
reported relative to it on its own device."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pandas as pd
import pytest
import yaml
from optuna.trial import TrialState

from dse.core.exceptions import SpecError
from dse.results import trials_frame
from dse.results.baseline import baseline_ids, relative_column, relative_to_baseline
from dse.search.baseline_plan import baseline_problems, plan_baseline
from dse.search.space import suggest_candidate
from dse.search.study import open_experiment_studies
from dse.spec import HardwareProfile, SearchSpace, load_experiment_files
from dse.spec.models import BaselineSpec
from dse.testing import campaign_study, candidate, record_trial
from tests.conftest import LOCAL_CPU, tiny_experiment_text

OBJECTIVES = ["accuracy", "latency_p99_ms"]
BASELINE = """\
baseline:
  arch: {num_stages: 1, depth: 1, width_mult: 1, kernel_size: 3, expand_ratio: 2}
  backend: onnxruntime
  precision: int8
  batch_size: 4
  knobs: {intra_op_threads: 1}
"""


def _measured(accuracy: float, latency: float) -> dict[str, float]:
    return {"accuracy": accuracy, "latency_p99_ms": latency}


def _device_study(device: str, with_baseline: bool = True,
                  baseline_latency: float = 4.0) -> optuna.Study:
    """A device's study as a campaign leaves it: the baseline interrupted once and measured on its
    re-queued trial, better and worse trials, a failure, and a repeat of the baseline."""
    study = campaign_study(f"c@{device}", OBJECTIVES)
    study.set_user_attr("device_profile", device)
    base = {**candidate("onnxruntime", "fp32", 1.0, 1), "device_profile": device}
    record_trial(study, base, state=TrialState.FAIL, status="failed", reason="interrupted",
                 extra_attrs={"baseline": True, "interrupted": True})
    record_trial(study, base, metrics=_measured(0.80, baseline_latency),
                 extra_attrs={"requeued_from": 0})
    record_trial(study, {**candidate("torch", "fp32", 0.5, 1), "device_profile": device},
                 metrics=_measured(0.88, 2.0))
    record_trial(study, {**candidate("onnxruntime", "int8", 0.5, 1), "device_profile": device},
                 state=TrialState.FAIL, status="failed", reason="build error")
    record_trial(study, base, metrics=_measured(0.80, baseline_latency),
                 extra_attrs={"reused_from": 1})
    if with_baseline:
        study.set_user_attr("baseline_candidate_id", study.trials[0].user_attrs["candidate_id"])
    return study


def test_each_trial_is_divided_by_its_own_devices_baseline() -> None:
    # The second device's baseline measured half as fast: its ratios use its own value.
    first, second, bare = (_device_study("cpu-a"), _device_study("cpu-b", baseline_latency=2.0),
                           _device_study("cpu-c", with_baseline=False))
    ids = baseline_ids([first, second, bare])
    assert set(ids) == {"cpu-a", "cpu-b"}

    table = relative_to_baseline(trials_frame([first, second, bare]), OBJECTIVES, ids)
    latency, accuracy = relative_column("latency_p99_ms"), relative_column("accuracy")
    assert latency == "latency_p99_ms vs baseline"
    rows = table.set_index(["device", "trial"])
    assert rows.loc[("cpu-a", 1), latency] == 1.0  # the baseline itself
    assert rows.loc[("cpu-a", 4), latency] == 1.0  # a repeat of it
    assert rows.loc[("cpu-a", 2), latency] == 0.5  # twice as fast
    assert rows.loc[("cpu-a", 2), accuracy] == pytest.approx(1.1)
    assert rows.loc[("cpu-b", 2), latency] == 1.0
    # No value, or no baseline on the device: no ratio.
    assert math.isnan(rows.loc[("cpu-a", 3), latency])
    assert math.isnan(rows.loc[("cpu-a", 0), latency])
    assert table[table["device"] == "cpu-c"][latency].isna().all()
    # The table is otherwise unchanged.
    assert table.drop(columns=[latency, accuracy]).equals(trials_frame([first, second, bare]))


def test_a_baseline_not_measured_yet_gives_empty_ratio_columns() -> None:
    study = campaign_study("c", OBJECTIVES)
    study.set_user_attr("device_profile", "local-cpu")
    study.set_user_attr("baseline_candidate_id", "not-measured")
    record_trial(study, candidate("torch", "fp32", 0.5, 1), metrics=_measured(0.9, 1.0))
    table = relative_to_baseline(trials_frame(study), OBJECTIVES, baseline_ids(study))
    assert table[relative_column("accuracy")].isna().all()
    assert table[relative_column("latency_p99_ms")].dtype == "float64"


def _with_second_device(experiment: Path, text: str) -> None:
    """A torch-only second CPU: it cannot run the onnxruntime baseline."""
    (experiment.parent.parent / "hw_profiles" / "torch-only.yaml").write_text(
        LOCAL_CPU.replace("name: local-cpu", "name: torch-only")
        .replace("backends: [onnxruntime, torch]", "backends: [torch]"))
    experiment.write_text(text.replace(
        "devices: [../hw_profiles/local-cpu.yaml]",
        "devices: [../hw_profiles/local-cpu.yaml, ../hw_profiles/torch-only.yaml]"))


def test_a_new_study_measures_the_baseline_first_and_a_resume_does_not_again(
        tiny_campaign: Path) -> None:
    _with_second_device(tiny_campaign, tiny_experiment_text(4, name="based") + BASELINE)
    experiment = load_experiment_files(tiny_campaign)
    studies = open_experiment_studies(experiment)

    study = studies["local-cpu"]
    trial = study.ask()
    assert trial.user_attrs == {"baseline": True}
    made = suggest_candidate(trial, experiment.space, experiment.devices[0])
    assert (made.backend, made.precision, made.batch_size) == ("onnxruntime", "int8", 4)
    # The YAML's width 1 is the space's 1.0, so a later proposal of it is the same candidate.
    assert made.arch["width_mult"] == 1.0 and isinstance(made.arch["width_mult"], float)
    assert study.user_attrs["baseline_candidate_id"] == made.candidate_id
    assert baseline_ids(list(studies.values())) == {"local-cpu": made.candidate_id}
    skipped = studies["torch-only"]
    assert skipped.user_attrs["baseline_skipped"] == (
        "device 'torch-only' cannot run the baseline's onnxruntime/int8; it offers torch/fp32")
    assert skipped.trials == []

    study.tell(trial, [0.9, 1.0])
    again = open_experiment_studies(experiment)["local-cpu"]
    assert [t.state for t in again.trials] == [TrialState.COMPLETE]  # nothing queued again


def test_a_baseline_outside_the_space_is_refused_field_by_field(tiny_campaign: Path) -> None:
    bad = (BASELINE.replace("width_mult: 1,", "width_mult: 0.75, depth_x: 2,")
           .replace("kernel_size: 3, ", "").replace("batch_size: 4", "batch_size: 8")
           .replace("intra_op_threads: 1", "intra_op_threads: 1, mode: fast"))
    tiny_campaign.write_text(tiny_experiment_text(4) + bad)
    experiment = load_experiment_files(tiny_campaign)
    with pytest.raises(SpecError) as caught:
        open_experiment_studies(experiment)
    at = f"{tiny_campaign}: baseline"
    assert caught.value.problems == [
        f"{at}.arch: missing kernel_size; the baseline needs a value for every parameter in "
        f"model.arch of space 'tiny' (num_stages, depth, width_mult, kernel_size, expand_ratio)",
        f"{at}.arch.width_mult: 0.75 is not one of the choices [0.5, 1.0] of "
        f"model.arch.width_mult in space 'tiny'",
        f"{at}.arch.depth_x: not in model.arch of space 'tiny'; allowed: num_stages, depth, "
        f"width_mult, kernel_size, expand_ratio",
        f"{at}.knobs.mode: not in deployment.backends.onnxruntime.knobs of space 'tiny'; "
        f"allowed: intra_op_threads",
        f"{at}.batch_size: 8 is not in deployment.batch_sizes of space 'tiny'; allowed: 1, 4",
    ]

    tiny_campaign.write_text(tiny_experiment_text(4) + BASELINE.replace(
        "backend: onnxruntime", "backend: tensorrt").replace("precision: int8", "precision: fp16"))
    with pytest.raises(SpecError) as caught:
        open_experiment_studies(load_experiment_files(tiny_campaign))
    assert caught.value.problems == [
        f"{at}.backend: 'tensorrt' is not in deployment.backends of space 'tiny'; allowed: "
        f"onnxruntime, torch",
        f"{at}.precision: 'fp16' is not in deployment.precisions of space 'tiny'; allowed: "
        f"fp32, int8",
    ]


def test_relative_columns_survive_the_parquet_round_trip(tmp_path: Path) -> None:
    table = relative_to_baseline(trials_frame(_device_study("cpu-a")), OBJECTIVES,
                                 baseline_ids(_device_study("cpu-a")))
    table.to_parquet(tmp_path / "t.parquet", index=False)
    back = pd.read_parquet(tmp_path / "t.parquet")
    assert back[relative_column("latency_p99_ms")].tolist()[1:3] == [1.0, 0.5]


def test_a_free_parameter_baseline_is_checked_and_planned_by_parameter_name() -> None:
    space = SearchSpace.model_validate(yaml.safe_load("""\
name: free
parameters:
  x1: {low: 0.0, high: 1.0, step: 0.25}
  x3: [0.0, 0.5, 1.0]
objectives: [{metric: accuracy}]
"""))
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    good = BaselineSpec(params={"x1": 0.5, "x3": 1})
    assert baseline_problems(good, space, "e.yaml") == []
    plan = plan_baseline(good, space, profile)
    assert plan.params == {"x1": 0.5, "x3": 1.0}
    assert isinstance(plan.params["x3"], float)  # the space's own value, not the YAML's 1
    bad = BaselineSpec(params={"x1": 0.3}, backend="torch")
    assert baseline_problems(bad, space, "e.yaml") == [
        "e.yaml: baseline: space 'free' has no deployment; leave out backend",
        "e.yaml: baseline.params: missing x3; the baseline needs a value for every parameter in "
        "parameters of space 'free' (x1, x3)",
        "e.yaml: baseline.params.x1: 0.3 is not on the range's grid (0.0 + k * 0.25) of "
        "parameters.x1 in space 'free'",
    ]
