"""Each backend's standalone ``run.py`` gives the runner's own outputs, run in a fresh
environment with only the runtime installed (no dse, no torch unless the runtime is torch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dse.accuracy.digits import DigitsSplit
from tests.backends.conftest import ArtifactFor, RunnerFor
from tests.deploy.standalone_check import run_standalone


def test_onnxruntime_run_py_without_dse(tmp_path: Path, artifact_for: ArtifactFor,
                                        runner_pool: RunnerFor,
                                        backends_split: DigitsSplit) -> None:
    images = backends_split.x_test[:10]  # the last batch of 4 is short: padded, then cut
    for precision, knobs, threads in (("fp32", {}, 2), ("int8", {"intra_op_threads": 1}, 1)):
        runner = runner_pool("onnxruntime", precision)
        got, expected, printed = run_standalone(
            tmp_path / precision, "onnxruntime", runner, artifact_for("onnxruntime", precision),
            knobs, threads, images)
        assert got.shape == (10, 10)
        np.testing.assert_allclose(got, expected, atol=1e-5)
        assert "outputs (10, 10)" in printed and "p50" in printed
        assert (tmp_path / precision / "bundle" / "requirements.txt").read_text().startswith(
            "onnxruntime==")
