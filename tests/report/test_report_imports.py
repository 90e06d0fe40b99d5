"""Building, indexing and serving dashboards loads neither torch, ONNX Runtime nor Ray: a report
runs on a laptop that has only the study database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "onnxruntime", "tensorrt", "ray")

# Everything a `dse report` does, in a fresh interpreter: import the report modules, write a
# dashboard from a study on disk, write the index, serve one page.
SCRIPT = """
import json, sys, urllib.request
from pathlib import Path
import dse.report, dse.report.dashboard, dse.report.index, dse.report.serve, dse.report.profile_page
from dse.report.dashboard import write_dashboard
from dse.report.index import write_index
from dse.report.serve import DashboardServer, LiveCampaign
from dse.testing import example_run

root = Path(sys.argv[1])
run_dir = example_run(root / "runs" / "example")
page = write_dashboard(run_dir, root / "dashboards" / "example.html")
write_index(page.parent)
with DashboardServer(page.parent, [LiveCampaign(run_dir)], port=0).start() as server:
    urllib.request.urlopen(server.url + "example.html", timeout=30).read()
print(json.dumps({"heavy": [m for m in HEAVY if m in sys.modules], "page": page.stat().st_size}))
"""


def test_building_and_serving_a_dashboard_imports_no_heavy_runtime(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{SCRIPT}", str(tmp_path)],
                         capture_output=True, text=True, check=True, timeout=60)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["page"] > 0
    assert result["heavy"] == []
