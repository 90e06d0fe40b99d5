"""dse.report.serve: the dashboards on localhost, rebuilt from the run folder as the study grows."""

from __future__ import annotations

import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from dse.report.serve import DashboardServer, LiveCampaign, with_refresh
from dse.results.testing import candidate, example_run, record_trial

REFRESH = '<meta http-equiv="refresh" content="2">'


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.headers["Cache-Control"] == "no-store"
        text: str = response.read().decode("utf-8")
        return text


def _trials(page: str) -> int:
    match = re.search(r"<strong>(\d+)</strong> trials", page)
    assert match is not None
    return int(match.group(1))


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return example_run(tmp_path / "runs" / "example")  # nine trials, one still running


@pytest.fixture
def server(tmp_path: Path, run_dir: Path) -> Iterator[DashboardServer]:
    campaigns = [LiveCampaign(run_dir, "example"),
                 LiveCampaign(tmp_path / "runs" / "later", "later")]
    with DashboardServer(tmp_path / "dashboards", campaigns, port=0,
                         refresh_seconds=2).start() as running:
        yield running


def test_serves_on_loopback_only_the_index_and_a_live_page(server: DashboardServer) -> None:
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", server.url)
    index = _get(server.url)
    assert '<a href="example.html">' in index and REFRESH in index
    page = _get(server.url + "example.html")
    assert "<title>example</title>" in page
    assert _trials(page) == 9
    assert REFRESH in page  # just written, and trial 6 is still running
    # On disk the page has no refresh: opened as a file, it stays still.
    assert REFRESH not in (server.dashboards_dir / "example.html").read_text(encoding="utf-8")


def test_a_reload_shows_the_trials_added_since(server: DashboardServer, run_dir: Path) -> None:
    assert _trials(_get(server.url + "example.html")) == 9
    study = optuna.load_study(study_name="example", storage=f"sqlite:///{run_dir / 'study.db'}")
    record_trial(study, candidate("torch", "fp32", 0.75, 1),
                 metrics={"accuracy": 0.9, "latency_p99_ms": 2.0, "process_rss_peak_mb": 300.0},
                 constraints={"process_rss_peak_mb <= 4096": 300.0 - 4096})
    assert _trials(_get(server.url + "example.html")) == 10
    assert _trials((server.dashboards_dir / "example.html").read_text(encoding="utf-8")) == 10


def test_a_campaign_not_started_gets_a_waiting_page_then_its_dashboard(
        server: DashboardServer, tmp_path: Path) -> None:
    waiting = _get(server.url + "later.html")
    assert "campaign later has not started yet" in waiting and REFRESH in waiting
    example_run(tmp_path / "runs" / "later")
    assert _trials(_get(server.url + "later.html")) == 9


def test_a_finished_campaign_is_served_without_refresh(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "done"
    example_run(run_dir)
    storage = f"sqlite:///{run_dir / 'study.db'}"
    study = optuna.load_study(study_name="done", storage=storage)
    running = [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    for trial in running:  # finish the running trial: nothing of the campaign runs any more
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
    an_hour_ago = time.time() - 3600
    os.utime(run_dir / "study.db", (an_hour_ago, an_hour_ago))
    with DashboardServer(tmp_path / "dashboards", [LiveCampaign(run_dir)], port=0,
                         refresh_seconds=2).start() as server:
        page = _get(server.url + "done.html")
        assert _trials(page) == 9 and REFRESH not in page
        assert REFRESH not in _get(server.url)


def test_a_campaign_with_a_running_trial_stays_live_however_long_ago_it_wrote(
        tmp_path: Path, run_dir: Path) -> None:
    an_hour_ago = time.time() - 3600
    os.utime(run_dir / "study.db", (an_hour_ago, an_hour_ago))  # trial 6 is still running
    with DashboardServer(tmp_path / "dashboards", [LiveCampaign(run_dir)], port=0,
                         refresh_seconds=2).start() as server:
        assert REFRESH in _get(server.url + "example.html")


def test_other_files_are_served_as_they_are_and_missing_ones_are_404(
        server: DashboardServer) -> None:
    (server.dashboards_dir / "README.md").write_text("# dashboards\n")
    with urllib.request.urlopen(server.url + "README.md", timeout=30) as response:
        assert response.read() == b"# dashboards\n"
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(server.url + "nothing.html", timeout=30)
    assert error.value.code == 404


def test_refresh_tag_goes_first_in_the_head() -> None:
    assert with_refresh(b"<html><head><title>t</title></head></html>", 5) == (
        b'<html><head>\n<meta http-equiv="refresh" content="5"><title>t</title></head></html>')
