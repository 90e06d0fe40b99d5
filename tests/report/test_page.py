"""dse.report.page: sortable tables, the YAML of each front row, the device comparison; and, in
headless Chromium, that sorting, the scatter's menus and hostile text behave."""

from __future__ import annotations

import time
from pathlib import Path

import optuna
import pytest

from dse.report.front_table import front_table_info
from dse.report.info import pareto_scatter_info, trial_provenance
from dse.report.page import Section, comparison_html, header_html, page_html, table_html
from dse.report.render import figure_html, scatter3d_figure, scatter_figure
from dse.report.summary import device_comparison_info, summary_info
from dse.report.table_info import TableInfo
from dse.results import front_frame, trials_frame
from tests.report.test_browser import CHROMIUM, Chromium
from tests.report.test_info import BOUND, HOSTILE, THREE, device_studies


@pytest.fixture(scope="module")
def campaign() -> list[optuna.Study]:
    return device_studies()


def test_a_table_sorts_on_a_click_on_its_head_and_escapes_every_cell() -> None:
    page = table_html(TableInfo(["trial", "<b>x</b>"], [["1", HOSTILE]], None,
                                note="one left out"))
    assert page.startswith('<div class="tablebox"><div class="table"><table class="front">\n'
                           '<thead onclick="var th=event.target')
    assert "<th>trial</th><th>&lt;b&gt;x&lt;/b&gt;</th>" in page
    assert "<img" not in page and "&lt;img src=x" in page
    assert page.endswith('</table></div></div>\n<p class="note">one left out</p>')


def test_front_rows_carry_their_yaml_folded(campaign: list[optuna.Study]) -> None:
    trials = trials_frame(campaign)
    table = front_table_info(front_frame(trials, THREE), THREE, trial_provenance(campaign))
    page = table_html(table)
    assert "<th>deploy</th>" in page
    assert page.count('<td class="yaml"><details><summary>YAML</summary><pre>') == len(table.rows)
    assert "<pre># cnn · trial 0 on cpu-a\nbaseline:\n  arch:\n" in page
    # Each row's own provenance, folded beside its YAML.
    assert page.count("<details><summary>provenance</summary><pre>device_id: ") == len(table.rows)


def test_the_columns_after_the_first_are_folded_behind_a_toggle() -> None:
    table = TableInfo(["trial", "objective", "parameter", "metric"], [["1", "2", "3", "4"]], None,
                      shown=2)
    page = table_html(table)
    assert "<th>trial</th><th>objective</th><th class=\"more\">parameter</th>" in page
    assert "<td>2</td><td class=\"more\">3</td><td class=\"more\">4</td>" in page
    assert '<label class="unfold"><input type="checkbox"> show all 4 columns' in page
    assert "show all" not in table_html(table._replace(shown=None))


def test_the_comparison_shows_devices_then_architectures(campaign: list[optuna.Study]) -> None:
    page = comparison_html(device_comparison_info(trials_frame(campaign), THREE))
    assert page.count('<table class="front">') == 2
    assert page.index("<th>best accuracy [fraction]</th>") < page.index(
        "<th>cpu-a: accuracy [fraction]</th>")


def _page(studies: list[optuna.Study], path: Path) -> Path:
    trials = trials_frame(studies)
    front = front_frame(trials, THREE)
    info = pareto_scatter_info(trials, THREE, provenance=trial_provenance(studies), front=front)
    sections = [
        Section("Pareto front", figure_html(scatter_figure(info), "dse-pareto", True)),
        Section("In 3-D", figure_html(scatter3d_figure(info), "dse-pareto-3d", False)),
        Section("Front", table_html(front_table_info(front, THREE))),
        Section("Devices", comparison_html(device_comparison_info(trials, THREE, front))),
    ]
    path.write_text(page_html("t", summary_info(trials, "t", THREE, [BOUND]), sections),
                    encoding="utf-8")
    return path


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium on PATH (Debian: apt-get install "
                                              "chromium; .ci/run installs it)")
def test_in_a_browser_tables_sort_menus_switch_and_hostile_text_stays_text(
        campaign: list[optuna.Study], tmp_path: Path) -> None:
    page = _page(campaign, tmp_path / "page.html")
    assert CHROMIUM is not None
    browser = Chromium(CHROMIUM, tmp_path / "profile")
    try:
        browser.open_page()
        browser.load(page.as_uri())
        deadline = time.monotonic() + 30
        while not browser.evaluate("!!document.getElementById('dse-pareto-3d')._fullLayout"):
            assert time.monotonic() < deadline, "the figures were never drawn"
            time.sleep(0.1)
        # Sort the front table by latency (a click, then another for descending).
        latencies = browser.evaluate("""(() => {
            const table = document.querySelector('table.front');
            const th = [...table.tHead.rows[0].cells].find(c => c.textContent.startsWith('lat'));
            const column = () => [...table.tBodies[0].rows].map(
                r => Number(r.cells[th.cellIndex].textContent));
            th.click(); const up = column(); th.click();
            return [up, column(), th.getAttribute('aria-sort')];
        })()""")
        up, down, state = latencies
        assert up == sorted(up) and down == sorted(up, reverse=True) and state == "descending"
        # The buttons the menus hold do what a click on them does.
        shown = browser.evaluate("""(async () => {
            const gd = document.getElementById('dse-pareto');
            const [pairs, devices] = gd.layout.updatemenus;
            await Plotly.update(gd, ...pairs.buttons[2].args);
            await Plotly.restyle(gd, ...devices.buttons[1].args);
            return [gd._fullLayout.xaxis.title.text,
                    gd.data.filter(t => t.visible).map(t => [t.name, t.x.length])];
        })()""")
        assert shown[0] == "process_rss_peak_mb [MB] (lower is better)"
        assert ["Pareto front", 4] in shown[1]
        hover = browser.evaluate("""(() => {
            const gd = document.getElementById('dse-pareto');
            const i = gd.data.findIndex(t => t.name === 'infeasible' && t.visible);
            Plotly.Fx.hover(gd, [{curveNumber: i, pointNumber: 0}]);
            return document.querySelector('#dse-pareto .hovertext').textContent;
        })()""")
        assert "knob.num_threads: <img src=x onerror=\"alert(1)\"> %{x} </script>" in hover
        assert browser.evaluate("document.querySelectorAll('img').length") == 0
        assert browser.errors() == []
        assert all(url.startswith(("file:", "data:", "blob:"))
                   for url in browser.requested_urls())
    finally:
        browser.close()


def test_the_header_says_how_many_trials_reused_an_earlier_measurement(
        campaign: list[optuna.Study]) -> None:
    trials = trials_frame(campaign)
    assert "repeat" not in header_html(summary_info(trials, "t", THREE, [BOUND]))
    # Two trials proposed a candidate measured before: counted, but nothing new was measured.
    trials.loc[trials.index[:2], "reused_from"] = 0
    header = header_html(summary_info(trials, "t", THREE, [BOUND]))
    assert (f"<strong>{len(trials)}</strong> trials:" in header
            and "; 2 of them reused an earlier trial&#x27;s result, measuring nothing" in header)
