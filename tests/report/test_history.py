"""dse.report.history: the hypervolume of each device's front after each finished trial."""

from __future__ import annotations

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from dse.report.history import hypervolume_history_figure, hypervolume_history_info
from dse.results import trials_frame
from dse.search.pareto import default_reference, hypervolume_history
from dse.testing import EXAMPLE_OBJECTIVES, campaign_study, candidate, example_study, record_trial

OBJECTIVES = list(EXAMPLE_OBJECTIVES)


def device_study(device: str, points: list[tuple[float, float]]) -> optuna.Study:
    study = campaign_study(f"h@{device}", OBJECTIVES)
    for accuracy, p99 in points:
        record_trial(study, {**candidate("onnxruntime", "fp32", 1.0, 1), "device_profile": device},
                     metrics={"accuracy": accuracy, "latency_p99_ms": p99})
    return study


def test_one_line_per_device_from_the_pareto_module() -> None:
    trials = trials_frame(example_study())
    info = hypervolume_history_info(trials, OBJECTIVES)
    assert info.empty_reason is None
    (line,) = info.lines
    # Trial 6 is still running: not on the x axis.
    assert line.device == "local-cpu"
    assert line.trials == [0, 1, 2, 3, 4, 5, 7, 8]
    assert line.completed == list(range(1, 9))
    reference = default_reference(trials, OBJECTIVES)
    assert info.reference == reference
    finished = trials[trials["state"] != "RUNNING"]
    assert line.hypervolume == hypervolume_history(finished, OBJECTIVES, reference)
    assert line.hypervolume == sorted(line.hypervolume) and line.hypervolume[-1] > 0
    assert info.y_title == "hypervolume [fraction × ms]"
    # The reference in each objective's own direction: the worst value seen and the push.
    assert ("accuracy: lowest seen 0.85 fraction, measured from 0.01 below it; "
            "latency_p99_ms: highest seen 4 ms, measured from 0.3 above it.") in info.note
    assert reference == pytest.approx([0.84, 4.3])
    assert "1 trial(s) still running or queued are not counted" in info.note
    assert len(hypervolume_history_figure(info).data) == 1


def test_a_maximised_metrics_reference_reads_as_a_positive_value_and_its_meaning() -> None:
    """Pushed 10% of the range below the lowest throughput, the reference is a negative
    throughput (-5,150 samples/s): the note says the lowest seen and the push, never that."""
    objectives = ["accuracy", "throughput_sps"]
    study = campaign_study("t", objectives)
    for accuracy, throughput in [(0.9, 500.0), (0.8, 57_000.0)]:
        record_trial(study, candidate("onnxruntime", "fp32", 1.0, 1),
                     metrics={"accuracy": accuracy, "throughput_sps": throughput})
    info = hypervolume_history_info(trials_frame(study), objectives)
    assert info.reference[1] == pytest.approx(-5150.0)  # the point itself, for the volumes
    assert ("throughput_sps: lowest seen 500 samples/s, measured from 5650 below it."
            in info.note)
    assert "-5" not in info.note and "−" not in info.note


def test_devices_share_one_reference_point() -> None:
    studies = [device_study("gpu", [(0.9, 1.0), (0.95, 2.0)]),
               device_study("cpu", [(0.8, 10.0), (0.9, 20.0), (0.7, 5.0)])]
    trials = trials_frame(studies)
    info = hypervolume_history_info(trials, OBJECTIVES)
    assert [line.device for line in info.lines] == ["cpu", "gpu"]
    assert info.reference == default_reference(trials, OBJECTIVES)
    cpu, gpu = info.lines
    assert cpu.trials == [0, 1, 2] and gpu.trials == [0, 1]
    # Against the shared reference, the faster device's front holds more volume.
    assert gpu.hypervolume[-1] > cpu.hypervolume[-1]
    figure = hypervolume_history_figure(info)
    assert [trace.name for trace in figure.data] == ["cpu", "gpu"]


def test_a_failed_trial_repeats_the_volume_before_it() -> None:
    study = device_study("d", [(0.9, 1.0)])
    record_trial(study, {**candidate("torch", "int8", 1.0, 1), "device_profile": "d"},
                 state=TrialState.FAIL, status="failed", reason="timeout")
    (line,) = hypervolume_history_info(trials_frame(study), OBJECTIVES).lines
    assert line.trials == [0, 1] and line.hypervolume[1] == line.hypervolume[0]


@pytest.mark.parametrize(("objectives", "why"), [
    ([], "the study names no objective"),
    (OBJECTIVES, "no feasible, completed trial has measured all of"),
])
def test_empty_reasons(objectives: list[str], why: str) -> None:
    study = campaign_study("empty", OBJECTIVES)
    record_trial(study, candidate("torch", "int8", 1.0, 1), state=TrialState.FAIL,
                 status="failed", reason="timeout")
    info = hypervolume_history_info(trials_frame(study), objectives)
    assert info.empty_reason is not None and info.empty_reason.startswith(why)
    assert info.lines == []


def test_figure_of_an_empty_info_has_no_traces() -> None:
    trials: pd.DataFrame = trials_frame(campaign_study("e", OBJECTIVES))
    info = hypervolume_history_info(trials, OBJECTIVES)
    assert info.empty_reason is not None
    assert len(hypervolume_history_figure(info).data) == 0
