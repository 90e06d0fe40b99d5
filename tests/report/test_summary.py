"""dse.report.summary: the front table with each configuration as YAML, and the device comparison."""

from __future__ import annotations

import optuna
import pandas as pd
import pytest
import yaml

from dse.report.front_table import baseline_yaml, front_table_info
from dse.report.summary import device_comparison_info
from dse.results import front_frame, trials_frame
from dse.spec.models import BaselineSpec
from dse.testing import (
    EXAMPLE_OBJECTIVES,
    campaign_study,
    candidate,
    example_study,
    record_trial,
)
from tests.report.test_info import DEVICES, HOSTILE, THREE, device_studies

OBJECTIVES = list(EXAMPLE_OBJECTIVES)


@pytest.fixture(scope="module")
def campaign() -> list[optuna.Study]:
    return device_studies()


def _baseline(text: str) -> BaselineSpec:
    return BaselineSpec.model_validate(yaml.safe_load(text)["baseline"])


def test_each_front_row_has_its_configuration_as_a_baseline_to_paste() -> None:
    trials = trials_frame(example_study())
    table = front_table_info(front_frame(trials, OBJECTIVES), OBJECTIVES)
    assert table.deploy_yaml is not None and len(table.deploy_yaml) == len(table.rows) == 3
    first = table.deploy_yaml[table.rows.index(next(r for r in table.rows if r[0] == "0"))]
    assert first == ("# cnn · trial 0 on local-cpu\n"
                     "baseline:\n"
                     "  arch:\n    depth: 2\n    width_mult: 2.0\n"
                     "  backend: onnxruntime\n  precision: fp32\n  batch_size: 1\n"
                     "  knobs:\n    intra_op_threads: 1\n")
    # The knob that mixes 1 and "auto" is text in the table; the YAML has the number back.
    torch = _baseline(table.deploy_yaml[[r[0] for r in table.rows].index("2")])
    assert torch.knobs == {"num_threads": 1} and isinstance(torch.knobs["num_threads"], int)
    assert torch.model_dump(exclude_defaults=True) == {
        "arch": {"depth": 2, "width_mult": 0.5}, "backend": "torch", "precision": "fp32",
        "batch_size": 1, "knobs": {"num_threads": 1}}


def test_yaml_keeps_hostile_text_as_data() -> None:
    text = baseline_yaml({"param.family": "cnn", "param.arch.depth": 2,
                          "param.backend": "torch", "param.precision": "fp32",
                          "param.batch_size": 4, "param.knob.num_threads": HOSTILE},
                         comment=f"cnn · trial 1 on {HOSTILE}")
    comment, _, body = text.partition("\n")
    # The line breaks in the device name do not end the comment and start YAML of their own.
    assert comment.startswith("# cnn · trial 1 on <img") and body.startswith("baseline:\n")
    parsed = yaml.safe_load(text)
    assert parsed == {"baseline": {"arch": {"depth": 2}, "backend": "torch",
                                   "precision": "fp32", "batch_size": 4,
                                   "knobs": {"num_threads": HOSTILE}}}
    assert "evil" not in parsed["baseline"]


def test_free_parameters_go_under_params_and_missing_values_are_left_out() -> None:
    text = baseline_yaml({"param.lr": 0.01, "param.optimizer": "adam", "param.mixed": "True",
                          "param.units": "64", "param.name": "[64]", "param.knob.x": None})
    assert yaml.safe_load(text) == {"baseline": {"params": {
        "lr": 0.01, "optimizer": "adam", "mixed": True, "units": 64, "name": "[64]"}}}
    assert _baseline(text).params["lr"] == 0.01


def test_devices_are_compared_by_front_and_best_objectives(
        campaign: list[optuna.Study]) -> None:
    trials = trials_frame(campaign)
    info = device_comparison_info(trials, THREE)
    assert info.devices.columns == [
        "device", "trials", "feasible", "on front", "best accuracy [fraction]",
        "best latency_p99_ms [ms]", "best process_rss_peak_mb [MB]"]
    # 6 trials each: 4 feasible (all on the front), one over the memory bound, one failed.
    assert info.devices.rows == [["cpu-a", "6", "4", "4", "0.89", "1", "300"],
                                 ["gpu-b", "6", "4", "4", "0.89", "0.5", "300"]]


def test_an_architecture_on_several_devices_is_shown_side_by_side(
        campaign: list[optuna.Study]) -> None:
    table = device_comparison_info(trials_frame(campaign), THREE).architectures
    assert table.empty_reason is None
    assert table.columns[:3] == ["arch.depth", "arch.width_mult", "devices"]
    assert table.columns[3:] == [f"{device}: {column}" for device in DEVICES
                                 for column in ["accuracy [fraction]", "latency_p99_ms [ms]",
                                                "process_rss_peak_mb [MB]"]]
    assert table.rows[0] == ["2", "0.5", "2", "0.8", "1", "300", "0.8", "0.5", "300"]
    assert len(table.rows) == 4 and table.note == ""


def test_the_side_by_side_table_is_bounded(campaign: list[optuna.Study],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dse.report.summary.ARCHITECTURE_ROWS", 3)
    table = device_comparison_info(trials_frame(campaign), THREE).architectures
    assert len(table.rows) == 3
    assert table.note == "1 more architecture(s) feasible on several devices are not listed."


def test_one_device_has_nothing_side_by_side() -> None:
    info = device_comparison_info(trials_frame(example_study()), OBJECTIVES)
    assert [row[:4] for row in info.devices.rows] == [["local-cpu", "9", "5", "3"]]
    assert info.architectures.empty_reason is not None


def test_a_precomputed_front_gives_the_same_comparison(campaign: list[optuna.Study]) -> None:
    trials = trials_frame(campaign)
    front = front_frame(trials, THREE)
    assert device_comparison_info(trials, THREE, front) == device_comparison_info(trials, THREE)


def test_a_study_without_results_compares_nothing() -> None:
    study = campaign_study("none", OBJECTIVES)
    record_trial(study, candidate("torch", "int8", 1.0, 1), state=optuna.trial.TrialState.FAIL,
                 status="infeasible", reason="no int8")
    info = device_comparison_info(trials_frame(study), OBJECTIVES)
    assert info.devices.rows == [["local-cpu", "1", "0", "0", "", ""]]
    assert info.architectures.empty_reason is not None
    assert isinstance(trials_frame(study), pd.DataFrame)
