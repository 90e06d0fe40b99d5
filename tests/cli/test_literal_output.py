"""The CLI prints user text as written: parameter values, failure reasons and paths that look like
rich markup are neither eaten nor a crash at the end of a finished run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EVALUATOR = '''
def evaluate(candidate):
    tag = candidate.params["tag"]
    if tag == "[/x]":
        raise ValueError("[/x] [bold]no")
    x = float(candidate.params["x1"])
    return {"zdt_f1": x, "zdt_f2": 1.0 - x}
'''

SPACE = """\
name: brackets
parameters:
  x1: [0.0, 1.0]
  tag: ["[/x]", "[bold]v"]
metrics:
  - {name: zdt_f1, unit: "1", direction: minimize, description: first}
  - {name: zdt_f2, unit: "1", direction: minimize, description: second}
objectives:
  - metric: zdt_f1
  - metric: zdt_f2
"""

EXPERIMENT = """\
name: brackets
search_space: space.yaml
devices: [cpu.yaml]
evaluator: bracket_evaluator:evaluate
sampler: {name: grid, seed: 0}
budget: {trials: 2}
"""


def test_brackets_in_values_reasons_and_folders_print_as_written(tmp_path: Path) -> None:
    folder = tmp_path / "[draft] v2"
    folder.mkdir()
    (tmp_path / "bracket_evaluator.py").write_text(EVALUATOR)
    (folder / "space.yaml").write_text(SPACE)
    (folder / "cpu.yaml").write_text("name: cpu\nkind: cpu\nbackends: [onnxruntime]\nprecisions: [fp32]\n")
    (folder / "experiment.yaml").write_text(EXPERIMENT)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               COLUMNS="250")
    done = subprocess.run([sys.executable, "-m", "dse.cli", "run", str(folder / "experiment.yaml")],
                          capture_output=True, text=True, env=env, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Traceback" not in out and "MarkupError" not in out
    assert "ValueError: [/x] [bold]no" in out
    assert "[bold]v" in out
    assert "[draft] v2" in out
