"""dse.report.render: the Pareto scatter in 2-D and 3-D, its menus, markers and hover."""

from __future__ import annotations

import json
import re
from typing import Any

import optuna
import plotly.graph_objects as go
import pytest

from dse.report.info import FRONT_NAME, ParetoScatterInfo, pareto_scatter_info, trial_provenance
from dse.report.render import figure_html, scatter3d_figure, scatter_figure
from dse.results import front_frame, trials_frame
from dse.testing import (
    EXAMPLE_FRONT,
    EXAMPLE_OBJECTIVES,
    campaign_study,
    candidate,
    example_study,
    record_trial,
)
from tests.report.test_info import DEVICES, THREE, device_studies


@pytest.fixture(scope="module")
def campaign() -> list[optuna.Study]:
    return device_studies()


@pytest.fixture(scope="module")
def three(campaign: list[optuna.Study]) -> ParetoScatterInfo:
    return pareto_scatter_info(trials_frame(campaign), THREE, provenance=trial_provenance(campaign))


def _named(figure: go.Figure, name: str) -> list[Any]:
    return [trace for trace in figure.data if trace.name == name]


def test_the_front_trace_holds_exactly_the_front() -> None:
    study = example_study()
    figure = scatter_figure(pareto_scatter_info(trials_frame(study), EXAMPLE_OBJECTIVES))
    (front,) = _named(figure, FRONT_NAME)
    assert len(front.x) == len(EXAMPLE_FRONT) == len(front_frame(trials_frame(study),
                                                                 EXAMPLE_OBJECTIVES))
    assert front.mode == "lines+markers"  # the axes are the two objectives: a line
    assert list(front.x) == sorted(front.x)
    assert not figure.layout.updatemenus  # one pair, one device: nothing to choose


def test_feasible_infeasible_and_failed_points_look_different(
        three: ParetoScatterInfo) -> None:
    figure = scatter_figure(three)
    looks = {trace.name: (trace.marker.symbol, trace.marker.color) for trace in figure.data}
    kinds = [looks["torch/fp32"], looks["infeasible"], looks["failed"], looks[FRONT_NAME]]
    assert len({symbol for symbol, _ in kinds}) == 4
    assert len({color for _, color in kinds}) == 4
    assert {"infeasible", "failed", FRONT_NAME} <= {t.name for t in figure.data if t.showlegend
                                                    is not False}


def test_a_menu_picks_the_pair_of_objectives(three: ParetoScatterInfo) -> None:
    figure = scatter_figure(three)
    pairs = figure.layout.updatemenus[0]
    assert [b.label for b in pairs.buttons] == [
        "x: latency_p99_ms · y: accuracy", "x: process_rss_peak_mb · y: accuracy",
        "x: process_rss_peak_mb · y: latency_p99_ms"]
    restyle, relayout = pairs.buttons[2].args
    assert relayout["xaxis.title.text"] == "process_rss_peak_mb [MB] (lower is better)"
    assert relayout["yaxis.title.text"] == "latency_p99_ms [ms] (lower is better)"
    # One array per trace; the front's are its points along the new axes.
    index = next(i for i, trace in enumerate(figure.data) if trace.name == FRONT_NAME)
    front = [p for p, device in enumerate(three.front.devices) if device == DEVICES[0]]
    assert restyle["x"][index] == [three.front.values[2][p] for p in front]
    assert restyle["y"][index] == [three.front.values[1][p] for p in front]
    assert len(restyle["x"]) == len(figure.data)


def test_a_menu_picks_the_device_and_the_first_shows_first(three: ParetoScatterInfo) -> None:
    figure = scatter_figure(three)
    devices = figure.layout.updatemenus[1]
    assert [b.label for b in devices.buttons] == [f"device: {d}" for d in DEVICES]
    fronts = _named(figure, FRONT_NAME)
    assert [trace.visible for trace in fronts] == [True, False]
    # The front trace of the default view holds exactly that device's front.
    assert len(fronts[0].x) == three.front.devices.count(DEVICES[0])
    shown = devices.buttons[1].args[0]["visible"]
    assert shown == [trace.visible is False for trace in figure.data]


def test_three_objectives_get_a_3d_scatter(three: ParetoScatterInfo) -> None:
    figure = scatter3d_figure(three)
    assert {type(trace) for trace in figure.data} == {go.Scatter3d}
    # Short titles (the arrow points the way that is better), so they fit the scene's box.
    assert figure.layout.scene.zaxis.title.text == "accuracy [fraction] better ↑"
    assert figure.layout.scene.xaxis.title.text == "latency_p99_ms [ms] better ↓"
    # A camera further out than plotly's (1.25, 1.25, 1.25), so the titles stay inside the box.
    eye = figure.layout.scene.camera.eye
    assert (eye.x ** 2 + eye.y ** 2 + eye.z ** 2) ** 0.5 > 1.25 * 3 ** 0.5
    (front, _) = _named(figure, FRONT_NAME)
    assert len(front.z) == three.front.devices.count(DEVICES[0])
    assert [b.label for b in figure.layout.updatemenus[0].buttons] == [
        f"device: {d}" for d in DEVICES]  # one triple: no menu of triples


def test_four_objectives_let_a_menu_pick_the_three_axes() -> None:
    objectives = ["accuracy", "latency_p99_ms", "process_rss_peak_mb", "throughput_sps"]
    study = campaign_study("four", objectives)
    for i in range(3):
        record_trial(study, candidate("torch", "fp32", 1.0 + i, 1),
                     metrics={"accuracy": 0.8 + i / 10, "latency_p99_ms": 1.0 + i,
                              "process_rss_peak_mb": 100.0 - i, "throughput_sps": 10.0 * i})
    figure = scatter3d_figure(pareto_scatter_info(trials_frame(study), objectives))
    triples = figure.layout.updatemenus[0].buttons
    assert len(triples) == 4
    assert "scene.zaxis.title.text" in triples[3].args[1]


def test_two_objectives_have_no_3d_scatter() -> None:
    info = pareto_scatter_info(trials_frame(example_study()), EXAMPLE_OBJECTIVES)
    with pytest.raises(ValueError, match="three axes"):
        scatter3d_figure(info)


def test_hover_writes_each_label_once_per_trace_and_values_per_point(
        three: ParetoScatterInfo) -> None:
    figure = scatter_figure(three)
    (torch, _) = _named(figure, "torch/fp32")
    template = torch.hovertemplate
    assert template.startswith("<b>trial %{customdata[0]}</b> on cpu-a<br>")
    labels = re.findall(r"<br>([^<:]+): %\{customdata\[\d+\]\}", template)
    assert labels[:4] == ["family", "backend", "precision", "batch_size"]
    assert "knob.intra_op_threads" not in labels  # no torch trial has it
    # Provenance the same on all of the device's trials: in the template, once.
    assert "<i>cpu_model: AMD EPYC</i>" in template
    row = dict(zip(["trial", *labels], torch.customdata[0], strict=True))
    assert row["trial"] == "0" and row["accuracy"] == "0.8 fraction"


def test_hostile_text_is_shown_not_run(three: ParetoScatterInfo) -> None:
    page = figure_html(scatter_figure(three), "dse-pareto", include_plotlyjs=False)
    data = json.loads(page[page.index("[{"):page.index("}],") + 2])
    texts = [cell for trace in data for row in trace.get("customdata", []) for cell in row]
    hostile = [t for t in texts if "alert(1)" in t]
    assert hostile and all("<" not in t and "&lt;img" in t for t in hostile)
    assert "<img" not in page and "</script>&" not in page


def test_a_hostile_device_name_is_escaped_and_no_template(tmp_path: Any) -> None:
    study = campaign_study("d", EXAMPLE_OBJECTIVES)
    record_trial(study, {**candidate("torch", "fp32", 1.0, 1), "device_profile": "<b>%{x}"},
                 metrics={"accuracy": 0.9, "latency_p99_ms": 1.0})
    figure = scatter_figure(pareto_scatter_info(trials_frame(study), EXAMPLE_OBJECTIVES))
    assert "on &lt;b&gt;&#37;{x}<br>" in figure.data[0].hovertemplate


def test_many_trials_stay_small() -> None:
    """The scatter's bytes per trial (two objectives, one device, provenance in the hover), so a
    10,000-trial page stays far under its 15 MB (plotly.js alone is about 4.8 MB)."""
    study = campaign_study("many", EXAMPLE_OBJECTIVES, ["process_rss_peak_mb <= 4096"])
    trials = []
    for i in range(1000):
        backend = ("onnxruntime", "torch")[i % 2]
        metrics = {"accuracy": 0.5 + (i % 97) / 200, "latency_p99_ms": 0.1 + (i % 89) / 7,
                   "process_rss_peak_mb": 300.0 + i % 500}
        trials.append(optuna.trial.create_trial(
            values=[metrics[o] for o in EXAMPLE_OBJECTIVES],
            constraints={"process_rss_peak_mb <= 4096": metrics["process_rss_peak_mb"] - 4096},
            user_attrs={"candidate": candidate(backend, ("fp32", "int8")[i % 3 == 0],
                                               0.25 * (1 + i % 8), 1 + i % 4, 1 + i % 16),
                        "status": "ok", "metrics": metrics,
                        "provenance": {"host": "vm", "cpu_model": "AMD EPYC",
                                       "backend_version": backend[:5], "dse_version": "0.1.0",
                                       "achieved_rel_ci": f"0.0{i % 90:02d}"}}))
    study.add_trials(trials)
    info = pareto_scatter_info(trials_frame(study), EXAMPLE_OBJECTIVES,
                               provenance=trial_provenance(study))
    page = figure_html(scatter_figure(info), "dse-pareto", include_plotlyjs=False)
    assert len(page) / 1000 < 200  # bytes per trial; measured 129, of which the hover ~110


def _hover_text(trace: Any, point: int) -> str:
    """The hover of one point as plotly fills it in: its customdata put into the template."""
    cells = trace.customdata[point]
    return re.sub(r"%\{customdata\[(\d+)\]\}", lambda m: str(cells[int(m[1])]),
                  trace.hovertemplate)


def test_each_point_shows_only_its_own_runtimes_provenance() -> None:
    """ONNX Runtime records its execution provider, torch its mode: on one device, neither is
    true of the other runtime's points. Said once for the device (recorded by only some of its
    trials) or labelled in a trace mixing both (the front), it once showed on every point."""
    study = campaign_study("mixed", EXAMPLE_OBJECTIVES)
    own = {"onnxruntime": {"execution_provider": "CPUExecutionProvider"},
           "torch": {"mode": "eager"}}
    for i, backend in enumerate(["torch", "onnxruntime", "torch", "onnxruntime"]):
        record_trial(study, candidate(backend, "fp32", 1.0 + i, 1),
                     metrics={"accuracy": 0.8 + 0.05 * i, "latency_p99_ms": 1.0 + i},
                     extra_attrs={"provenance": {"host": "vm", **own[backend]}})
    info = pareto_scatter_info(trials_frame(study), EXAMPLE_OBJECTIVES,
                               provenance=trial_provenance(study))
    assert info.device_notes["local-cpu"] == ["host: vm"]  # what every trial recorded
    figure = scatter_figure(info)
    assert len(_named(figure, FRONT_NAME)[0].x) == 4  # the front mixes both runtimes
    seen = 0
    for trace in figure.data:
        for point in range(len(trace.x)):
            text = _hover_text(trace, point)
            backend = re.search(r"<br>backend: (\w+)", text)
            assert backend is not None, text
            mine, other = (("onnxruntime", "torch") if backend[1] == "onnxruntime"
                           else ("torch", "onnxruntime"))
            assert all(f"<br>{key}: {value}" in text for key, value in own[mine].items()), text
            assert not any(key in text for key in own[other]), text
            assert "<br>knob.num_threads: " not in text or mine == "torch"
            seen += 1
    assert seen == 8  # each trial in its backend's trace and in the front's


def test_a_front_over_more_objectives_than_drawn_says_so_on_the_plot(
        three: ParetoScatterInfo) -> None:
    """In a 2-D view of a 3-objective front, a ringed point can look dominated: the plot says
    why. Two objectives need no such note."""
    assert three.projection_note.startswith("The front is over all 3 objectives (accuracy, ")
    (note,) = scatter_figure(three).layout.annotations
    assert note.text.replace("<br>", " ") == three.projection_note
    two = pareto_scatter_info(trials_frame(example_study()), EXAMPLE_OBJECTIVES)
    assert two.projection_note == "" and not scatter_figure(two).layout.annotations
