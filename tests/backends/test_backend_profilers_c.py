"""The per-operator profilers of OpenVINO, TVM and TensorRT (``Backend.profile_ops``), run for real
on the backends' test cnn: operators of the model's kinds, one call per run per node (OpenVINO) or
a whole number of calls per run (TVM's kernels), time that accounts for a plausible share of a
run, and the raw files written. TensorRT's needs a CUDA GPU and TensorRT and skips without them.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import numpy as np
import onnx
import pytest

from dse.accuracy.digits import DigitsSplit
from dse.backends import get_backend
from dse.backends.op_profile import OpProfile, ProfileRequest
from dse.backends.tensorrt.profiler import LayerInfo, parse_engine_information
from dse.plugins.backends import BACKEND_DECLARATIONS
from dse.spec import HardwareProfile
from tests.backends._devices import NO_CUDA, has_cuda
from tests.backends.conftest import CPU_PROFILE, POOL_BATCH, ArtifactFor

RUNS = 5
# Runners are compiled at a batch large enough that operators, not the call's own overhead
# (Python, OpenVINO's request, TVM's instrument callback), take most of a run; the test cnn at
# the pool's batch of 4 runs its operators in a few µs each, which OpenVINO counts in whole µs.
BATCH = 64
CUDA_PROFILE = HardwareProfile(name="test-cuda", kind="cuda", backends=["tensorrt"],
                               precisions=["fp32"], max_threads=2)


def _request(runner: object, artifact: object, batch: np.ndarray, out_dir: Path,
             knobs: dict[str, object] | None = None,
             profile: HardwareProfile = CPU_PROFILE) -> ProfileRequest:
    return ProfileRequest(runner=runner, artifact=artifact, knobs=knobs or {}, profile=profile,
                          batch=np.ascontiguousarray(batch, dtype=np.float32), runs=RUNS,
                          out_dir=out_dir)


def _op_share(profile: OpProfile) -> float:
    """Operator time per run over the median profiled run."""
    return sum(op.total_us for op in profile.ops) / profile.runs / statistics.median(profile.run_us)


def _check_common(profile: OpProfile, backend: str) -> None:
    assert BACKEND_DECLARATIONS[backend].profiler
    assert profile.runs == RUNS and len(profile.run_us) == RUNS
    assert all(us > 0 for us in profile.run_us)
    assert all(path.is_file() and path.stat().st_size > 0 for path in profile.files)
    assert profile.trace is not None and profile.trace in profile.files
    events = json.loads(profile.trace.read_text())["traceEvents"]
    assert sum(event.get("cat") == "run" for event in events) == RUNS
    assert profile.notes


def test_openvino_reports_its_nodes_from_the_performance_counters(
        artifact_for: ArtifactFor, backends_split: DigitsSplit, tmp_path: Path) -> None:
    pytest.importorskip("openvino", reason="the openvino package is not installed (dse[openvino])")
    backend = get_backend("openvino")
    artifact = artifact_for("openvino", "fp32")
    with backend.compile(artifact, {}, CPU_PROFILE, BATCH) as runner:
        profile = backend.profile_ops(_request(runner, artifact, backends_split.x_test[:BATCH],
                                               tmp_path))
        # The measured runner is left as it was, and still runs.
        assert runner.run(backends_split.x_test[:BATCH]).shape == (BATCH, 10)
    _check_common(profile, "openvino")
    assert {path.name for path in profile.files} == {"openvino-perf-counters.json", "trace.json"}
    convolutions = [op for op in profile.ops if op.op_type == "Convolution"]
    assert convolutions, sorted({op.op_type for op in profile.ops})
    assert all(op.where.endswith("_f32") for op in convolutions)  # the kernel, at fp32
    assert all(op.calls == RUNS for op in profile.ops)
    assert all(op.input_shapes.startswith(f"[{BATCH},") for op in convolutions)
    # fp32 in and out: at least the input and output activations, 4 bytes an element.
    assert all(op.bytes is not None and op.bytes > 4 * BATCH * 64 for op in convolutions)
    assert sum(op.total_us for op in convolutions) > 0
    assert _op_share(profile) > 0.3, (profile.run_us, [(op.name, op.total_us) for op in profile.ops])
    raw = json.loads((tmp_path / "openvino-perf-counters.json").read_text())
    assert len(raw["executed"]) == len(profile.ops)
    assert all(len(node["real_time_us"]) == RUNS + 1 for node in raw["executed"])
    # Every ONNX Conv is named among the layers some executed node runs.
    artifact_path = artifact.path
    assert artifact_path is not None
    onnx_convs = {node.name for node in onnx.load(str(artifact_path)).graph.node
                  if node.op_type == "Conv"}
    mapped = {name for node in raw["executed"] for name in node["original_layers"].split(",")}
    assert onnx_convs and onnx_convs <= mapped, (onnx_convs, mapped)


def test_openvino_profiles_a_multi_stream_runner_as_one_of_its_streams(
        artifact_for: ArtifactFor, backends_split: DigitsSplit, tmp_path: Path) -> None:
    # The CPU plugin keeps its counters per stream and one request's calls go to either stream:
    # the sibling is one stream with the runner's threads per stream (here 2 / 2 = 1).
    pytest.importorskip("openvino", reason="the openvino package is not installed (dse[openvino])")
    backend = get_backend("openvino")
    artifact = artifact_for("openvino", "fp32")
    knobs = {"performance_hint": "throughput", "num_streams": 2, "num_threads": 2}
    with backend.compile(artifact, knobs, CPU_PROFILE, BATCH) as runner:
        assert runner.describe()["num_streams"] == "2"
        profile = backend.profile_ops(_request(runner, artifact, backends_split.x_test[:BATCH],
                                               tmp_path, knobs))
    sibling = json.loads((tmp_path / "openvino-perf-counters.json").read_text())["profiled_compile"]
    assert (sibling["num_streams"], sibling["threads"], sibling["performance_hint"]) == (
        "1", "1", "throughput")
    assert all(op.calls == RUNS and op.total_us >= 0 for op in profile.ops)
    assert _op_share(profile) > 0.3


def test_tvm_times_every_kernel_the_vm_calls(
        artifact_for: ArtifactFor, backends_split: DigitsSplit, tmp_path: Path) -> None:
    pytest.importorskip("tvm", reason="apache-tvm is not installed (dse[tvm])")
    backend = get_backend("tvm")
    batch = BATCH
    artifact = artifact_for("tvm", "fp32")
    with backend.compile(artifact, {"num_threads": 1}, CPU_PROFILE, batch) as runner:
        profile = backend.profile_ops(_request(runner, artifact, backends_split.x_test[:batch],
                                               tmp_path, {"num_threads": 1}))
        assert runner.run(backends_split.x_test[:batch]).shape == (batch, 10)
    _check_common(profile, "tvm")
    assert {path.name for path in profile.files} == {
        "tvm-vm-calls.json", "tvm-vm-profile.csv", "trace.json"}
    kernels = [op for op in profile.ops if not op.name.startswith("vm.")]
    convolutions = [op for op in kernels if "conv2d" in op.op_type]
    assert convolutions, sorted(op.name for op in profile.ops)
    assert all(op.calls % RUNS == 0 and op.calls > 0 for op in profile.ops)
    assert all(op.total_us > 0 for op in kernels)
    assert all(op.where == "llvm" for op in kernels)
    # FLOPs from the kernels' TIR, bytes from their arguments: a convolution does arithmetic.
    assert all(op.flops and op.flops > 0 and op.bytes and op.bytes > 0 for op in convolutions)
    assert all(f"float32[{batch}," in op.input_shapes for op in convolutions)
    assert _op_share(profile) > 0.3, (profile.run_us, [(op.name, op.total_us) for op in profile.ops])
    calls = json.loads((tmp_path / "tvm-vm-calls.json").read_text())
    assert {call["run"] for call in calls["calls"]} == set(range(RUNS))


def test_the_engine_inspectors_json_gives_layer_types_where_the_build_was_detailed() -> None:
    # The two forms of TensorRT's get_engine_information(JSON) (its documentation's examples):
    # names only (the default LAYER_NAMES_ONLY verbosity), and a DETAILED build's objects.
    names_only = json.dumps({"Layers": ["conv1 + relu1", "Reformatting CopyNode for Output 0"],
                             "Bindings": ["input", "logits"]})
    assert parse_engine_information(names_only) == {
        "conv1 + relu1": LayerInfo("", ""), "Reformatting CopyNode for Output 0": LayerInfo("", "")}
    detailed = json.dumps({"Layers": [{
        "Name": "conv1 + relu1", "LayerType": "CaskConvolution",
        "Inputs": [{"Name": "input", "Dimensions": [4, 1, 8, 8],
                    "Format/Datatype": "Row major linear FP32 format (NCHW)"}],
        "Outputs": [{"Name": "r", "Dimensions": [4, 8, 8, 8], "Format/Datatype": "Float"}],
        "TacticName": "sm90_xmma_fprop_implicit_gemm_f32f32"}], "Bindings": ["input", "logits"]})
    assert parse_engine_information(detailed) == {
        "conv1 + relu1": LayerInfo("CaskConvolution", "[4,1,8,8]")}
    assert parse_engine_information("not json") == {}


def test_tensorrt_times_every_layer_of_its_engine(artifact_for: ArtifactFor,
                                                  backends_split: DigitsSplit,
                                                  tmp_path: Path) -> None:
    assert BACKEND_DECLARATIONS["tensorrt"].profiler
    if importlib.util.find_spec("tensorrt") is None:
        pytest.skip("TensorRT not installed: its layer profiler (IProfiler) and engine inspector "
                    "need TensorRT's Python bindings and a CUDA GPU")
    if not has_cuda():
        pytest.skip(NO_CUDA)
    backend = get_backend("tensorrt")
    artifact = artifact_for("tensorrt", "fp32")
    batch = backends_split.x_test[:POOL_BATCH]
    with backend.compile(artifact, {}, CUDA_PROFILE, POOL_BATCH) as runner:
        profile = backend.profile_ops(_request(runner, artifact, batch, tmp_path,
                                               profile=CUDA_PROFILE))
        assert runner.run(batch).shape == (POOL_BATCH, 10)
    _check_common(profile, "tensorrt")
    assert {path.name for path in profile.files} == {
        "tensorrt-layer-times.json", "tensorrt-engine-information.json", "trace.json"}
    assert profile.ops and all(op.calls == RUNS and op.where == "TensorRT" for op in profile.ops)
    assert all(op.device_us == op.total_us for op in profile.ops)
    assert sum(op.total_us for op in profile.ops) > 0
    assert _op_share(profile) > 0.3, (profile.run_us, [(op.name, op.total_us) for op in profile.ops])
    layers = parse_engine_information((tmp_path / "tensorrt-engine-information.json").read_text())
    assert {op.name for op in profile.ops} <= set(layers)


def test_a_node_openvino_lists_in_only_some_readings_keeps_one_value_per_reading() -> None:
    """OpenVINO lists some nodes of an int8 graph as executed in some readings only (the
    quickstart CNN's ``input_QuantizeLinear`` in 16 of 21): each node must still have one value
    per reading, or the per-run times index past its list (an IndexError lost the profile)."""
    pytest.importorskip("openvino", reason="openvino is not installed")
    import datetime

    import openvino as ov

    from dse.backends.openvino.profiler import _collect

    def entry(name: str, us: float, executed: bool = True) -> object:
        info = ov.ProfilingInfo()
        info.node_name, info.node_type, info.exec_type = name, "Convolution", "jit_avx512_I8"
        info.status = (ov.ProfilingInfo.Status.EXECUTED if executed
                       else ov.ProfilingInfo.Status.NOT_RUN)
        info.real_time = info.cpu_time = datetime.timedelta(microseconds=us)
        return info

    readings = [[entry("conv", 10), entry("quant", 4)],
                [entry("conv", 12), entry("quant", 4, executed=False)],
                [entry("conv", 11)],
                [entry("conv", 11), entry("quant", 5)]]
    executed, skipped = _collect(readings, averaging=True)
    assert skipped == {}
    assert executed["conv"].real_us == [10, 12, 11, 11]
    assert executed["quant"].real_us == [4, 4, 4, 5]  # a running average carried over
    executed, _ = _collect(readings, averaging=False)
    assert executed["quant"].real_us == [4, 0, 0, 5]  # per-call times: it did not run
    assert len(executed["quant"].per_run(False)) == len(readings) - 1
