"""The openvino backend beyond the shared conformance suite: that its precisions are the kernels
that ran (int8 and bf16 checked, an int8 graph OpenVINO would run in float refused), int8
fidelity, concurrent runs on two streams, and its errors (devices, unreadable files, knobs).

Runners come from the session's pool where one fits; the rest compile in ~0.1 s each.
"""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from dse.accuracy.digits import DigitsSplit
from dse.artifacts import Artifact
from dse.backends import get_backend
from dse.backends.openvino.kernels import Kernel, check_kernel_precision
from dse.core.exceptions import BuildError
from dse.spec import HardwareProfile
from dse.testing.backends import run_in_batches
from tests.backends.conftest import ArtifactFor, RunnerFor

# The whole file skips without OpenVINO (the imports above do not load it: the backend imports it
# when it compiles).
openvino = pytest.importorskip("openvino", reason="the openvino package is not installed (dse[openvino])")

BACKEND = get_backend("openvino")


def _cpu_capabilities() -> list[str]:
    return [str(item) for item in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


def _compute_kernels(described: dict[str, str]) -> list[str]:
    return [entry.split("=")[0] for entry in described["compute_kernels"].split(",")]


def test_int8_agrees_with_fp32_on_the_test_split(runner_pool: RunnerFor,
                                                 backends_split: DigitsSplit) -> None:
    images = backends_split.x_test[:256]
    fp32 = run_in_batches(runner_pool("openvino", "fp32"), images).argmax(1)
    int8 = run_in_batches(runner_pool("openvino", "int8"), images).argmax(1)
    agreement = float((int8 == fp32).mean())
    assert agreement >= 0.9, f"int8 top-1 agrees with fp32 on {agreement:.3f} of 256 images"


def test_int8_runs_int8_kernels(runner_pool: RunnerFor) -> None:
    described = runner_pool("openvino", "int8").describe()
    kernels = _compute_kernels(described)
    assert kernels and all(kernel.lower().endswith(("_i8", "_u8")) for kernel in kernels), kernels
    assert described["inference_precision"] == "f32"  # what is left unquantized


def test_bf16_runs_bf16_kernels(runner_pool: RunnerFor) -> None:
    if "BF16" not in _cpu_capabilities():
        pytest.skip("this CPU lacks bf16 arithmetic (no BF16 in OpenVINO's "
                    "OPTIMIZATION_CAPABILITIES: AVX512-BF16 or AMX)")
    described = runner_pool("openvino", "bf16").describe()
    kernels = _compute_kernels(described)
    assert kernels and all(kernel.endswith("_bf16") for kernel in kernels), kernels
    assert described["inference_precision"] == "bf16"
    assert "bf16=" in described["nodes_by_precision"]


def test_an_int8_graph_run_in_float_is_refused(artifact_for: ArtifactFor,
                                               cpu_profile: HardwareProfile) -> None:
    """ONNX Runtime's int8 graph has asymmetric s8 activations. OpenVINO (2026.4) on Sapphire
    Rapids dequantizes them and runs the convolutions in f32: refused, never filed as int8. On
    AMD EPYC its plugin runs the same graph in int8 kernels: then it may be measured as int8, and
    every compute node says so."""
    try:
        runner = BACKEND.compile(artifact_for("onnxruntime", "int8"), {"num_threads": 1},
                                 cpu_profile, 4)
    except BuildError as refused:
        assert re.search(r"asked for int8 on CPU, yet \d+ of \d+ compute nodes ran in other "
                         r"precisions: .*_f32\)", str(refused)), refused
        return
    with runner:
        kernels = _compute_kernels(runner.describe())
    assert kernels and all(kernel.lower().endswith(("_i8", "_u8")) for kernel in kernels), kernels


def test_two_streams_serve_two_threads_at_once(artifact_for: ArtifactFor,
                                               backends_split: DigitsSplit,
                                               cpu_profile: HardwareProfile) -> None:
    knobs = {"performance_hint": "throughput", "num_streams": 2, "num_threads": 2}
    with BACKEND.compile(artifact_for("openvino", "fp32"), knobs, cpu_profile, 4) as runner:
        described = runner.describe()
        assert (described["performance_hint"], described["num_streams"],
                described["optimal_infer_requests"], described["threads"]) == (
                    "throughput", "2", "2", "2")
        batches = [backends_split.x_test[:4], backends_split.x_test[4:8]]
        expected = [runner.run(batch) for batch in batches]
        results: list[list[np.ndarray]] = [[], []]
        start = threading.Barrier(2)

        def call(slot: int) -> None:
            start.wait()
            for _ in range(40):
                results[slot].append(runner.run(batches[slot]))

        threads = [threading.Thread(target=call, args=(slot,)) for slot in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for slot in range(2):
        assert len(results[slot]) == 40
        for logits in results[slot]:
            np.testing.assert_array_equal(logits, expected[slot])


def test_auto_streams_and_threads_are_read_back(artifact_for: ArtifactFor,
                                                cpu_profile: HardwareProfile) -> None:
    knobs = {"performance_hint": "throughput", "num_streams": "auto", "num_threads": 1}
    with BACKEND.compile(artifact_for("openvino", "fp32"), knobs, cpu_profile, 4) as runner:
        described = runner.describe()
    assert described["threads"] == "1"
    assert int(described["num_streams"]) >= 1
    assert int(described["optimal_infer_requests"]) >= 1


def test_a_device_not_present_names_the_available_ones(artifact_for: ArtifactFor,
                                                       cpu_profile: HardwareProfile) -> None:
    available = [str(name) for name in openvino.Core().available_devices]
    absent = [device for device in ("NPU", "GPU")
              if not any(name.split(".")[0] == device for name in available)]
    if not absent:
        pytest.skip("this machine has both an Intel GPU and an NPU")
    with pytest.raises(BuildError, match=rf"device '{absent[0]}' is not available on this "
                                         rf"machine; OpenVINO lists \['CPU'"):
        BACKEND.compile(artifact_for("openvino", "fp32"), {"device": absent[0]}, cpu_profile, 4)


def test_an_unreadable_onnx_file_carries_openvinos_message(
        artifact_for: ArtifactFor, cpu_profile: HardwareProfile, tmp_path: Path) -> None:
    good = artifact_for("openvino", "fp32")
    assert good.path is not None
    broken = tmp_path / "broken.onnx"
    shutil.copyfile(good.path, broken)
    with broken.open("r+b") as handle:
        handle.truncate(500)
    artifact = Artifact("onnx", broken, "fp32", good.input_shape, 500)
    with pytest.raises(BuildError, match=r"^openvino could not read broken\.onnx: .*parsed") as err:
        BACKEND.compile(artifact, {}, cpu_profile, 4)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("knobs", "message"), [
    ({"performance_hint": "fast"}, r"'performance_hint' must be one of \['latency', 'throughput'\]"),
    ({"num_streams": 0}, r"'num_streams' must be an integer >= 1 or 'auto', got 0"),
    ({"num_streams": "2"}, r"'num_streams' must be an integer >= 1 or 'auto', got '2'"),
    ({"num_streams": True}, r"'num_streams' must be an integer >= 1 or 'auto', got True"),
    ({"device": "cpu"}, r"'device' must be one of \['CPU', 'GPU', 'NPU'\], got 'cpu'"),
    ({"device": "CUDA"}, r"'device' must be one of \['CPU', 'GPU', 'NPU'\], got 'CUDA'"),
])
def test_bad_knob_values_are_build_errors(knobs: dict[str, object], message: str,
                                          artifact_for: ArtifactFor,
                                          cpu_profile: HardwareProfile) -> None:
    with pytest.raises(BuildError, match=message):
        BACKEND.check_knob_values(knobs)
    with pytest.raises(BuildError, match=message):
        BACKEND.compile(artifact_for("openvino", "fp32"), knobs, cpu_profile, 4)


def test_good_knob_values_pass_validation() -> None:
    BACKEND.check_knob_values({"num_threads": 2, "performance_hint": "throughput",
                               "num_streams": "auto", "device": "GPU"})
    BACKEND.check_knob_values({"num_streams": 3, "performance_hint": "latency"})


def test_fp8_and_gpu_profiles_are_refused_with_the_capability_reason(
        artifact_for: ArtifactFor, cpu_profile: HardwareProfile) -> None:
    fp32 = artifact_for("openvino", "fp32")
    fp8 = Artifact("onnx", fp32.path, "fp8", fp32.input_shape, fp32.size_bytes)
    with pytest.raises(BuildError, match="no fp8 inference precision"):
        BACKEND.compile(fp8, {}, cpu_profile, 4)
    cuda = HardwareProfile(name="ov-cuda", kind="cuda", backends=["openvino"], precisions=["fp32"])
    with pytest.raises(BuildError, match="not NVIDIA ones"):
        BACKEND.compile(fp32, {}, cuda, 4)


def test_run_refuses_a_batch_above_the_compiled_one(runner_pool: RunnerFor,
                                                    backends_split: DigitsSplit) -> None:
    runner = runner_pool("openvino", "fp32")
    with pytest.raises(ValueError, match="runs 1 to 4"):
        runner.run(backends_split.x_test[:5])


def test_a_kernel_s_precision_is_read_in_either_case() -> None:
    """AMD EPYC's CPU plugin names its int8 convolutions ``brgconv_avx512_I8`` (upper case),
    Sapphire Rapids' ``brgconv_avx512_amx_1x1_i8``: both ran in int8."""
    kernels = [Kernel("conv1", "Convolution", "brgconv_avx512_I8"),
               Kernel("conv2", "GroupConvolution", "brgconv_avx512_dw_I8"),
               Kernel("fc", "FullyConnected", "brgemm_avx512_amx_i8")]
    check_kernel_precision(kernels, "int8", "CPU")
    with pytest.raises(BuildError, match="3 of 3 compute nodes ran in other precisions"):
        check_kernel_precision(kernels, "fp32", "CPU")


def test_the_kernel_check_names_what_ran_in_float() -> None:
    kernels = [Kernel("conv1", "Convolution", "brgconv_avx512_amx_1x1_bf16"),
               Kernel("conv2", "GroupConvolution", "brgconv_avx512_dw_f32"),
               Kernel("reorder", "Reorder", "jit_uni_f32")]
    with pytest.raises(BuildError, match=r"yet 1 of 2 compute nodes ran in other precisions: "
                                         r"conv2 \(brgconv_avx512_dw_f32\)"):
        check_kernel_precision(kernels, "bf16", "CPU")
    check_kernel_precision(kernels[:1] + kernels[2:], "bf16", "CPU")
    with pytest.raises(BuildError, match="no node ran at it"):
        check_kernel_precision(kernels[2:], "int8", "CPU")


def test_the_runtime_clock_is_openvinos_own_time_of_each_timed_call(
        runner_pool: RunnerFor, backends_split: DigitsSplit) -> None:
    # What benchmark_app reports (InferRequest.latency), read after each timed call: inside the
    # host-timed call, so never longer than it; an unbound function has no such clock.
    from dse import measure_latency

    runner = runner_pool("openvino", "fp32")
    call = runner.bound_call(backends_split.x_test[:runner.batch_size])
    clock = runner.runtime_clock(call)
    assert clock is not None
    assert runner.runtime_clock(lambda: backends_split.x_test) is None
    stats = measure_latency(call, min_iters=50, min_seconds=0.0, max_seconds=0.5,
                            warmup_max_seconds=0.05, runtime_clock=clock)
    assert 0 < stats.runtime_p50_ms <= stats.p50_ms
    assert stats.runtime_overhead_us > 0
