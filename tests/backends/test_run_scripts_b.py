"""The standalone ``run.py`` of LiteRT, ExecuTorch, TVM and XLA gives the runner's own outputs,
run in a fresh environment with only the runtime installed (no dse; torch only for ExecuTorch,
whose runtime's tensors are torch's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.accuracy.digits import DigitsSplit
from dse.backends import get_backend
from tests.backends.conftest import CPU_PROFILE, POOL_BATCH, ArtifactFor, RunnerFor
from tests.deploy.standalone_check import run_standalone

RUNTIME_MODULES = {"litert": "ai_edge_litert.interpreter", "executorch": "executorch.runtime",
                   "tvm": "tvm", "xla": "jax"}
# (backend, precision, knobs as the pooled runner was compiled, its threads, tolerance): fp32
# runners use the default knobs (the profile's 2 threads), the others one thread.
CASES = [
    ("litert", "fp32", {}, 2, 1e-5),
    # Full-integer int8: the same quantized kernels on the same quantized input.
    ("litert", "int8", {"num_threads": 1}, 1, 1e-5),
    ("executorch", "fp32", {}, 2, 1e-5),
    ("tvm", "fp32", {}, 2, 1e-5),
    ("xla", "fp32", {}, 2, 1e-5),
]


@pytest.mark.parametrize(("backend", "precision", "knobs", "threads", "atol"), CASES,
                         ids=[f"{case[0]}-{case[1]}" for case in CASES])
def test_run_py_without_dse(tmp_path: Path, artifact_for: ArtifactFor, runner_pool: RunnerFor,
                            backends_split: DigitsSplit, backend: str, precision: str,
                            knobs: dict[str, object], threads: int, atol: float) -> None:
    pytest.importorskip(RUNTIME_MODULES[backend], reason=f"{backend}'s runtime is not installed")
    images = backends_split.x_test[:10]  # the last batch of 4 is short: padded, then cut
    got, expected, printed = run_standalone(tmp_path, backend, runner_pool(backend, precision),
                                            artifact_for(backend, precision), knobs, threads,
                                            images)
    assert got.shape == (10, 10)
    np.testing.assert_allclose(got, expected, atol=atol)
    assert "outputs (10, 10)" in printed and "p50" in printed


# Knobs that change how run.py loads the model, on runners of their own (each compiles in about
# a second): LiteRT's builtin kernels without XNNPACK; XLA's weights passed as arguments (an .npz
# beside the export) with lax's grouped convolution and fast math.
KNOB_CASES = [
    ("litert", {"num_threads": 1, "xnnpack": False}),
    ("xla", {"num_threads": 1, "weights": "arguments", "depthwise_conv": "grouped",
             "xla_cpu_enable_fast_math": True}),
]


@pytest.mark.parametrize(("backend", "knobs"), KNOB_CASES, ids=[case[0] for case in KNOB_CASES])
def test_run_py_follows_the_knobs(tmp_path: Path, artifact_for: ArtifactFor,
                                  backends_split: DigitsSplit, backend: str,
                                  knobs: dict[str, object]) -> None:
    pytest.importorskip(RUNTIME_MODULES[backend], reason=f"{backend}'s runtime is not installed")
    artifact = artifact_for(backend, "fp32")
    runner = get_backend(backend).compile(artifact, knobs, CPU_PROFILE, POOL_BATCH)
    try:
        got, expected, _ = run_standalone(tmp_path, backend, runner, artifact, knobs, 1,
                                          backends_split.x_test[:10])
    finally:
        runner.close()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    if knobs.get("weights") == "arguments":  # passed on every call, from the bundle's .npz
        assert (tmp_path / "bundle" / "model" / "weights.npz").is_file()
