"""The per-operator profilers of litert (LiteRT's CompiledModel profiler, through its C API),
executorch (ETDump) and xla (the jax profiler's thunk events): on the session's cnn runners, each
reports every operator once per profiled run, times that fit inside the runs' wall time, and the
raw files it says it wrote; and a profiler dse cannot read here says why. Real runtimes
throughout; the runners come from the shared pool, so no conversion is made here."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from dse.accuracy.digits import DigitsSplit
from dse.artifacts import Artifact
from dse.backends import get_backend
from dse.backends.op_profile import OpProfile, ProfileRequest, ProfilerMissing
from dse.spec import HardwareProfile
from tests.backends.conftest import CPU_PROFILE, POOL_BATCH, ArtifactFor, RunnerFor

RUNS = 8
CUDA_PROFILE = HardwareProfile(name="test-gpu", kind="cuda", backends=["xla"], precisions=["fp32"])


def _batch(split: DigitsSplit) -> np.ndarray:
    return np.ascontiguousarray(split.x_test[:POOL_BATCH], dtype=np.float32)


def _profile(backend: str, runner: object, artifact: Artifact, knobs: dict[str, object],
             batch: np.ndarray, out: Path, profile: HardwareProfile = CPU_PROFILE) -> OpProfile:
    out.mkdir()
    return get_backend(backend).profile_ops(
        ProfileRequest(runner, artifact, knobs, profile, batch, RUNS, out))


def _check_profile(result: OpProfile, out: Path) -> None:
    """What every implemented profiler must give: each operator once a run, measured time inside
    the runs' wall time, its files on disk and a trace that loads."""
    assert result.runs == RUNS and len(result.run_us) == RUNS
    assert result.ops, "the profiler reported no operator"
    assert {op.calls for op in result.ops} == {RUNS}, [(op.name, op.calls) for op in result.ops]
    names = [op.name for op in result.ops]
    assert len(names) == len(set(names))
    total = sum(op.total_us for op in result.ops)
    assert total > 0 and all(op.total_us >= 0 for op in result.ops)
    # Operators run inside the calls, so their summed time fits in the calls' (5% for clocks).
    assert total <= 1.05 * sum(result.run_us), (total, sum(result.run_us))
    per_run = total / RUNS
    assert per_run >= 0.02 * statistics.median(result.run_us), (per_run, result.run_us)
    assert result.files and all(path.parent == out and path.stat().st_size > 0
                                for path in result.files)
    assert result.trace is not None and result.trace.parent == out
    assert json.loads(result.trace.read_text())["traceEvents"]
    assert result.notes


@pytest.fixture
def batch(backends_split: DigitsSplit) -> np.ndarray:
    return _batch(backends_split)


def test_declarations_name_their_profilers() -> None:
    for backend in ("litert", "executorch", "xla"):
        assert get_backend(backend).declaration.profiler, backend


def test_litert_profiles_xnnpack_operators(runner_pool: RunnerFor, artifact_for: ArtifactFor,
                                           batch: np.ndarray, tmp_path: Path) -> None:
    pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")
    out = tmp_path / "litert"
    result = _profile("litert", runner_pool("litert", "fp32"), artifact_for("litert", "fp32"), {},
                      batch, out)
    _check_profile(result, out)
    assert {op.where for op in result.ops} == {"XNNPACK"}  # the cnn is delegated whole
    assert any("Convolution" in op.op_type for op in result.ops)
    assert result.profiler.startswith("LiteRT profiler") and "2.3" in result.profiler
    raw = json.loads((out / "litert-profile-events.json").read_text())
    assert raw["runs"] == RUNS and raw["events"]


def test_litert_without_xnnpack_profiles_builtin_ops(artifact_for: ArtifactFor,
                                                     batch: np.ndarray, tmp_path: Path) -> None:
    pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")
    litert = get_backend("litert")
    knobs: dict[str, object] = {"xnnpack": False, "num_threads": 1}
    artifact = artifact_for("litert", "fp32")
    runner = litert.compile(artifact, knobs, CPU_PROFILE, POOL_BATCH)
    try:
        out = tmp_path / "builtin"
        result = _profile("litert", runner, artifact, knobs, batch, out)
    finally:
        runner.close()
    _check_profile(result, out)
    assert {op.where for op in result.ops} == {"builtin"}
    assert all(" (node " in op.name for op in result.ops)
    assert "CONV_2D" in {op.op_type for op in result.ops}


def test_executorch_profiles_with_etdump(runner_pool: RunnerFor, artifact_for: ArtifactFor,
                                         batch: np.ndarray, tmp_path: Path) -> None:
    pytest.importorskip("executorch.runtime", reason="executorch is not installed")
    out = tmp_path / "executorch"
    runner = runner_pool("executorch", "fp32")
    result = _profile("executorch", runner, artifact_for("executorch", "fp32"), {}, batch, out)
    _check_profile(result, out)
    assert {op.where for op in result.ops} == {"XNNPACK"}  # fully delegated: no kernel rows
    assert not any(op.op_type == "DELEGATE_CALL" for op in result.ops)  # its operators are rows
    assert (out / "executorch.etdump").stat().st_size > 0
    assert runner.run(batch).shape == (POOL_BATCH, 10)  # the runner still runs after the resize


def test_executorch_rows_count_no_time_twice() -> None:
    pytest.importorskip("executorch.runtime", reason="executorch is not installed")
    from dse.backends.executorch.profiler import TimedEvent, operator_rows

    execution = [TimedEvent("native_call_cumsum.out", 0, 10.0, 2.0, False),
                 TimedEvent("OPERATOR_CALL", 0, 9.0, 4.0, False),
                 TimedEvent("DELEGATE_CALL", 1, 14.0, 6.0, False),  # nothing recorded inside
                 TimedEvent("Method::execute", 0, 8.0, 13.0, False)]
    rows = operator_rows([execution], "XNNPACK")
    assert {(row.name, row.where) for row in rows.values()} == {
        ("cumsum.out (instruction 0)", "portable"), ("DELEGATE_CALL (instruction 1)", "XNNPACK")}


def test_xla_profiles_hlo_instructions(runner_pool: RunnerFor, artifact_for: ArtifactFor,
                                       batch: np.ndarray, tmp_path: Path) -> None:
    pytest.importorskip("jax", reason="jax is not installed (dse[xla])")
    from dse.backends.xla.profiler import hlo_module

    out = tmp_path / "xla"
    runner = runner_pool("xla", "fp32")
    result = _profile("xla", runner, artifact_for("xla", "fp32"), {}, batch, out)
    _check_profile(result, out)
    compiled, _ = runner.executable(POOL_BATCH)  # type: ignore[attr-defined]
    _, entry = hlo_module(compiled.as_text())
    assert {op.name for op in result.ops} <= set(entry)
    assert all(op.op_type and op.where == "XLA:CPU" for op in result.ops)
    assert {path.name for path in result.files} == {
        "xla.xplane.pb", "xla.trace.json.gz", "xla.perfetto_trace.json.gz"}


def test_xla_on_a_cuda_device_says_its_profile_is_not_read(runner_pool: RunnerFor,
                                                           artifact_for: ArtifactFor,
                                                           batch: np.ndarray,
                                                           tmp_path: Path) -> None:
    pytest.importorskip("jax", reason="jax is not installed (dse[xla])")
    with pytest.raises(ProfilerMissing, match="CPU devices only"):
        _profile("xla", runner_pool("xla", "fp32"), artifact_for("xla", "fp32"), {}, batch,
                 tmp_path / "cuda", CUDA_PROFILE)
