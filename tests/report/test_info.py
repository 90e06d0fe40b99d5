"""dse.report.info: the data behind the Pareto scatter and the parallel-coordinates plot."""

from __future__ import annotations

import pandas as pd
import pytest

from dse.report import parallel_coordinates_info, pareto_scatter_info
from dse.results import front_frame, trials_frame
from dse.results.testing import EXAMPLE_FRONT, EXAMPLE_OBJECTIVES, campaign_study, example_study

OBJECTIVES = list(EXAMPLE_OBJECTIVES)


@pytest.fixture
def trials() -> pd.DataFrame:
    return trials_frame(example_study())


def test_scatter_puts_the_second_objective_across_and_the_first_up(trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, OBJECTIVES)
    assert info.x_axis is not None and info.y_axis is not None
    assert info.x_axis.title == "latency_p99_ms [ms] (lower is better)"
    assert info.y_axis.title == "accuracy [fraction] (higher is better)"
    assert info.empty_reason is None


def test_scatter_groups_feasible_points_by_backend_and_precision(trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, OBJECTIVES)
    assert [(g.name, g.trials) for g in info.groups] == [
        ("onnxruntime/fp32", [0]), ("onnxruntime/int8", [1]), ("torch/fp32", [2, 3, 8])]
    torch = info.groups[2]
    assert torch.x == [1.0, 3.0, 3.0]
    assert torch.y == [0.85, 0.88, 0.88]
    assert torch.on_front == [True, False, False]


def test_scatter_front_matches_front_frame_sorted_by_x(trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, OBJECTIVES)
    front = front_frame(trials, OBJECTIVES)
    assert sorted(info.front.trials) == sorted(front["trial"]) == sorted(EXAMPLE_FRONT)
    assert info.front.x == sorted(info.front.x)
    assert info.front_is_line


def test_infeasible_points_are_shown_apart_and_the_rest_counted(trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, OBJECTIVES)
    assert info.infeasible.trials == [4]
    assert info.infeasible.on_front == [False]
    assert "violates a constraint" in info.infeasible.hover[0]
    assert info.note == ("2 finished trial(s) lack latency_p99_ms or accuracy and are not shown "
                         "(1 failed, 1 infeasible); 1 trial(s) still running or queued.")


def test_hover_lists_the_whole_configuration_with_units(trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, OBJECTIVES)
    hover = info.groups[2].hover[0].split("<br>")
    assert hover[0] == "trial 2 on local-cpu"
    for line in ["family: cnn", "backend: torch", "precision: fp32", "batch_size: 1",
                 "arch.depth: 2", "arch.width_mult: 0.5", "knob.num_threads: 1",
                 "accuracy: 0.85 fraction", "latency_p99_ms: 1 ms", "memory_peak_mb: 400 MB",
                 "energy_j: 0.2"]:
        assert line in hover
    assert not any(line.startswith("knob.intra_op_threads") for line in hover)
    reused = info.groups[2].hover[2]
    assert "measurement reused from trial 3" in reused


def test_scatter_on_other_axes_marks_the_front_but_does_not_join_it(
        trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, OBJECTIVES, x="memory_peak_mb", y="accuracy")
    assert info.x_axis is not None and info.x_axis.title == "memory_peak_mb [MB] (lower is better)"
    assert sorted(info.front.trials) == sorted(EXAMPLE_FRONT)
    assert not info.front_is_line


def test_one_objective_gives_an_empty_scatter_that_says_why(trials: pd.DataFrame) -> None:
    info = pareto_scatter_info(trials, ["accuracy"])
    assert info.empty_reason is not None and "two metrics" in info.empty_reason
    assert info.groups == []


def test_a_study_of_failures_gives_empty_panels_that_say_why() -> None:
    trials = trials_frame(campaign_study("c", OBJECTIVES))
    scatter = pareto_scatter_info(trials, OBJECTIVES)
    parallel = parallel_coordinates_info(trials, OBJECTIVES)
    assert scatter.empty_reason is not None
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
    assert dims["arch.width_mult"].ticktext is None
    assert dims["arch.width_mult"].values == [2.0, 1.0, 0.5, 1.0, 1.0]


def test_an_axis_spanning_decades_is_logarithmic() -> None:
    import pandas as pd

    from dse.report.info import _wants_log

    assert _wants_log(pd.Series([0.07, 0.5, 23.0]))
    assert not _wants_log(pd.Series([0.9, 0.95, 1.0]))
    assert not _wants_log(pd.Series([0.0, 5.0, 100.0]))
