"""`dse report --serve` on each storage: a waiting page before the campaign writes, then its
dashboard, kept current as trials arrive and live while one runs."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from dse.report.serve import DashboardServer, LiveCampaign
from dse.storage import CampaignStorage
from dse.testing import candidate, example_study, record_trial

REFRESH = '<meta http-equiv="refresh" content="2">'


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        text: str = response.read().decode("utf-8")
        return text


def _trials(page: str) -> int:
    match = re.search(r"<strong>(\d+)</strong> trials", page)
    assert match is not None, page[:2000]
    return int(match.group(1))


def test_a_served_page_follows_the_campaign_in_each_storage(
        tmp_path: Path, storage_line: str) -> None:
    run_dir = tmp_path / "runs" / "live"
    run_dir.mkdir(parents=True)
    storage = CampaignStorage.from_setting(storage_line.split(": ", 1)[1].strip(), run_dir,
                                           where="test")
    with DashboardServer(tmp_path / "dashboards", [LiveCampaign(run_dir, "live", storage)],
                         port=0, refresh_seconds=2).start() as server:
        waiting = _get(server.url + "live.html")
        assert "campaign live has not started yet" in waiting and REFRESH in waiting

        study = example_study(storage=storage.for_writing(), name="live")  # trial 6 runs
        page = _get(server.url + "live.html")
        assert _trials(page) == 9 and REFRESH in page

        record_trial(study, candidate("torch", "fp32", 0.75, 1),
                     metrics={"accuracy": 0.9, "latency_p99_ms": 2.0,
                              "process_rss_peak_mb": 300.0},
                     constraints={"process_rss_peak_mb <= 4096": 300.0 - 4096})
        assert _trials(_get(server.url + "live.html")) == 10
