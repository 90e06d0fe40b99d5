"""The per-operator profilers of torch, torch.compile and ONNX Runtime (``Backend.profile_ops``),
run for real on the backends' test cnn: every profiled run seen, operators of the model's kinds
with the FLOPs their shapes give, rows that never overlap, and the raw files and trace written."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from dse.accuracy.digits import DigitsSplit
from dse.backends import get_backend
from dse.backends.op_profile import OpProfile, ProfileRequest
from dse.plugins.backends import BACKEND_DECLARATIONS
from tests.backends.conftest import CPU_PROFILE, POOL_BATCH, ArtifactFor, RunnerFor

RUNS = 5


def _profile(backend: str, precision: str, runner_pool: RunnerFor, artifact_for: ArtifactFor,
             split: DigitsSplit, out: Path) -> OpProfile:
    runner = runner_pool(backend, precision)
    batch = np.ascontiguousarray(split.x_test[:POOL_BATCH], dtype=np.float32)
    knobs = {} if precision == "fp32" else {get_backend(backend).thread_knob: 1}
    out.mkdir()
    return get_backend(backend).profile_ops(ProfileRequest(
        runner, artifact_for(backend, precision), knobs, CPU_PROFILE, batch, RUNS, out))


def _check(found: OpProfile, backend: str) -> None:
    assert BACKEND_DECLARATIONS[backend].profiler in found.profiler
    assert found.runs == RUNS and len(found.run_us) == RUNS and len(found.run_op_us) == RUNS
    assert all(path.is_file() for path in found.files)
    assert found.trace is not None and json.loads(found.trace.read_text())
    # Operators sum to less than each run's wall time seen from outside: rows never overlap.
    for inside, wall in zip(found.run_op_us, found.run_us, strict=True):
        assert 0 < inside <= wall * 1.05
    assert sum(op.total_us for op in found.ops) == pytest.approx(sum(found.run_op_us))


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_onnxruntime_nodes_with_their_flops(precision: str, runner_pool: RunnerFor,
                                            artifact_for: ArtifactFor,
                                            backends_split: DigitsSplit, tmp_path: Path) -> None:
    found = _profile("onnxruntime", precision, runner_pool, artifact_for, backends_split,
                     tmp_path / "out")
    _check(found, "onnxruntime")
    assert all(op.calls == RUNS for op in found.ops)  # each node once per run
    assert {op.where for op in found.ops} == {"CPUExecutionProvider"}
    convs = [op for op in found.ops if "Conv" in op.op_type]
    assert convs and all(op.flops and op.bytes for op in convs)
    if precision == "int8":
        assert any(op.op_type.startswith(("QLinear", "Quantize", "Dequantize"))
                   for op in found.ops)


@pytest.mark.parametrize("backend", ["torch", "torch_compile"])
def test_torch_operators_under_each_run(backend: str, runner_pool: RunnerFor,
                                        artifact_for: ArtifactFor, backends_split: DigitsSplit,
                                        tmp_path: Path) -> None:
    found = _profile(backend, "fp32", runner_pool, artifact_for, backends_split,
                     tmp_path / "out")
    _check(found, backend)
    kinds = {op.op_type for op in found.ops}
    assert any("conv" in kind for kind in kinds), kinds
    # torch counts a convolution's FLOPs in eager mode; a compiled graph's own kernels are
    # a framework row, their time kept, their FLOPs unknown.
    if backend == "torch":
        assert any(op.flops for op in found.ops if "conv" in op.op_type)
    else:
        assert "framework" in kinds
    assert statistics.median(found.run_op_us) > 0


@pytest.mark.gpu
def test_torch_on_a_gpu_separates_device_time(artifact_for: ArtifactFor,
                                              backends_split: DigitsSplit, tmp_path: Path) -> None:
    """On a CUDA device the profiler records the kernels too: operators carry device time."""
    from tests.backends._devices import NO_CUDA, has_cuda

    if not has_cuda():
        pytest.skip(NO_CUDA)
    from dse.spec import HardwareProfile

    cuda = HardwareProfile(name="test-cuda", kind="cuda", backends=["torch"],
                           precisions=["fp32"], max_threads=2)
    artifact = artifact_for("torch", "fp32")
    batch = np.ascontiguousarray(backends_split.x_test[:POOL_BATCH], dtype=np.float32)
    tmp_path.joinpath("out").mkdir()
    with get_backend("torch").compile(artifact, {}, cuda, POOL_BATCH) as runner:
        found = get_backend("torch").profile_ops(ProfileRequest(
            runner, artifact, {}, cuda, batch, RUNS, tmp_path / "out"))
    assert found.runs == RUNS
    convs = [op for op in found.ops if "conv" in op.op_type]
    assert convs and all(op.where == "cuda" and op.device_us for op in convs)
