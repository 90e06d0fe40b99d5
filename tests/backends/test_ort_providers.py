"""The ONNX Runtime backends: the CPU provider's as before, the CUDA and TensorRT providers' knobs,
missing providers, and the check of where nodes actually ran.

The placement rules are tested on profiles in ONNX Runtime's format (tests/fixtures/ort_profiles,
see its README.md) and on real sessions; the GPU tests build and run both GPU backends on a CUDA
device and skip, naming what is missing, where there is none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dse.accuracy.digits import DigitsSplit
from dse.artifacts import Artifact
from dse.artifacts.fingerprint import DEVICE_CACHE_ENV as CACHE_ENV
from dse.backends import Runner, get_backend
from dse.backends.onnxruntime.backend import SessionPlan, SessionSettings, compile_session
from dse.backends.onnxruntime.gpu import installed_onnxruntime, tensorrt_cache_dir
from dse.backends.onnxruntime.placement import (
    CPU_PROVIDER,
    TENSORRT_PROVIDER,
    Placement,
    check_placement,
    load_profile,
    parse_profile,
)
from dse.core.exceptions import BuildError
from dse.spec import HardwareProfile
from dse.testing.backends import TOLERANCES, assert_decisions_agree, run_in_batches
from tests.backends._devices import NO_CUDA, has_cuda
from tests.backends.conftest import COMPARED_IMAGES, POOL_BATCH, ArtifactFor

PROFILES = Path(__file__).parents[1] / "fixtures" / "ort_profiles"
CUDA = "CUDAExecutionProvider"
GPU_BACKENDS = ("onnxruntime_cuda", "onnxruntime_tensorrt")
ORT_BACKENDS = ("onnxruntime", *GPU_BACKENDS)
GPU_PROFILE = HardwareProfile.model_validate({
    "name": "test-cuda", "kind": "cuda", "backends": list(GPU_BACKENDS),
    "precisions": ["fp32", "fp16", "int8"], "max_threads": 2})
# TensorRT's builder allows TF32 for fp32 layers (the provider cannot forbid it): fp32 logits of
# the test CNN (magnitude ~8) then differ from torch's by up to ~1e-2, not 1e-4.
TRT_FP32_ATOL = 2e-2
FP32_ATOL = 1e-4
assert TOLERANCES["fp32"].atol == FP32_ATOL
# int8 has no logit tolerance against fp32; batch 1 and batch 4 share the quantization, though.
SAME_ROW_INT8_ATOL = 5e-2


def _fixture(name: str) -> Placement:
    return load_profile(PROFILES / name)


def _without(placement: Placement, provider: str) -> Placement:
    return Placement(tuple(node for node in placement.nodes if node.provider != provider))


# --- knobs ---------------------------------------------------------------------------------------

def test_knobs_of_each_backend() -> None:
    session = {"intra_op_threads", "inter_op_threads", "graph_optimization_level"}
    assert get_backend("onnxruntime").knobs == session
    assert get_backend("onnxruntime_cuda").knobs == session | {"cudnn_conv_algo_search",
                                                               "enable_cuda_graph"}
    assert get_backend("onnxruntime_tensorrt").knobs == session | {
        "trt_max_workspace_size", "trt_builder_optimization_level"}
    assert all(get_backend(name).thread_knob == "intra_op_threads" for name in ORT_BACKENDS)


@pytest.mark.parametrize("backend", ORT_BACKENDS)
@pytest.mark.parametrize("value", ["fast", "ALL", 3, None])
def test_bad_graph_optimization_level(backend: str, value: object,
                                      fp32_artifacts: dict[str, Artifact]) -> None:
    with pytest.raises(BuildError, match=r"knob 'graph_optimization_level' must be one of "
                                         r"\['disable', 'basic', 'extended', 'all'\], got "):
        get_backend(backend).compile(fp32_artifacts[backend], {"graph_optimization_level": value},
                                     GPU_PROFILE, 1)


@pytest.mark.parametrize(("backend", "knob", "value", "wanted"), [
    ("onnxruntime_cuda", "cudnn_conv_algo_search", "exhaustive",
     r"one of \['EXHAUSTIVE', 'HEURISTIC', 'DEFAULT'\], got 'exhaustive'"),
    ("onnxruntime_tensorrt", "trt_max_workspace_size", 0, r"an integer >= 1, got 0"),
    ("onnxruntime_tensorrt", "trt_max_workspace_size", "1GB", r"an integer >= 1, got '1GB'"),
    ("onnxruntime_tensorrt", "trt_max_workspace_size", True, r"an integer >= 1, got True"),
    ("onnxruntime_tensorrt", "trt_builder_optimization_level", 6, r"an integer in 0\.\.5, got 6"),
    ("onnxruntime_tensorrt", "trt_builder_optimization_level", 2.0,
     r"an integer in 0\.\.5, got 2\.0"),
])
def test_bad_provider_knob(backend: str, knob: str, value: object, wanted: str,
                           fp32_artifacts: dict[str, Artifact]) -> None:
    # Knobs are checked before the provider, so this holds on a CPU-only onnxruntime too.
    with pytest.raises(BuildError, match=rf"^knob '{knob}' must be {wanted}$"):
        get_backend(backend).compile(fp32_artifacts[backend], {knob: value}, GPU_PROFILE, 1)


# --- providers that are missing or dropped -------------------------------------------------------

@pytest.mark.parametrize(("backend", "provider"), [("onnxruntime_cuda", CUDA),
                                                   ("onnxruntime_tensorrt", TENSORRT_PROVIDER)])
def test_missing_provider_names_what_to_install(backend: str, provider: str,
                                                fp32_artifacts: dict[str, Artifact]) -> None:
    import onnxruntime as ort

    if provider in ort.get_available_providers():
        pytest.skip(f"this onnxruntime ({installed_onnxruntime()}) has {provider}")
    with pytest.raises(BuildError) as refused:
        get_backend(backend).compile(fp32_artifacts[backend], {}, GPU_PROFILE, 1)
    message = str(refused.value)
    assert message.startswith(f"{backend} needs ONNX Runtime's {provider}, but the installed "
                              f"{installed_onnxruntime()} offers only ")
    assert f"onnxruntime=={ort.__version__}" in message
    assert "install onnxruntime-gpu" in message


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_backend_refuses_a_cpu_device(backend: str, fp32_artifacts: dict[str, Artifact],
                                          cpu_profile: HardwareProfile) -> None:
    with pytest.raises(BuildError, match=f"^{backend} needs a CUDA device; a cpu profile has none"):
        get_backend(backend).compile(fp32_artifacts[backend], {}, cpu_profile, 1)


@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider' is not in available")
def test_a_provider_onnxruntime_drops_is_a_build_error(fp32_artifacts: dict[str, Artifact]) -> None:
    import onnxruntime as ort

    if CUDA in ort.get_available_providers():
        pytest.skip(f"this onnxruntime ({installed_onnxruntime()}) has {CUDA}: nothing drops it")
    # The CPU build warns about the unknown provider and runs on the CPU: the silent drop.
    plan = SessionPlan("onnxruntime_cuda", ((CUDA, {"device_id": "0"}),), requires="a GPU")
    with pytest.raises(BuildError, match=rf"onnxruntime dropped {CUDA} when it created the "
                                         rf"session \(it runs on \['{CPU_PROVIDER}'\]\); "
                                         rf"{CUDA} needs a GPU"):
        compile_session(plan, fp32_artifacts["onnxruntime"], SessionSettings(1, 1, "all"), 2,
                        "cuda", {})


def test_a_real_session_that_runs_on_the_cpu_is_refused(fp32_artifacts: dict[str, Artifact]) -> None:
    import onnxruntime as ort

    # The Azure provider registers but runs no node: the model silently runs on the CPU provider.
    azure = "AzureExecutionProvider"
    if azure not in ort.get_available_providers():
        pytest.skip(f"this onnxruntime ({installed_onnxruntime()}) has no {azure}")
    plan = SessionPlan("test", ((azure, {}),))
    with pytest.raises(BuildError, match=rf"test: \d+ compute node\(s\) did not run on {azure}: "
                                         rf".*\(Conv\) on {CPU_PROVIDER}"):
        compile_session(plan, fp32_artifacts["onnxruntime"], SessionSettings(1, 1, "all"), 2,
                        "cuda", {})


# --- the placement check, on profiles ------------------------------------------------------------

def test_every_fixture_is_described_in_the_readme() -> None:
    readme = (PROFILES / "README.md").read_text()
    fixtures = sorted(path.name for path in PROFILES.glob("*.json"))
    assert fixtures
    assert [name for name in fixtures if name not in readme] == []


def test_recorded_cpu_profile() -> None:
    placement = _fixture("cpu_tiny_cnn.json")
    ops = [node.op for node in placement.nodes]
    assert len(placement.nodes) == 15
    assert placement.summary() == f"{CPU_PROVIDER}=15"
    assert ops.count("Conv") == 8 and ops[-1] == "Gemm"
    assert placement.nodes[0].name == "hardtanh_nchwc"
    assert placement.nodes[0].dtypes == ("float", "float", "float")
    check_placement(placement, "onnxruntime", CPU_PROVIDER)
    with pytest.raises(BuildError, match=rf"onnxruntime_cuda: 15 compute node\(s\) did not run on "
                                         rf"{CUDA}: hardtanh_nchwc \(Conv\) on {CPU_PROVIDER}, .* "
                                         rf"and 7 more \(nodes by provider: {CPU_PROVIDER}=15\)"):
        check_placement(placement, "onnxruntime_cuda", CUDA)


def test_recorded_shape_arithmetic_is_shape_only() -> None:
    nodes = {node.name: node for node in _fixture("cpu_shape_ops.json").nodes}
    assert {name for name, node in nodes.items() if node.shape_only} == {
        "shape", "gather_batch", "unsqueeze_batch", "concat_shape"}
    assert nodes["gather_batch"].dtypes == ("int64", "int64", "int64")
    assert nodes["flatten"].dtypes == ("float", "int64", "float")  # data moves: compute


def test_cuda_fallback_of_a_gemm_to_the_cpu_is_refused() -> None:
    placement = _fixture("cuda_cpu_fallback.json")
    assert placement.summary() == f"{CUDA}=7,{CPU_PROVIDER}=5"
    with pytest.raises(BuildError) as refused:
        check_placement(placement, "onnxruntime_cuda", CUDA)
    assert str(refused.value) == (
        f"onnxruntime_cuda: 1 compute node(s) did not run on {CUDA}: node_linear (Gemm) on "
        f"{CPU_PROVIDER} (nodes by provider: {CUDA}=7,{CPU_PROVIDER}=5)")
    # Without the Gemm, what is left on the CPU is shape arithmetic, there on purpose.
    shapes_only = Placement(tuple(n for n in placement.nodes if n.name != "node_linear"))
    check_placement(shapes_only, "onnxruntime_cuda", CUDA)


def test_tensorrt_fused_subgraph_is_accepted() -> None:
    placement = _fixture("tensorrt_fused.json")
    assert placement.summary() == f"{TENSORRT_PROVIDER}=3"
    fused = [node for node in placement.nodes if node.fused]
    assert [node.op for node in fused] == ["TRTKernel_graph_main_graph_7386454283190127380_0"]
    assert fused[0].name.startswith(f"{TENSORRT_PROVIDER}_TRTKernel_graph_main_graph_")
    check_placement(placement, "onnxruntime_tensorrt", TENSORRT_PROVIDER, (CUDA,))


def test_tensorrt_with_a_gemm_on_the_cpu_is_refused() -> None:
    placement = _fixture("tensorrt_cpu_fallback.json")
    with pytest.raises(BuildError, match=rf"^onnxruntime_tensorrt: 1 compute node\(s\) did not "
                                         rf"run on {CUDA} or {TENSORRT_PROVIDER}: node_linear "
                                         rf"\(Gemm\) on {CPU_PROVIDER} \(nodes by provider: "
                                         rf"{TENSORRT_PROVIDER}=3,{CPU_PROVIDER}=2\)$"):
        check_placement(placement, "onnxruntime_tensorrt", TENSORRT_PROVIDER, (CUDA,))


def test_int8_qdq_nodes_must_run_inside_tensorrt() -> None:
    placement = _fixture("tensorrt_int8_qdq_on_cuda.json")
    assert placement.summary() == f"{CUDA}=5,{TENSORRT_PROVIDER}=3"
    assert sum(node.fused for node in placement.nodes) == 2
    # CUDA is the listed fallback: fine for a float graph...
    check_placement(placement, "onnxruntime_tensorrt", TENSORRT_PROVIDER, (CUDA,))
    # ...but int8 that TensorRT never saw is not a TensorRT int8 result.
    with pytest.raises(BuildError, match=rf"4 DequantizeLinear/QuantizeLinear node\(s\) did not "
                                         rf"run on {TENSORRT_PROVIDER}: input_QuantizeLinear "
                                         rf"\(QuantizeLinear\) on {CUDA}, "):
        check_placement(placement, "onnxruntime_tensorrt", TENSORRT_PROVIDER, (CUDA,),
                        frozenset({"QuantizeLinear", "DequantizeLinear"}))


def test_tensorrt_result_with_no_tensorrt_node_is_refused() -> None:
    on_cuda = _without(_fixture("cuda_cpu_fallback.json"), CPU_PROVIDER)
    with pytest.raises(BuildError, match=rf"^onnxruntime_tensorrt: no node ran on "
                                         rf"{TENSORRT_PROVIDER} \(nodes by provider: {CUDA}=7\)$"):
        check_placement(on_cuda, "onnxruntime_tensorrt", TENSORRT_PROVIDER, (CUDA,))


def test_node_run_twice_counts_once() -> None:
    events = json.loads((PROFILES / "tensorrt_fused.json").read_text())
    assert parse_profile(events + events).summary() == f"{TENSORRT_PROVIDER}=3"


@pytest.mark.parametrize(("events", "message"), [
    ({"traceEvents": []}, "a JSON list of trace events, got dict"),
    ([{"cat": "Session", "name": "model_run", "args": {}}], "records no node events"),
])
def test_not_a_profile(events: object, message: str) -> None:
    with pytest.raises(BuildError, match=message):
        parse_profile(events)


def test_unreadable_profile(tmp_path: Path) -> None:
    broken = tmp_path / "trace.json"
    broken.write_text('[{"cat": "Node",')
    with pytest.raises(BuildError, match=f"cannot read the ONNX Runtime profile {broken}"):
        load_profile(broken)


# --- the CPU provider's backend, as before -------------------------------------------------------

@pytest.fixture
def compared_images(backends_split: DigitsSplit) -> np.ndarray:
    return np.ascontiguousarray(backends_split.x_test[:COMPARED_IMAGES], dtype=np.float32)


def test_cpu_backend_defaults_and_placement(fp32_artifacts: dict[str, Artifact],
                                            cpu_profile: HardwareProfile,
                                            compared_images: np.ndarray,
                                            reference_logits: np.ndarray) -> None:
    with get_backend("onnxruntime").compile(fp32_artifacts["onnxruntime"], {}, cpu_profile,
                                            POOL_BATCH) as runner:
        info = runner.describe()
        logits = run_in_batches(runner, compared_images)
        assert runner.compile_seconds is None
    assert info["device"] == info["providers"] == info["execution_provider"] == CPU_PROVIDER
    assert info["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert info["threads"] == str(cpu_profile.max_threads)
    assert info["nodes_by_provider"].startswith(f"{CPU_PROVIDER}=")
    assert info["fused_subgraphs"] == "0"
    np.testing.assert_allclose(logits, reference_logits, atol=FP32_ATOL)


@pytest.mark.parametrize(("level", "name"), [("disable", "ORT_DISABLE_ALL"),
                                             ("basic", "ORT_ENABLE_BASIC"),
                                             ("extended", "ORT_ENABLE_EXTENDED")])
def test_cpu_graph_optimization_level(level: str, name: str, fp32_artifacts: dict[str, Artifact],
                                      cpu_profile: HardwareProfile, compared_images: np.ndarray,
                                      reference_logits: np.ndarray) -> None:
    knobs = {"graph_optimization_level": level, "intra_op_threads": 1}
    with get_backend("onnxruntime").compile(fp32_artifacts["onnxruntime"], knobs, cpu_profile,
                                            POOL_BATCH) as runner:
        assert runner.describe()["graph_optimization_level"] == name
        logits = run_in_batches(runner, compared_images)
    np.testing.assert_allclose(logits, reference_logits, atol=FP32_ATOL)


# --- on a CUDA device ----------------------------------------------------------------------------

GPU_CASES = [("onnxruntime_cuda", "fp32"), ("onnxruntime_cuda", "fp16"),
             ("onnxruntime_tensorrt", "fp32"), ("onnxruntime_tensorrt", "fp16"),
             ("onnxruntime_tensorrt", "int8")]
PROVIDER_OF = {"onnxruntime_cuda": CUDA, "onnxruntime_tensorrt": TENSORRT_PROVIDER}


@pytest.fixture
def device_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    yield tmp_path


def _require_gpu_provider(backend: str) -> None:
    import onnxruntime as ort

    if not has_cuda():
        pytest.skip(NO_CUDA)
    provider = PROVIDER_OF[backend]
    available = ort.get_available_providers()
    if CUDA not in available:
        pytest.skip(f"onnxruntime-gpu is not installed ({installed_onnxruntime()} has {available})")
    if provider not in available:
        pytest.skip(f"{installed_onnxruntime()} has no {provider} (available: {available})")


def _compile_on_gpu(backend: str, artifact: Artifact, knobs: dict[str, object]) -> Runner:
    try:
        return get_backend(backend).compile(artifact, knobs, GPU_PROFILE, POOL_BATCH)
    except BuildError as exc:
        if f"dropped {TENSORRT_PROVIDER}" in str(exc):
            pytest.skip(f"the TensorRT provider cannot load TensorRT here: {exc}")
        raise


@pytest.mark.gpu
@pytest.mark.parametrize(("backend", "precision"), GPU_CASES, ids=["-".join(case) for case in GPU_CASES])
def test_gpu_backend_matches_the_fp32_reference(backend: str, precision: str,
                                                artifact_for: ArtifactFor, device_cache: Path,
                                                compared_images: np.ndarray,
                                                reference_logits: np.ndarray) -> None:
    _require_gpu_provider(backend)
    artifact = artifact_for(backend, precision)
    with _compile_on_gpu(backend, artifact, {}) as runner:
        info = runner.describe()
        logits = run_in_batches(runner, compared_images)
        one = runner.run(compared_images[:1])
        assert runner.compile_seconds is not None and runner.compile_seconds > 0
    provider = PROVIDER_OF[backend]
    assert info["device"] == "cuda"
    assert info["execution_provider"] == provider
    assert info["providers"].split(",")[0] == provider
    assert f"{provider}=" in info["nodes_by_provider"]
    assert logits.dtype == np.float32 and logits.shape == (COMPARED_IMAGES, 10)
    tolerance = TOLERANCES[precision]
    if backend == "onnxruntime_tensorrt" and precision == "fp32":
        tolerance = replace(tolerance, atol=TRT_FP32_ATOL)
    # Batch 1 and the candidate batch compute the same first row (to the precision's rounding).
    np.testing.assert_allclose(one[0], logits[0], atol=tolerance.atol or SAME_ROW_INT8_ATOL)
    if tolerance.atol is not None:
        worst = float(np.abs(logits - reference_logits).max())
        assert worst <= tolerance.atol, f"{backend} {precision}: max |logit - fp32| = {worst:.3g}"
    assert_decisions_agree(logits, reference_logits, tolerance, f"{backend} {precision}")
    if backend == "onnxruntime_tensorrt":
        assert int(info["fused_subgraphs"]) >= 1
        assert info["trt_engine_cached"] == "false"
        assert Path(info["trt_engine_cache_path"]).is_relative_to(tensorrt_cache_dir(device_cache))
        assert list(Path(info["trt_engine_cache_path"]).glob("*.engine"))


@pytest.mark.gpu
def test_tensorrt_engine_is_built_once(artifact_for: ArtifactFor, device_cache: Path) -> None:
    _require_gpu_provider("onnxruntime_tensorrt")
    artifact = artifact_for("onnxruntime_tensorrt", "fp16")
    first = _compile_on_gpu("onnxruntime_tensorrt", artifact, {})
    second = _compile_on_gpu("onnxruntime_tensorrt", artifact, {})
    other = _compile_on_gpu("onnxruntime_tensorrt", artifact, {"trt_builder_optimization_level": 2})
    try:
        infos = [runner.describe() for runner in (first, second, other)]
    finally:
        for runner in (first, second, other):
            runner.close()
    assert [info["trt_engine_cached"] for info in infos] == ["false", "true", "false"]
    assert infos[0]["trt_engine_cache_path"] == infos[1]["trt_engine_cache_path"]
    assert infos[2]["trt_engine_cache_path"] != infos[0]["trt_engine_cache_path"]


@pytest.mark.gpu
@pytest.mark.parametrize("search", ["HEURISTIC", "DEFAULT"])
def test_cuda_conv_algo_search_knob(search: str, artifact_for: ArtifactFor,
                                    compared_images: np.ndarray, reference_logits: np.ndarray) -> None:
    _require_gpu_provider("onnxruntime_cuda")
    with _compile_on_gpu("onnxruntime_cuda", artifact_for("onnxruntime_cuda", "fp32"),
                         {"cudnn_conv_algo_search": search}) as runner:
        assert runner.describe()["cudnn_conv_algo_search"] == search
        logits = run_in_batches(runner, compared_images)
    np.testing.assert_allclose(logits, reference_logits, atol=FP32_ATOL)
