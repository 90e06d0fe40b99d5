"""dse.report.parallel and dse.report.axis_text: categorical parameters drawn as categories with
exactly their values as ticks, objectives with a tick format fit for their values (never
``0.001k``), and axis titles wrapped to the room between axes."""

from __future__ import annotations

import pandas as pd
import pytest

from dse.report.axis_text import format_number, tick_format, wrap_title
from dse.report.parallel import (
    MAX_CATEGORIES,
    log_ticks,
    parallel_coordinates_info,
    parallel_figure,
    title_width,
)
from dse.results import trials_frame
from dse.testing import campaign_study, candidate, record_trial

OBJECTIVES = ["accuracy", "latency_p99_ms", "throughput_sps"]


def _study_of_choices() -> pd.DataFrame:
    """Twelve measured trials over kernel 3/5, batch 1/8/32 and two runtimes, throughputs in
    the thousands, latencies over two decades."""
    study = campaign_study("choices", OBJECTIVES)
    for i in range(12):
        backend = ("onnxruntime", "torch")[i % 2]
        cand = candidate(backend, ("fp32", "int8")[i % 3 == 0], 1.0, 1, (1, 8, 32)[i % 3])
        cand["arch"] = {**cand["arch"], "kernel_size": (3, 5)[i % 4 < 2]}
        record_trial(study, cand, metrics={"accuracy": 0.9 + i / 1000,
                                           "latency_p99_ms": 0.02 * 1.6 ** i,
                                           "throughput_sps": 20_000.0 + 5000 * i})
    return trials_frame(study)


def test_choices_are_categorical_axes_with_exactly_their_values_as_ticks() -> None:
    info = parallel_coordinates_info(_study_of_choices(), OBJECTIVES)
    dims = {d.label: d for d in info.dimensions}
    assert dims["arch.kernel_size"].ticktext == ["3", "5"]
    assert dims["arch.kernel_size"].tickvals == [0.0, 1.0]
    assert dims["batch_size"].ticktext == ["1", "8", "32"]
    assert dims["batch_size"].values[:3] == [0.0, 1.0, 2.0]
    assert dims["backend"].ticktext == ["onnxruntime", "torch"]
    assert dims["precision"].ticktext == ["fp32", "int8"]
    # Drawn: the ticks are the categories, not a number axis of 3.2 ... 4.8.
    figure = parallel_figure(info)
    kernel = next(d for d in figure.data[0].dimensions if d.label.startswith("arch."))
    assert list(kernel.ticktext) == ["3", "5"] and list(kernel.tickvals) == [0.0, 1.0]


def test_a_parameter_of_many_numbers_is_a_number_axis() -> None:
    values = pd.Series([0.1 * i for i in range(MAX_CATEGORIES + 1)])
    from dse.report.parallel import parameter_dimension

    dimension = parameter_dimension("lr", values)
    assert dimension.ticktext is None and dimension.values == values.tolist()
    assert dimension.tickformat == ",.2~f"


def test_objectives_read_in_plain_decimals_and_a_log_axis_over_decades() -> None:
    info = parallel_coordinates_info(_study_of_choices(), OBJECTIVES)
    throughput = next(d for d in info.dimensions if d.label.startswith("throughput_sps"))
    assert throughput.tickformat == ",.1~f"  # 75,000 — not 75k, never 0.001k
    assert throughput.parts == ("throughput_sps", "[samples/s]", "better ↑")
    latency = next(d for d in info.dimensions if d.label.startswith("latency_p99_ms"))
    assert latency.parts == ("latency_p99_ms", "[ms, log]", "better ↓")
    assert latency.ticktext is not None and latency.tickvals is not None
    assert latency.ticktext[0] == "0.02" and "0.1" in latency.ticktext
    assert info.color_format == ",.4~f"  # accuracy 0.900–0.911: the third digit kept


@pytest.mark.parametrize(("values", "expected"), [
    ([0.9833, 0.9889], ",.4~f"), ([500.0, 57_000.0], ",.1~f"), ([0.0164, 0.837], ",.2~f"),
    ([1e-6, 3e-6], ".3~e"), ([2e9, 5e9], ".3~e"), ([], ""),
])
def test_tick_formats_follow_magnitude_and_spread(values: list[float], expected: str) -> None:
    assert tick_format(values) == expected


def test_log_ticks_are_real_values_at_1_2_5_steps() -> None:
    positions, labels = log_ticks(0.02, 3.5)
    assert labels == ["0.02", "0.05", "0.1", "0.2", "0.5", "1", "2", "3.5"]
    assert positions == sorted(positions)
    assert format_number(57_000.0, 0) == "57,000"


def test_titles_wrap_at_dots_and_underscores_within_the_width() -> None:
    assert wrap_title(["knob.num_threads"], 12) == ["knob.", "num_threads"]  # at its levels
    assert wrap_title(["knob.intra_op_threads"], 12) == ["knob.intra_", "op_threads"]
    assert wrap_title(["accuracy", "[fraction]", "better ↑"], 12) == [
        "accuracy", "[fraction]", "better ↑"]
    assert all(len(line) <= 6 for line in wrap_title(["a_very_long_name_indeed"], 6))
    # The room between axes shrinks as axes are added; titles wrap tighter.
    assert title_width(4) > title_width(12) >= 6


def test_every_drawn_title_line_fits_the_room_between_axes() -> None:
    info = parallel_coordinates_info(_study_of_choices(), OBJECTIVES)
    figure = parallel_figure(info)
    width = title_width(len(info.dimensions))
    lines = [line for d in figure.data[0].dimensions for line in d.label.split("<br>")]
    assert lines and all(len(line) <= width for line in lines)
    assert figure.data[0].labelside == "bottom"  # lines grow away from the range labels
