"""dse.results and dse.report build a dashboard from the study alone: no heavy runtimes."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "onnxruntime", "tensorrt", "ray")


def test_results_and_report_never_import_heavy_runtimes() -> None:
    code = ("import sys, dse.report, dse.results, dse.testing.records; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
