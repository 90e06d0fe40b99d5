"""The dashboard in a real browser: headless Chromium opens a real campaign's page offline, logs no
error, and the Pareto panel draws exactly the front; at a laptop's and a desktop's window no two
titles of a figure overlap, the front's table fits, and the whole page is kept as a screenshot
($DSE_SCREENSHOT_DIR); a profile page draws its figures likewise (and its screenshot,
``docs/profile-page.png``, is taken here: see
:func:`test_a_profile_page_draws_its_figures_without_errors`).

Chromium is driven over the Chrome DevTools Protocol on ``--remote-debugging-pipe`` (NUL-separated
JSON on file descriptors 3 and 4), so the test needs nothing beyond the standard library.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dse.app.api import CampaignResult, run_campaign
from dse.report.failures import failures_info
from dse.report.profile_info import TOP_OPS
from dse.report.profile_page import profile_page_name, write_profile_page
from dse.results import front_frame, load_campaign, trials_frame
from tests.conftest import LOCAL_CPU
from tests.report.test_profile_page import DRAWN, write_profile

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Chromium on PATH (Debian: apt-get install chromium; "
                             ".ci/run installs it)")

# The front traces' name (dse.report.info) and the panels' div ids (dse.report.dashboard).
FRONT_TRACE = "Pareto front"
FIGURES = ("dse-pareto", "dse-parallel")
TIMEOUT_S = 30.0
# The profile page's figures (dse.report.profile_page), and where its screenshot goes when asked.
PROFILE_FIGURES = ("dse-profile-top", "dse-profile-roofline", "dse-profile-host-device")
SCREENSHOT_ENV = "DSE_PROFILE_SCREENSHOT"


class Chromium:
    """Headless Chromium and one page, spoken to over the DevTools pipe.

    Every event that arrives while waiting for a reply is kept in ``events``, so nothing the page
    logged between two commands is lost.
    """

    def __init__(self, executable: str, profile: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"]
        # The browser reads commands on fd 3 and writes replies on fd 4. The pipe ends go in as
        # stdin and stdout, and a shell moves them there (Popen cannot place a descriptor at a
        # chosen number, and a POSIX shell redirects only single-digit ones).
        self.process = subprocess.Popen(
            ["sh", "-c", 'exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null', executable, *args],
            stdin=to_browser_r, stdout=from_browser_w, stderr=subprocess.DEVNULL,
            start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._last_id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""

    def call(self, method: str, params: dict[str, Any] | None = None,
             page: bool = True) -> dict[str, Any]:
        """Send a command (to the page's session unless ``page`` is false); return its result."""
        self._send(method, params, page)
        while True:
            reply = self._receive()
            if reply.get("id") == self._last_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def open_page(self) -> None:
        """A new blank page, attached, reporting console, exceptions, log and network."""
        target = self.call("Target.createTarget", {"url": "about:blank"}, page=False)
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target["targetId"], "flatten": True},
                                 page=False)["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable")

    def load(self, url: str) -> None:
        """Navigate and wait for this navigation's load event (not an earlier page's)."""
        before = len(self.events)
        self.call("Page.navigate", {"url": url})
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events[before:]):
            self.events.append(self._receive())

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited when it is a promise)."""
        reply = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                               "awaitPromise": True})
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression!r} threw: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def errors(self) -> list[str]:
        """What the page reported as an error: console.error, uncaught exceptions, error-level
        log entries (failed loads, security and rendering errors)."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                found.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                    for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append("exception: " + str(details.get("exception", {}).get(
                    "description", details.get("text"))))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(f"log ({params['entry']['source']}): {params['entry']['text']}")
        return found

    def wait_drawn(self, div_ids: tuple[str, ...]) -> None:
        """Until plotly has laid out every figure, then one more frame for late errors."""
        drawn = " && ".join(f"!!document.getElementById('{d}')._fullLayout" for d in div_ids)
        deadline = time.monotonic() + TIMEOUT_S
        while not self.evaluate(drawn):
            assert time.monotonic() < deadline, f"the figures {div_ids} were never drawn"
            time.sleep(0.05)
        self.evaluate("new Promise(done => requestAnimationFrame(() => done(true)))")

    def screenshot(self, path: Path, width: int) -> Path:
        """The whole page, ``width`` CSS pixels wide, as a PNG at ``path``."""
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        shot = self.call("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        """Ask the browser to quit; kill it (its own process group: it and the renderers it
        started) if it has not within 10 s."""
        try:
            self._send("Browser.close", None, page=False)
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)

    def _send(self, method: str, params: dict[str, Any] | None, page: bool) -> None:
        self._last_id += 1
        message: dict[str, Any] = {"id": self._last_id, "method": method,
                                   "params": params or {}}
        if page and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")

    def _receive(self) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [],
                                        max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"Chromium sent nothing for {TIMEOUT_S:.0f} s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError(f"Chromium closed the DevTools pipe (exit code "
                                   f"{self.process.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    assert CHROMIUM is not None
    chromium = Chromium(CHROMIUM, tmp_path / "chromium-profile")
    try:
        chromium.open_page()
        yield chromium
    finally:
        chromium.close()


# A small real campaign whose page has every panel: categorical parameters (kernel 3/5, batch
# 1/8, two runtimes, two precisions), three objectives (a 3-D front, a maximised throughput), a
# bound on the artifact's size that some runtime/precision pairs break, CPU telemetry.
LOOK_SPACE = """\
name: look
description: A small CNN on digits; kernel, runtime, precision and batch searched.
model:
  family: cnn
  arch: {num_stages: [1], depth: [1], width_mult: [0.5], kernel_size: [3, 5], expand_ratio: [2]}
training: {epochs: 2, batch_size: 128}
deployment:
  backends:
    onnxruntime: {knobs: {intra_op_threads: [1]}}
    torch: {knobs: {num_threads: [1]}}
  precisions: [fp32, int8]
  batch_sizes: [1, 8]
objectives:
  - metric: accuracy
  - metric: latency_p99_ms
  - metric: throughput_sps
constraints:
  - model_size_mb <= 0.0265
"""
LOOK_EXPERIMENT = """\
name: look
description: How the dashboard looks on a small real campaign (tests/report/test_browser.py).
search_space: ../search_spaces/look.yaml
devices: [../hw_profiles/local-cpu.yaml]
sampler: {name: random, seed: 1}
budget: {trials: 5}
dashboards_dir: ../dashboards
measurement: {warmup_max_seconds: 0.1, min_iters: 5, min_seconds: 0.0, max_seconds: 0.4,
              target_rel_ci: 0.05, precision: {p50: 50, p99: 50},
              non_ok_on_front: true, second_looks: 0}
"""
# The viewports a reader's window has: a laptop's and a desktop's.
VIEWPORTS = ((1366, 768), (1920, 1080))
SCREENSHOT_DIR_ENV = "DSE_SCREENSHOT_DIR"
# What plotly draws as a title, in every figure kind the page has: 2-D axis titles (one group
# per axis: g-xtitle, g-x2title, ...), figure and legend titles, colour-bar titles, annotations
# (subplot titles, notes), the parallel coordinates' axis titles. A 3-D scene's axis titles are
# drawn in WebGL, with no element to measure: the 3-D panel's screenshot shows them.
TITLE_SELECTOR = ('g[class^="g-"][class$="title"] text, .legendtitletext, .cbtitle text, '
                  ".annotation-text, .axis-title")
OVERLAPS_JS = """(() => {
    const found = [];
    for (const figure of document.querySelectorAll('.plotly-graph-div')) {
        const boxes = [...figure.querySelectorAll(SELECTOR)]
            .map(e => [e.textContent, e.getBoundingClientRect()])
            .filter(([text, r]) => text.trim() && r.width > 0 && r.height > 0);
        boxes.forEach(([a, p], i) => boxes.slice(i + 1).forEach(([b, q]) => {
            if (p.left < q.right - 1 && q.left < p.right - 1 &&
                p.top < q.bottom - 1 && q.top < p.bottom - 1) found.push([figure.id, a, b]);
        }));
    }
    return found;
})()""".replace("SELECTOR", json.dumps(TITLE_SELECTOR))


@pytest.fixture(scope="module")
def look_campaign(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> CampaignResult:
    """The campaign, run once for the module's tests (real trials: train, export, measure)."""
    root = tmp_path_factory.mktemp("look")
    for folder, name, text in [("search_spaces", "look.yaml", LOOK_SPACE),
                               ("hw_profiles", "local-cpu.yaml", LOCAL_CPU),
                               ("experiments", "look.yaml", LOOK_EXPERIMENT)]:
        (root / folder).mkdir(exist_ok=True)
        (root / folder / name).write_text(text)
    result = run_campaign(root / "experiments" / "look.yaml")
    assert result.dashboard is not None
    return result


def _open(browser: Chromium, page: Path, viewport: tuple[int, int]) -> None:
    width, height = viewport
    browser.call("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    browser.load(page.as_uri())
    browser.wait_drawn(tuple(browser.evaluate(
        "[...document.querySelectorAll('.plotly-graph-div')].map(d => d.id)")))


def test_a_real_campaigns_dashboard_loads_without_errors_and_draws_the_front(
        look_campaign: CampaignResult, browser: Chromium) -> None:
    assert look_campaign.dashboard is not None
    front = front_frame(trials_frame(load_campaign(look_campaign.run_dir)),
                        look_campaign.objectives)
    assert len(front) >= 1

    _open(browser, look_campaign.dashboard, VIEWPORTS[0])
    assert browser.errors() == []
    assert all(url.startswith(("file:", "data:", "blob:")) for url in browser.requested_urls())
    traces = browser.evaluate(
        "document.getElementById('dse-pareto').data"
        ".map(t => ({name: t.name, points: t.x.length}))")
    # One front trace per device (a campaign of several devices has one front each).
    front_points = [t["points"] for t in traces if t["name"] == FRONT_TRACE]
    assert front_points and sum(front_points) == len(front)
    # Every panel is there: the three objectives' 3-D view, the failures table (some
    # runtime/precision pairs break the size bound), one row per status and reason.
    assert browser.evaluate("!!document.getElementById('dse-pareto-3d')._fullLayout")
    groups = failures_info(trials_frame(load_campaign(look_campaign.run_dir))).groups
    assert browser.evaluate("document.querySelectorAll('#failures tbody tr').length") == len(
        groups)
    # The front's table shows its first columns; one click shows the folded rest.
    shown = """[...document.querySelectorAll('#front thead th')]
               .filter(th => getComputedStyle(th).display !== 'none').length"""
    first = browser.evaluate(shown)
    browser.evaluate("document.querySelector('#front .unfold input').click()")
    assert browser.evaluate(shown) > first + 10


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=lambda v: f"{v[0]}x{v[1]}")
def test_at_each_viewport_no_title_overlaps_another_and_the_page_is_shot(
        look_campaign: CampaignResult, browser: Chromium, tmp_path: Path,
        viewport: tuple[int, int]) -> None:
    """Looked at, not just loaded: no two titles of a figure (axis, legend, colour bar,
    annotation, parallel-coordinates axis) overlap; the front's table fits the window (its
    first columns: the rest are folded); and the whole page is kept as a PNG — in
    $DSE_SCREENSHOT_DIR when set (CI keeps it as an artifact), else in the test's folder."""
    assert look_campaign.dashboard is not None
    _open(browser, look_campaign.dashboard, viewport)
    assert browser.errors() == []
    assert browser.evaluate(OVERLAPS_JS) == []
    table = browser.evaluate("(() => { const r = document.querySelector('#front table')"
                             ".getBoundingClientRect(); return [r.right, "
                             "document.documentElement.clientWidth]; })()")
    assert table[0] <= table[1], f"the front's table is {table[0]} px wide in a {table[1]} window"
    folder = Path(os.environ.get(SCREENSHOT_DIR_ENV) or tmp_path)
    shot = browser.screenshot(folder / f"dashboard-{viewport[0]}x{viewport[1]}.png",
                              viewport[0])
    print(f"dashboard screenshot: {shot}")
    assert shot.read_bytes().startswith(b"\x89PNG")


def test_a_profile_page_draws_its_figures_without_errors(tmp_path: Path,
                                                        browser: Chromium) -> None:
    """A GPU trial's profile (every figure drawn) opens offline, logs no error, and its roofline
    holds exactly the operators with a place on it. The page's screenshot goes to the path in
    $DSE_PROFILE_SCREENSHOT (``docs/profile-page.png``, shown in docs/profiling.md), else to the
    test's folder."""
    folder = write_profile(tmp_path / "runs" / "example" / "profiles" / "a100" / "trial-00001",
                           gpu=True, device="a100")
    page = write_profile_page(folder, tmp_path / "dashboards"
                              / profile_page_name("example", "a100", 1))
    width = 1280
    browser.call("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False})

    browser.load(page.as_uri())
    browser.wait_drawn(PROFILE_FIGURES)

    assert browser.errors() == []
    assert all(url.startswith(("file:", "data:", "blob:")) for url in browser.requested_urls())
    drawn = browser.evaluate(
        "[document.getElementById('dse-profile-roofline').data"
        ".filter(t => t.mode === 'markers').reduce((n, t) => n + t.x.length, 0),"
        " document.getElementById('dse-profile-top').data.reduce((n, t) => n + t.y.length, 0)]")
    assert drawn == [len(DRAWN), TOP_OPS]
    shot = browser.screenshot(Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "profile.png"),
                              width)
    assert shot.read_bytes().startswith(b"\x89PNG")
