"""`dse report --serve`: serves the dashboards folder on localhost until Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.conftest import REPO


def test_serve_prints_its_url_serves_a_waiting_page_and_stops_on_ctrl_c(
        tiny_campaign: Path) -> None:
    """A campaign not started yet: the page says it waits (and reloads itself)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "dse.cli", "report", str(tiny_campaign), "--serve", "--port", "0"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "COLUMNS": "200"})
    try:
        assert process.stdout is not None
        deadline, line = time.monotonic() + 60, ""
        while time.monotonic() < deadline and "serving" not in line:
            line = process.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/)(\S+\.html)", line)
        assert match, line
        with urllib.request.urlopen(match[1] + match[2], timeout=10) as response:
            page = response.read().decode()
        assert 'http-equiv="refresh"' in page
        with urllib.request.urlopen(match[1], timeout=10) as response:
            assert response.status == 200  # the index
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
        assert "stopped serving" in out
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
