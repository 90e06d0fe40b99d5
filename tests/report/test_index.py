"""dse.report.index: dashboards/index.html lists every campaign dashboard of the folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from dse.report import write_dashboard
from dse.report.index import (
    INDEX_FILE,
    UNKNOWN,
    dashboard_entries,
    dashboard_meta_html,
    read_dashboard_meta,
    write_index,
)
from dse.testing import example_run
from tests.replay_campaign import replay_campaign

# A page as an older dse wrote it: no dse meta tags in its head.
OLDER_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>legacy — dse dashboard</title>
</head>
<body><h1>legacy</h1></body>
</html>
"""


def _dashboard(tmp_path: Path, campaign: str, devices: list[str]) -> Path:
    """A real dashboard of the nine-trial example study, its head carrying the index's tags."""
    run_dir = example_run(tmp_path / "runs" / campaign)
    page = write_dashboard(run_dir, tmp_path / "dashboards" / f"{campaign}.html", title=campaign)
    text = page.read_text(encoding="utf-8")
    own = dashboard_meta_html(campaign, 9, ["local-cpu"])
    assert own in text  # the page carries its study's own tags; other devices replace them here
    page.write_text(text.replace(own, dashboard_meta_html(campaign, 9, devices), 1),
                    encoding="utf-8")
    return page


def _rows(index: str) -> list[list[str]]:
    body = index[index.index("<tbody>"):index.index("</tbody>")]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body)]


def test_a_dashboards_meta_tags_read_back(tmp_path: Path) -> None:
    page = _dashboard(tmp_path, "alpha", ["local-cpu", "h100-sxm"])
    meta = read_dashboard_meta(page)
    assert meta.title == "alpha"
    assert (meta.campaign, meta.trials, meta.devices) == ("alpha", 9, ["local-cpu", "h100-sxm"])


def test_index_lists_every_dashboard_with_trials_devices_time_and_link(tmp_path: Path) -> None:
    alpha = _dashboard(tmp_path, "alpha", ["local-cpu"])
    _dashboard(tmp_path, "beta", ["local-cpu", "h100-sxm"])
    folder = alpha.parent
    os.utime(alpha, (1_700_000_000, 1_700_000_000))
    (folder / ".gamma.html.tmp").write_text("half a page")  # an atomic write in progress
    (folder / "README.md").write_text("# dashboards\n")

    index = write_index(folder)

    assert index == folder / INDEX_FILE
    page = index.read_text(encoding="utf-8")
    assert _rows(page) == [
        ['<a href="alpha.html">alpha</a>', "", "9", "local-cpu",
         datetime.fromtimestamp(1_700_000_000).isoformat(sep=" ", timespec="seconds")],
        ['<a href="beta.html">beta</a>', "", "9", "local-cpu, h100-sxm",
         _rows(page)[1][4]],
    ]
    assert "2 campaign dashboard(s)" in page
    # Offline and self-contained: no scripts, nothing fetched.
    assert "<script" not in page and not re.search(r"(src|href)=\"https?:", page)


def test_index_is_rewritten_with_the_folder(tmp_path: Path) -> None:
    folder = _dashboard(tmp_path, "alpha", ["local-cpu"]).parent
    write_index(folder)
    _dashboard(tmp_path, "beta", ["local-cpu"])
    assert [e.name for e in dashboard_entries(folder)] == ["alpha", "beta"]
    assert len(_rows(write_index(folder).read_text(encoding="utf-8"))) == 2


def test_a_page_without_meta_is_listed_by_file_name_with_unknown_figures(tmp_path: Path) -> None:
    (tmp_path / "legacy campaign.html").write_text(OLDER_PAGE, encoding="utf-8")
    page = write_index(tmp_path).read_text(encoding="utf-8")
    [row] = _rows(page)
    assert row[:4] == ['<a href="legacy%20campaign.html">legacy campaign</a>',
                       "legacy — dse dashboard", UNKNOWN, UNKNOWN]


def test_an_empty_folder_gets_an_index_that_says_so(tmp_path: Path) -> None:
    page = write_index(tmp_path / "dashboards").read_text(encoding="utf-8")
    assert "no dashboards yet" in page and "<table" not in page


def test_a_fifo_or_a_link_out_named_like_a_dashboard_is_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "dashboards"
    folder.mkdir()
    (folder / "real.html").write_text(OLDER_PAGE)
    os.mkfifo(folder / "pipe.html")  # reading it would block for ever
    outside = tmp_path / "secret.html"
    outside.write_text(OLDER_PAGE.replace("legacy", "secret"))
    (folder / "out.html").symlink_to(outside)
    assert [entry.file for entry in dashboard_entries(folder)] == ["real.html"]


def _experiment(root: Path, description: str, space_description: str) -> Path:
    """An experiment file and its search space, each with a description or none."""
    (root / "search_spaces").mkdir(parents=True)
    (root / "experiments").mkdir()
    (root / "search_spaces" / "s.yaml").write_text(
        f"name: s\ndescription: {space_description!r}\n" if space_description else "name: s\n")
    experiment = root / "experiments" / "e.yaml"
    experiment.write_text("name: e\nsearch_space: ../search_spaces/s.yaml\n"
                          + (f"description: {description!r}\n" if description else ""))
    return experiment


def test_the_index_shows_the_experiments_description_else_the_spaces(tmp_path: Path) -> None:
    run_dir = example_run(tmp_path / "runs" / "example")
    dashboards = tmp_path / "dashboards"
    own = _experiment(tmp_path / "a", "CNNs on the local CPU <fast>", "the space's words")
    write_dashboard(run_dir, dashboards / "own.html", title="own", experiment=own)
    spaces = _experiment(tmp_path / "b", "", "A user's MLP on digits")
    write_dashboard(run_dir, dashboards / "space.html", title="space", experiment=spaces)
    write_dashboard(run_dir, dashboards / "none.html", title="none")
    index = write_index(dashboards).read_text(encoding="utf-8")
    assert "<th>description</th>" in index
    # One campaign's page written three times: rows told apart by the file they link.
    described = {re.findall(r'href="([^"]+)"', row[0])[0]: row[1] for row in _rows(index)}
    assert described == {"own.html": "CNNs on the local CPU &lt;fast&gt;",
                         "space.html": "A user&#x27;s MLP on digits", "none.html": "none"}
    page = (dashboards / "own.html").read_text(encoding="utf-8")
    assert '<p class="description">CNNs on the local CPU &lt;fast&gt;</p>' in page
    assert read_dashboard_meta(dashboards / "space.html").description == "A user's MLP on digits"


def test_dse_run_lists_its_campaign_in_the_index_with_the_description(tmp_path: Path) -> None:
    """As a user meets it: `dse run` of an experiment with a description (a replay campaign: a
    few seconds, no hardware), then the index the run leaves beside its dashboard."""
    experiment = replay_campaign(tmp_path, "described", 3, extra=(
        "description: ZDT1 replayed from a recorded table\ndashboards_dir: ../dashboards\n"))
    done = subprocess.run([sys.executable, "-m", "dse.cli", "run", str(experiment)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    index = (tmp_path / "dashboards" / INDEX_FILE).read_text(encoding="utf-8")
    (row,) = _rows(index)
    assert row[:3] == ['<a href="described.html">described</a>',
                       "ZDT1 replayed from a recorded table", "3"]
