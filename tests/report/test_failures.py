"""dse.report.failures: trials without a feasible result, grouped by status and reason, so that
"50 infeasible" in a dashboard's header comes with the reasons."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from dse.report import write_dashboard
from dse.report.failures import (
    NO_REASON,
    VIOLATES,
    failures_info,
    failures_table,
    trial_ranges,
)
from dse.results import trials_frame
from dse.testing import (
    EXAMPLE_CONSTRAINT,
    EXAMPLE_OBJECTIVES,
    campaign_study,
    candidate,
    example_study,
)
from dse.testing import record_trial as record

# A reason past the 80 characters a progress line once kept, and the 160 a hover keeps.
FORWARD = ("build failed: the model's forward returned ImageClassifierOutput, not a tensor of "
           "shape (batch, classes); return its .logits from the factory (the export, the "
           "training and every runtime need the logits tensor itself)")


def _study_of_failures() -> list[optuna.Study]:
    study = campaign_study("byo", EXAMPLE_OBJECTIVES, [EXAMPLE_CONSTRAINT])
    ok = {"accuracy": 0.9, "latency_p99_ms": 1.0, "process_rss_peak_mb": 300.0}
    record(study, candidate("torch", "fp32", 1.0, 1), metrics=ok,
           constraints={EXAMPLE_CONSTRAINT: -3796.0})
    for width in (0.25, 0.5, 0.75, 1.5, 2.0):
        record(study, candidate("torch", "fp32", width, 1), state=TrialState.FAIL,
               status="infeasible", reason=FORWARD)
    # A repeat of an architecture's deterministic failure, carried over rather than retried.
    record(study, candidate("onnxruntime", "int8", 0.25, 1), state=TrialState.FAIL,
           status="infeasible", reason=FORWARD, extra_attrs={"reused_from": 1})
    record(study, candidate("torch", "int8", 1.0, 1), state=TrialState.FAIL, status="failed",
           reason="timed out after 600 s")
    record(study, candidate("torch", "int8", 2.0, 1), state=TrialState.FAIL, status="failed",
           reason="")
    heavy = {**ok, "process_rss_peak_mb": 9000.0}
    record(study, candidate("onnxruntime", "fp32", 2.0, 1), metrics=heavy,
           constraints={EXAMPLE_CONSTRAINT: 9000.0 - 4096})
    record(study, candidate("torch", "fp32", 3.0, 1), state=TrialState.RUNNING, status=None)
    return [study]


def test_trials_are_grouped_by_status_and_the_whole_reason() -> None:
    info = failures_info(trials_frame(_study_of_failures()))
    assert info.empty_reason is None
    first = info.groups[0]
    assert (first.status, first.reason, first.size, first.reused) == (
        "infeasible", FORWARD, 6, 1)
    assert first.trials == [("local-cpu", n) for n in range(1, 7)]
    assert first.devices == ["local-cpu"]
    rest = {(g.status, g.reason): [n for _, n in g.trials] for g in info.groups[1:]}
    assert rest == {("failed", "timed out after 600 s"): [7], ("failed", NO_REASON): [8],
                    (VIOLATES, f"violates {EXAMPLE_CONSTRAINT}"): [9]}
    # The running trial and the feasible one are in no group.


def test_the_table_shows_the_reason_in_full_and_the_trials_as_ranges() -> None:
    table = failures_table(failures_info(trials_frame(_study_of_failures())))
    assert table.columns == ["status", "trials", "reason", "trial numbers by device"]
    assert table.rows[0] == ["infeasible", "6 (1 reused)", FORWARD, "local-cpu: 1–6"]
    assert table.prose == (2, 3)  # wrapped, left-aligned


def test_trial_ranges_join_consecutive_numbers() -> None:
    assert trial_ranges([9, 3, 4, 5, 12, 13]) == "3–5, 9, 12, 13"
    assert trial_ranges([]) == ""


def test_a_campaign_without_failures_says_so() -> None:
    study = campaign_study("fine", EXAMPLE_OBJECTIVES)
    record(study, candidate("torch", "fp32", 1.0, 1),
           metrics={"accuracy": 0.9, "latency_p99_ms": 1.0})
    info = failures_info(trials_frame(study))
    assert info.groups == [] and info.empty_reason == "every finished trial gave a feasible result"


def test_the_dashboard_lists_the_reasons_and_the_header_links_them(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "byo"
    run_dir.mkdir(parents=True)
    study = example_study(storage=f"sqlite:///{run_dir / 'study.db'}", name="byo")
    for width in (0.25, 0.5):
        record(study, candidate("torch", "fp32", width, 1), state=TrialState.FAIL,
               status="infeasible", reason=FORWARD)
    page = write_dashboard(run_dir, tmp_path / "dashboards" / "byo.html").read_text()
    section = page[page.index('<section id="failures">'):]
    section = section[:section.index("</section>")]
    assert f'<td class="prose">{FORWARD.replace(chr(39), "&#x27;")}</td>' in section
    assert '<a href="#failures">' in page
