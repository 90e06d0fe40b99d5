"""dse.report.front_table: the front's table reads objectives first — trial, device, the
objectives, the configuration in one cell — and folds every other column."""

from __future__ import annotations

from dse.report.front_table import CONFIGURATION, configuration_text, front_table_info
from dse.report.info import trial_provenance
from dse.report.page import table_html
from dse.results import front_frame, trials_frame
from dse.testing import (
    EXAMPLE_OBJECTIVES,
    campaign_study,
    candidate,
    example_study,
    record_trial,
)

OBJECTIVES = list(EXAMPLE_OBJECTIVES)


def test_trial_device_objectives_and_the_configuration_come_first() -> None:
    trials = trials_frame(example_study())
    table = front_table_info(front_frame(trials, OBJECTIVES), OBJECTIVES)
    assert table.shown == 5
    assert table.columns[:5] == ["trial", "device", "accuracy [fraction] ↑",
                                 "latency_p99_ms [ms] ↓", CONFIGURATION]
    assert table.prose == (4,)
    # Folded: every parameter and every other metric, each on its own column.
    folded = table.columns[5:]
    assert {"backend", "knob.num_threads", "latency_p50_ms [ms]"} <= set(folded)
    assert not set(table.columns[:5]) & set(folded)
    # The parameters the same on every front row are said once, not in every configuration.
    assert table.note == "Same on every row: family cnn, arch.depth 2."
    cells = {row[0]: row[4] for row in table.rows}
    assert cells["0"] == "onnxruntime/fp32 · batch 1 · width_mult 2 · intra_op_threads 1"


def test_the_shown_columns_fit_a_narrow_window_of_a_wide_space() -> None:
    """Forty parameters and metrics still leave the first columns few."""
    study = campaign_study("wide", OBJECTIVES)
    for i in range(3):
        cand = candidate("torch", "fp32", 1.0 + i, 1)
        cand["arch"] = {**cand["arch"], **{f"p{k}": k + i for k in range(20)}}
        metrics = {"accuracy": 0.8 + i / 10, "latency_p99_ms": 1.0 + i,
                   **{f"latency_p{q}_ms": 1.0 + i for q in (50, 90, 95)},
                   "process_rss_peak_mb": 300.0, "model_size_mb": 1.0 + i}
        record_trial(study, cand, metrics=metrics)
    table = front_table_info(front_frame(trials_frame(study), OBJECTIVES), OBJECTIVES)
    assert len(table.columns) > 25 and table.shown == 5
    page = table_html(table)
    head = page[page.index("<tr>"):page.index("</tr>")]
    # The shown columns and the deploy cell; the rest folded.
    assert head.count("<th") - head.count('<th class="more">') == 5 + 1


def test_each_row_carries_its_own_provenance_with_its_yaml() -> None:
    study = campaign_study("p", OBJECTIVES)
    for i, (backend, fact) in enumerate([("torch", {"mode": "eager"}),
                                         ("onnxruntime", {"execution_provider": "CPU"})]):
        record_trial(study, candidate(backend, "fp32", 1.0 + i, 1),
                     metrics={"accuracy": 0.8 + i / 10, "latency_p99_ms": 1.0 + i},
                     extra_attrs={"provenance": {"host": "vm", **fact}})
    front = front_frame(trials_frame(study), OBJECTIVES)
    table = front_table_info(front, OBJECTIVES, trial_provenance(study))
    by_trial = dict(zip((row[0] for row in table.rows), table.provenance or [], strict=True))
    assert by_trial == {"0": ["host: vm", "mode: eager"],
                        "1": ["host: vm", "execution_provider: CPU"]}


def test_configuration_text_names_only_what_varies() -> None:
    record = {"param.backend": "torch", "param.precision": "int8", "param.batch_size": 8,
              "param.arch.kernel_size": 5, "param.arch.depth": 2, "param.knob.num_threads": 2,
              "param.lr": 0.01}
    text = configuration_text(record, ["param.arch.kernel_size", "param.knob.num_threads",
                                       "param.lr"])
    assert text == "torch/int8 · batch 8 · kernel_size 5 · num_threads 2 · lr 0.01"
