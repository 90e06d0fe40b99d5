"""The dashboard's duels: the header's line, the panel's rows, and the front table's mark."""

from __future__ import annotations

import optuna

from dse.report.dashboard import dashboard_html, dashboard_info
from dse.report.duels import duels_info
from dse.report.front_table import CONFIGURATION, front_table_info
from dse.results import front_frame, trials_frame
from dse.search.duel_records import DISTURBED, MEASURED, DuelRecord, MetricVerdict, store_record
from dse.testing import campaign_study, candidate, record_trial

OBJECTIVES = ["accuracy", "latency_p50_ms"]


def _study() -> optuna.Study:
    study = campaign_study("duels", OBJECTIVES)
    for width, p50 in [(1.0, 1.00), (1.5, 1.01), (2.0, 3.0)]:
        record_trial(study, candidate("onnxruntime", "fp32", width, 1),
                     metrics={"accuracy": 0.9, "latency_p50_ms": p50,
                              "latency_p50_ci_low_ms": 0.97 * p50,
                              "latency_p50_ci_high_ms": 1.03 * p50})
    store_record(study, DuelRecord(0, 1, MEASURED, verdicts=(
        MetricVerdict("latency_p50_ms", "tie", 0.995, 0.98, 1.01),), rounds=20, seconds=4.0))
    store_record(study, DuelRecord(1, 2, DISTURBED, "other processes used 80% of the CPUs' time",
                                   rounds=7, seconds=4.1))
    return study


def test_the_panel_lists_every_duel_and_whether_it_counts() -> None:
    info = duels_info([_study()])
    assert info is not None
    assert info.headline == ("2 duels: 1 tie, 1 disturbed by other work (timed again on the "
                             "next run)")
    assert info.table.columns == ["trials", "objective", "verdict", "A / B (95% interval)",
                                  "rounds", "seconds", "counts"]
    assert info.table.rows == [
        ["0 vs 1", "p50", "tie", "0.9950 (0.9800–1.0100)", "20", "4.0", "yes"],
        ["1 vs 2", "", "", "", "7", "4.1",
         "no: disturbed (other processes used 80% of the CPUs' time)"]]
    assert duels_info([campaign_study("none", OBJECTIVES)]) is None


def test_the_page_says_it_in_its_header_its_panel_and_its_front_table() -> None:
    study = _study()
    info = dashboard_info(study)
    assert info.summary.duels.startswith("2 duels: 1 tie")
    page = dashboard_html(info)
    assert "duels: 2 duels: 1 tie" in page and 'id="duels"' in page
    table = front_table_info(front_frame(trials_frame(study), OBJECTIVES), OBJECTIVES)
    assert table.columns[:6] == ["trial", "device", "accuracy [fraction] ↑",
                                 "latency_p50_ms [ms] ↓", CONFIGURATION, "duel"]
    assert table.shown == 6 and table.prose == (4, 5)
    assert [row[5] for row in table.rows] == ["p50 tie with #1", "p50 tie with #0"]
