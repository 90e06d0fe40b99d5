"""dse.report.info: the data behind the Pareto scatter (2-D and 3-D, per device) and the
parallel-coordinates plot."""

from __future__ import annotations

from typing import Any

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from dse.report import parallel_coordinates_info, pareto_scatter_info
from dse.report.info import FRONT_NAME, hover_texts, trial_provenance
from dse.results import front_frame, trials_frame
from dse.testing import (
    EXAMPLE_FRONT,
    EXAMPLE_OBJECTIVES,
    campaign_study,
    candidate,
    example_study,
    record_trial,
)

OBJECTIVES = list(EXAMPLE_OBJECTIVES)
THREE = ["accuracy", "latency_p99_ms", "process_rss_peak_mb"]
BOUND = "process_rss_peak_mb <= 4096"
# A value that is markup, a hover template and YAML at once: it must show as written.
HOSTILE = '<img src=x onerror="alert(1)"> %{x} </script>&amp;\n  evil: 1'
DEVICES = ("cpu-a", "gpu-b")


def _provenance(device: str, backend: str, host: str = "box") -> dict[str, Any]:
    """Attributes as the loop writes them after a measurement (dse.search.loop)."""
    return {"provenance": {"host": host, "cpu_model": "AMD EPYC", "dse_version": "0.1.0",
                           "backend_version": "1.32.0" if backend == "onnxruntime" else "2.13",
                           "pid": "123", "window_start": "1.0"},
            "device_id": f"{device}@node1"}


def device_studies(per_device: int = 4) -> list[optuna.Study]:
    """A two-device campaign over three objectives, one study per device as a campaign keeps
    them. On each device trials 0..per_device-1 are feasible and mutually non-dominated; the next
    breaks the memory bound and carries hostile text in a knob and in its host; the last failed
    yet reported every value, with a hostile reason."""
    studies = []
    for scale, device in zip((1.0, 0.5), DEVICES, strict=True):
        study = campaign_study("multi", THREE, [BOUND])
        for i in range(per_device):
            backend = "onnxruntime" if i % 2 else "torch"
            memory = 300.0 + 50 * i
            record_trial(study, {**candidate(backend, "fp32", 0.5 + 0.5 * i, 1),
                                 "device_profile": device},
                         metrics={"accuracy": 0.8 + 0.03 * i, "latency_p99_ms": (1 + i) * scale,
                                  "process_rss_peak_mb": memory},
                         constraints={BOUND: memory - 4096},
                         extra_attrs=_provenance(device, backend))
        record_trial(study, {**candidate("torch", "fp16", 1.0, 1), "knobs": {"num_threads": HOSTILE},
                             "device_profile": device},
                     metrics={"accuracy": 0.99, "latency_p99_ms": 0.1, "process_rss_peak_mb": 9000.0},
                     constraints={BOUND: 9000.0 - 4096},
                     extra_attrs=_provenance(device, "torch", host=HOSTILE))
        record_trial(study, {**candidate("torch", "int8", 1.0, 2), "device_profile": device},
                     state=TrialState.FAIL, status="failed", reason=HOSTILE,
                     metrics={"accuracy": 0.6, "latency_p99_ms": 2.0, "process_rss_peak_mb": 500.0})
        studies.append(study)
    return studies


@pytest.fixture
def trials() -> pd.DataFrame:
    return trials_frame(example_study())


@pytest.fixture(scope="module")
def campaign() -> list[optuna.Study]:
    return device_studies()


def test_scatter_puts_the_second_objective_across_and_the_first_up(trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, OBJECTIVES)
    assert [axis.title for axis in info.axes] == ["accuracy [fraction] (higher is better)",
                                                  "latency_p99_ms [ms] (lower is better)"]
    assert info.pairs == [(1, 0)] and info.joined == [True]
    assert info.triples == []
    assert info.devices == ["local-cpu"]
    assert info.empty_reason is None


def test_scatter_groups_feasible_points_by_backend_and_precision(trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, OBJECTIVES)
    assert [(g.name, g.kind, g.trials) for g in info.groups] == [
        ("onnxruntime/fp32", "feasible", [0]), ("onnxruntime/int8", "feasible", [1]),
        ("torch/fp32", "feasible", [2, 3, 8])]
    torch = info.groups[2]
    assert torch.values == [[0.85, 0.88, 0.88], [1.0, 3.0, 3.0]]  # one list per axis
    assert torch.on_front == [True, False, False]
    assert torch.devices == ["local-cpu"] * 3


def test_scatter_front_matches_front_frame_sorted_by_x(trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, OBJECTIVES)
    front = front_frame(trials, OBJECTIVES)
    assert info.front.name == FRONT_NAME == "Pareto front"
    assert sorted(info.front.trials) == sorted(front["trial"]) == sorted(EXAMPLE_FRONT)
    assert info.front.values[1] == sorted(info.front.values[1])


def test_infeasible_points_are_shown_apart_and_the_rest_counted(trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, OBJECTIVES)
    assert (info.infeasible.kind, info.infeasible.trials) == ("infeasible", [4])
    assert info.infeasible.on_front == [False]
    outcome = info.hover_fields.index("outcome")
    assert info.infeasible.hover[0][outcome] == "violates process_rss_peak_mb &lt;= 4096"
    assert info.failed.trials == []  # the example's failed trial lacks latency
    assert info.note == ("2 finished trial(s) lack accuracy or latency_p99_ms and are not shown "
                         "(1 failed, 1 infeasible); 1 trial(s) still running or queued.")


def test_failed_trials_with_values_are_a_group_of_their_own(
        campaign: list[optuna.Study]) -> None:
    info = pareto_scatter_info(trials_frame(campaign), THREE)
    assert (info.failed.kind, info.failed.trials, info.failed.devices) == (
        "failed", [5, 5], list(DEVICES))
    assert info.infeasible.trials == [4, 4]
    assert not any(info.failed.on_front) and not any(info.infeasible.on_front)
    outcome = info.hover_fields.index("outcome")
    assert info.failed.hover[0][outcome].startswith("failed: &lt;img src=x")


def test_hover_fields_are_the_configuration_and_the_bounded_metrics(
        trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, OBJECTIVES)
    assert info.hover_fields == [
        "trial", "outcome", "family", "backend", "precision", "batch_size", "arch.depth",
        "arch.width_mult", "knob.intra_op_threads", "knob.num_threads", "accuracy",
        "latency_p99_ms", "process_rss_peak_mb"]
    first = dict(zip(info.hover_fields, info.groups[2].hover[0], strict=True))
    assert first == {"trial": "2", "outcome": "", "family": "cnn", "backend": "torch",
                     "precision": "fp32", "batch_size": "1", "arch.depth": "2",
                     "arch.width_mult": "0.5", "knob.intra_op_threads": "",
                     "knob.num_threads": "1", "accuracy": "0.85 fraction",
                     "latency_p99_ms": "1 ms", "process_rss_peak_mb": "400 MB"}
    reused = info.groups[2].hover[2][0]
    assert reused == "8 (measurement reused from trial 3)"


def test_hover_texts_list_every_metric_and_skip_what_a_trial_lacks(trials: pd.DataFrame) -> None:
    hover = hover_texts(trials[trials["trial"] == 2]).pop().split("<br>")
    assert hover[0] == "trial 2 on local-cpu"
    for line in ["family: cnn", "backend: torch", "arch.width_mult: 0.5", "knob.num_threads: 1",
                 "accuracy: 0.85 fraction", "latency_p99_ms: 1 ms", "energy_j: 0.2"]:
        assert line in hover
    assert not any(line.startswith(("knob.intra_op_threads", "outcome")) for line in hover)


def test_three_objectives_give_every_pair_and_a_triple(campaign: list[optuna.Study]) -> None:
    info = pareto_scatter_info(trials_frame(campaign), THREE)
    assert [axis.metric for axis in info.axes] == THREE
    # x, y by axis index: the default is the second objective across, the first up.
    assert info.pairs == [(1, 0), (2, 0), (2, 1)]
    assert info.joined == [False, False, False]  # a 2-D view of a 3-D front is no line
    assert info.triples == [(1, 2, 0)]  # the first objective up (z)


def test_each_device_has_its_own_front(campaign: list[optuna.Study]) -> None:
    trials = trials_frame(campaign)
    info = pareto_scatter_info(trials, THREE)
    assert info.devices == list(DEVICES)
    assert info.front.devices == ["cpu-a"] * 4 + ["gpu-b"] * 4
    assert info.front.trials == [0, 1, 2, 3] * 2
    assert len(info.front.trials) == len(front_frame(trials, THREE))
    assert sum(sum(group.on_front) for group in info.groups) == len(info.front.trials)


def test_other_axes_mark_the_front_and_join_it_only_on_the_objectives(
        trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, OBJECTIVES, axes=[*OBJECTIVES, "process_rss_peak_mb"])
    assert info.axes[2].title == "process_rss_peak_mb [MB] (lower is better)"
    assert info.joined == [True, False, False]
    assert sorted(info.front.trials) == sorted(EXAMPLE_FRONT)
    assert len(info.triples) == 1


def test_provenance_shared_by_a_device_is_said_once(campaign: list[optuna.Study]) -> None:
    info = pareto_scatter_info(trials_frame(campaign), THREE,
                               provenance=trial_provenance(campaign))
    # Same on every trial of the device: in the device's notes, not per point.
    assert info.device_notes["cpu-a"] == ["device_id: cpu-a@node1", "cpu_model: AMD EPYC",
                                          "dse_version: 0.1.0"]
    # Different from trial to trial: a hover field; pid and timestamps are left out.
    assert {"host", "backend_version"} <= set(info.hover_fields)
    assert not {"pid", "window_start", "device_id"} & set(info.hover_fields)
    host = info.hover_fields.index("host")
    assert info.infeasible.hover[0][host] == ("&lt;img src=x onerror=\"alert(1)\"&gt; %{x} "
                                              "&lt;/script&gt;&amp;amp;\n  evil: 1")
    assert info.failed.hover[0][host] == ""  # it recorded no provenance


def test_trial_provenance_reads_the_loops_attributes_and_follows_reuse() -> None:
    study = campaign_study("p", OBJECTIVES)
    metrics = {"accuracy": 0.9, "latency_p99_ms": 1.0}
    record_trial(study, candidate("torch", "fp32", 1.0, 1), metrics=metrics,
                 extra_attrs=_provenance("local-cpu", "torch"))
    record_trial(study, candidate("torch", "fp32", 1.0, 1), metrics=metrics,
                 extra_attrs={"reused_from": 0})
    record_trial(study, candidate("torch", "int8", 1.0, 1), state=TrialState.FAIL,
                 status="infeasible", reason="no int8")
    found = trial_provenance(study)
    assert set(found) == {("local-cpu", 0), ("local-cpu", 1)}
    assert found[("local-cpu", 0)]["device_id"] == "local-cpu@node1"
    assert found[("local-cpu", 1)] == found[("local-cpu", 0)]


def test_a_long_value_is_clipped_in_the_hover() -> None:
    study = campaign_study("long", OBJECTIVES)
    record_trial(study, candidate("torch", "fp32", 1.0, "t" * 500), state=TrialState.FAIL,
                 status="failed", reason="r" * 5000,
                 metrics={"accuracy": 0.5, "latency_p99_ms": 1.0})
    info = pareto_scatter_info(trials_frame(study), OBJECTIVES)
    row = dict(zip(info.hover_fields, info.failed.hover[0], strict=True))
    assert len(row["knob.num_threads"]) == 60 and row["knob.num_threads"].endswith("…")
    assert len(row["outcome"]) == 160


def test_one_objective_gives_an_empty_scatter_that_says_why(trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, ["accuracy"])
    assert info.empty_reason is not None and "two metrics" in info.empty_reason
    assert info.groups == [] and info.pairs == [] and info.devices == []


def test_a_study_of_failures_gives_empty_panels_that_say_why() -> None:
    trials = trials_frame(campaign_study("c", OBJECTIVES))
    scatter = pareto_scatter_info(trials, OBJECTIVES)
    parallel = parallel_coordinates_info(trials, OBJECTIVES)
    assert scatter.empty_reason == "no trial has measured accuracy and latency_p99_ms yet"
    assert parallel.empty_reason == "no measured feasible trial yet"
    assert scatter.front.trials == [] and parallel.dimensions == []


def test_parallel_coordinates_axes_run_from_varying_params_to_objectives(
        trials: pd.DataFrame) -> None:
    info = parallel_coordinates_info(trials, OBJECTIVES)
    assert info.empty_reason is None
    assert info.trials == [0, 1, 2, 3, 8]
    # family, batch_size and arch.depth are the same on every feasible trial: no axis.
    assert [d.label for d in info.dimensions] == [
        "backend", "precision", "arch.width_mult", "knob.intra_op_threads", "knob.num_threads",
        "accuracy [fraction] (higher is better)", "latency_p99_ms [ms] (lower is better)"]
    assert info.color == [0.95, 0.9, 0.85, 0.88, 0.88]
    assert info.color_higher_is_better


def test_parallel_coordinates_encode_categories_with_labels(trials: pd.DataFrame) -> None:
    dims = {d.label: d for d in parallel_coordinates_info(trials, OBJECTIVES).dimensions}
    backend = dims["backend"]
    assert backend.ticktext == ["onnxruntime", "torch"]
    assert backend.values == [0.0, 0.0, 1.0, 1.0, 1.0]
    threads = dims["knob.num_threads"]  # mixed 1 / "auto", absent on onnxruntime trials
    assert threads.ticktext == ["1", "auto", "n/a"]
    assert threads.values == [2.0, 2.0, 0.0, 1.0, 1.0]
    # A number of few values is a choice: categories at even steps, exactly its values as ticks.
    width = dims["arch.width_mult"]
    assert width.ticktext == ["0.5", "1", "2"] and width.tickvals == [0.0, 1.0, 2.0]
    assert width.values == [2.0, 1.0, 0.0, 1.0, 1.0]


def test_an_axis_spanning_decades_is_logarithmic() -> None:
    from dse.report.info import wants_log

    assert wants_log(pd.Series([0.07, 0.5, 23.0]))
    assert not wants_log(pd.Series([0.9, 0.95, 1.0]))
    assert not wants_log(pd.Series([0.0, 5.0, 100.0]))
