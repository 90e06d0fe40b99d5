"""dse.report.dashboard: one self-contained, deterministic, offline HTML page per campaign."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs

from dse.report import dashboard_info, write_dashboard
from dse.results import front_frame, load_study, trials_frame
from dse.testing import EXAMPLE_OBJECTIVES, campaign_study, example_run


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return example_run(tmp_path / "runs" / "example")


@pytest.fixture(scope="module")
def plotlyjs() -> str:
    return str(get_plotlyjs())


def test_dashboard_is_one_offline_file_with_plotlyjs_once(run_dir: Path, tmp_path: Path,
                                                          plotlyjs: str) -> None:
    out = write_dashboard(run_dir, tmp_path / "dashboards" / "example.html")
    assert out == tmp_path / "dashboards" / "example.html"
    page = out.read_text(encoding="utf-8")
    assert page.count(plotlyjs) == 1
    figures = page.count('class="plotly-graph-div"')
    assert figures >= 3  # front, parameters, hypervolume history at least
    assert page.count("<script") == 2 + figures  # config, plotly.js, one per figure
    outside_plotlyjs = page.replace(plotlyjs, "")
    assert not re.search(r"<script[^>]*\bsrc=", outside_plotlyjs)
    assert not re.search(r"""(src|href)=["']?https?://""", outside_plotlyjs)
    assert [p.name for p in out.parent.iterdir()] == ["example.html"]


def test_dashboard_shows_header_front_and_every_front_configuration(run_dir: Path,
                                                                    tmp_path: Path) -> None:
    page = write_dashboard(run_dir, tmp_path / "d.html").read_text(encoding="utf-8")
    assert "<title>example — dse dashboard</title>" in page
    assert "9</strong> trials: 6 ok, 1 infeasible, 1 failed, 1 running" in page
    assert "maximize accuracy [fraction]; minimize latency_p99_ms [ms]" in page
    assert "process_rss_peak_mb &lt;= 4096" in page
    table = page[page.index('<table class="front">'):page.index("</table>")]
    assert table.count("<tr>") == 1 + 3  # heading and one row per front trial
    # Objectives first, with which way is better; every parameter on its own, folded.
    assert "<th>latency_p99_ms [ms] ↓</th>" in table
    assert '<th class="more">knob.num_threads</th>' in table
    # The header's counts link to why trials failed; the failures section is there.
    assert '(<a href="#failures">3 without a feasible result: why</a>)' in page
    assert '<section id="failures">\n<h2>Failed and infeasible trials, by reason</h2>' in page


def test_scatter_of_the_dashboard_holds_the_front(run_dir: Path) -> None:
    study = load_study(run_dir)
    info = dashboard_info(study)
    front = front_frame(trials_frame(study), EXAMPLE_OBJECTIVES)
    assert len(info.scatter.front.trials) == len(front) == len(info.front.rows)
    assert sum(sum(group.on_front) for group in info.scatter.groups) == len(front)


def test_same_study_gives_the_same_bytes(run_dir: Path, tmp_path: Path) -> None:
    first = write_dashboard(run_dir, tmp_path / "a.html", title="t").read_bytes()
    second = write_dashboard(run_dir, tmp_path / "b.html", title="t").read_bytes()
    assert first == second


def test_a_campaign_without_results_still_gets_a_page(tmp_path: Path, plotlyjs: str) -> None:
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    campaign_study("empty", EXAMPLE_OBJECTIVES, storage=f"sqlite:///{run_dir / 'study.db'}")
    page = write_dashboard(run_dir, tmp_path / "e.html").read_text(encoding="utf-8")
    assert "no measured feasible trial yet" in page
    assert "no feasible trial has been measured yet" in page
    assert plotlyjs not in page  # nothing to draw, nothing to load
