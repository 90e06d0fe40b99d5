"""dse.report.roofline: attained GFLOP/s against arithmetic intensity under the profile's peaks,
and the peaks dse.search.study stores on each device's study."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from dse.core.trial_record import StudyAttr
from dse.report.roofline import (
    compute_peaks,
    roofline_figure,
    roofline_info,
)
from dse.results import front_frame, trials_frame
from dse.search import study as study_module
from dse.spec import HardwareProfile
from dse.testing import EXAMPLE_OBJECTIVES, campaign_study, candidate, example_study, record_trial

OBJECTIVES = list(EXAMPLE_OBJECTIVES)
GPU = HardwareProfile(
    name="gpu", kind="cuda", backends=["onnxruntime"], precisions=["fp32", "fp16", "int8"],
    peak_gflops=20_000.0, peak_bandwidth_gbs=2_000.0,
    peak_gflops_by_precision={"fp16": 300_000.0, "int8": 600_000.0}, peak_source="datasheet")
BARE_CPU = HardwareProfile(name="cpu", kind="cpu", backends=["onnxruntime"], precisions=["fp32"])


def device_study(device: str, points: list[tuple[str, float, float, float, float]],
                 peaks: dict[str, Any] | None) -> optuna.Study:
    """Trials of (precision, accuracy, p99, FLOP/B, GFLOP/s) on ``device``."""
    study = campaign_study(f"r@{device}", OBJECTIVES)
    study.set_user_attr("device_profile", device)
    if peaks is not None:
        study.set_user_attr(StudyAttr.DEVICE_PEAKS, peaks)
    for precision, accuracy, p99, intensity, rate in points:
        record_trial(study, {**candidate("onnxruntime", precision, accuracy, 1),
                             "device_profile": device},
                     metrics={"accuracy": accuracy, "latency_p99_ms": p99,
                              "arithmetic_intensity": intensity, "achieved_gflops": rate})
    return study


GPU_POINTS = [("fp32", 0.95, 4.0, 10.0, 5_000.0), ("fp16", 0.94, 1.0, 20.0, 40_000.0),
              ("fp16", 0.90, 2.0, 5.0, 8_000.0), ("int8", 0.93, 0.5, 40.0, 70_000.0)]


def test_device_peaks_are_the_profiles_figures() -> None:
    assert study_module.device_peaks(GPU) == {
        "profile": "gpu", "kind": "cuda", "peak_gflops": 20_000.0,
        "peak_gflops_by_precision": {"fp16": 300_000.0, "int8": 600_000.0},
        "peak_bandwidth_gbs": 2_000.0, "peak_source": "datasheet"}
    assert compute_peaks(study_module.device_peaks(GPU)) == {
        "fp32": 20_000.0, "fp16": 300_000.0, "int8": 600_000.0}


def test_opening_a_campaign_stores_the_peaks_on_its_study(tiny_campaign: Path) -> None:
    from dse.spec import load_experiment_files

    experiment = load_experiment_files(tiny_campaign)
    studies = study_module.open_experiment_studies(experiment)
    stored = studies["local-cpu"].user_attrs[StudyAttr.DEVICE_PEAKS]
    assert stored == study_module.device_peaks(experiment.devices[0])
    assert stored["peak_gflops"] is None and stored["kind"] == "cpu"


def test_points_by_precision_front_marked_under_each_ceiling() -> None:
    study = device_study("gpu", GPU_POINTS, study_module.device_peaks(GPU))
    trials = trials_frame(study)
    info = roofline_info(trials, OBJECTIVES, [study])
    assert info.empty_reason is None
    assert (info.x_title, info.y_title) == ("arithmetic_intensity [FLOP/B]",
                                            "achieved_gflops [GFLOP/s]")
    (device,) = info.devices
    assert [(g.name, g.trials) for g in device.groups] == [
        ("fp16", [1, 2]), ("fp32", [0]), ("int8", [3])]
    assert sorted(device.front.trials) == sorted(front_frame(trials, OBJECTIVES)["trial"])
    assert device.groups[0].y == [40_000.0, 8_000.0]
    assert device.groups[1].hover == ["trial 0 on gpu<br>onnxruntime/fp32 batch 1<br>10 FLOP/B, 5000 GFLOP/s"]
    # Roofs, lowest peak first: the bandwidth slope up to the ridge, then flat.
    assert [c.precision for c in device.ceilings] == ["fp32", "fp16", "int8"]
    fp32 = device.ceilings[0]
    assert fp32.x[1] == 10.0 and fp32.y[1:] == [20_000.0, 20_000.0]
    assert fp32.y[0] == pytest.approx(2_000.0 * fp32.x[0])
    int8 = device.ceilings[2]
    assert int8.name == "int8 peak 600,000 GOP/s, 2,000 GB/s"
    assert int8.x[-1] >= 2 * 300.0  # reaches past the int8 ridge (600000 / 2000)
    assert device.note == "Peaks: datasheet"
    assert roofline_info(trials, OBJECTIVES, [study],
                         front=front_frame(trials, OBJECTIVES)) == info
    figure = roofline_figure(info)
    assert len(figure.data) == len(device.ceilings) + len(device.groups) + 1
    assert figure.layout.xaxis.type == "log" and figure.layout.yaxis.type == "log"


def test_a_profile_without_peaks_gets_points_and_a_note() -> None:
    study = device_study("cpu", [("fp32", 0.9, 2.0, 3.0, 50.0)],
                         study_module.device_peaks(BARE_CPU))
    info = roofline_info(trials_frame(study), OBJECTIVES, [study])
    (device,) = info.devices
    assert device.ceilings == []
    assert device.note == ("Ceilings unknown: profile cpu gives neither peak_gflops nor "
                           "peak_bandwidth_gbs.")
    assert len(roofline_figure(info).data) == 2  # the fp32 points and the front ring


def test_a_study_without_stored_peaks_says_so() -> None:
    study = device_study("old", [("fp32", 0.9, 2.0, 3.0, 50.0)], None)
    (device,) = roofline_info(trials_frame(study), OBJECTIVES, [study]).devices
    assert device.ceilings == [] and "stores no peak figures" in device.note


def test_partial_peaks_draw_what_is_known_and_name_the_rest() -> None:
    bandwidth_only = study_module.device_peaks(
        BARE_CPU.model_copy(update={"peak_bandwidth_gbs": 100.0}))
    study = device_study("cpu", [("fp32", 0.9, 2.0, 3.0, 50.0)], bandwidth_only)
    (device,) = roofline_info(trials_frame(study), OBJECTIVES, [study]).devices
    (line,) = device.ceilings
    assert line.precision is None and line.y == pytest.approx([100.0 * x for x in line.x])
    assert device.note == "Compute ceiling unknown: profile cpu gives no peak_gflops."

    fp32_only = study_module.device_peaks(GPU.model_copy(update={
        "peak_gflops_by_precision": {}, "peak_bandwidth_gbs": None, "peak_source": ""}))
    study = device_study("gpu", GPU_POINTS, fp32_only)
    (device,) = roofline_info(trials_frame(study), OBJECTIVES, [study]).devices
    (flat,) = device.ceilings
    assert flat.y == [20_000.0, 20_000.0]
    assert device.note == ("Memory-bandwidth ceiling unknown: profile gpu gives no "
                           "peak_bandwidth_gbs; no peak compute known for fp16, int8 on profile "
                           "gpu.")


def test_each_device_has_its_own_panel_and_ceilings() -> None:
    studies = [device_study("gpu", GPU_POINTS, study_module.device_peaks(GPU)),
               device_study("cpu", [("fp32", 0.9, 2.0, 3.0, 50.0)],
                            study_module.device_peaks(BARE_CPU))]
    info = roofline_info(trials_frame(studies), OBJECTIVES, studies)
    assert [(d.device, len(d.ceilings)) for d in info.devices] == [("cpu", 0), ("gpu", 3)]
    assert info.note == ("cpu: Ceilings unknown: profile cpu gives neither peak_gflops nor "
                         "peak_bandwidth_gbs. gpu: Peaks: datasheet")
    figure = roofline_figure(info)
    assert [a.text for a in figure.layout.annotations] == ["cpu", "gpu"]
    assert figure.layout.xaxis2.type == "log"


def test_empty_reasons() -> None:
    example = example_study()
    info = roofline_info(trials_frame(example), OBJECTIVES, [example])
    assert info.empty_reason is not None and "arithmetic_intensity" in info.empty_reason
    assert len(roofline_figure(info).data) == 0

    zero = device_study("gpu", [("fp32", 0.9, 2.0, 0.0, 0.0)], None)
    info = roofline_info(trials_frame(zero), OBJECTIVES, [zero])
    assert info.empty_reason == ("no measured trial has a positive arithmetic_intensity and "
                                 "achieved_gflops yet")
    assert info.note.startswith("1 measured trial(s) lack")
