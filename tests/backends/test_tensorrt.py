"""The tensorrt backend: what needs no GPU (knobs, versions, typing, cache keys, the missing-package
error) runs everywhere; engine builds run where TensorRT and a CUDA device are present and are
skipped, naming what is missing, elsewhere.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dse.accuracy.digits import DigitsSplit
from dse.artifacts import Artifact, ArtifactCache
from dse.artifacts.fingerprint import DEVICE_CACHE_ENV
from dse.backends import BACKENDS, PROVENANCE_KEYS, get_backend
from dse.backends.tensorrt.settings import (
    ENGINE_SUBFOLDER,
    EngineSettings,
    check_compute_capability,
    engine_cache_root,
    engine_key,
    network_flag_names,
    onnx_content_id,
    precision_flags,
    resolve_settings,
    resolve_typing,
    torch_dtype_name,
)
from dse.backends.tensorrt.version import import_tensorrt, parse_version
from dse.core.exceptions import BuildError
from dse.spec import HardwareProfile
from dse.testing.backends import check_runner
from tests.backends._devices import NO_CUDA, has_cuda
from tests.backends.conftest import COMPARED_IMAGES, POOL_BATCH, ArtifactFor

CUDA_PROFILE = HardwareProfile(name="test-cuda", kind="cuda", backends=["tensorrt"],
                               precisions=["fp32", "fp16"], max_threads=2)
CPU_PROFILE = HardwareProfile(name="test-cpu", kind="cpu", backends=["tensorrt"],
                              precisions=["fp32"], max_threads=2)
FINGERPRINT = {"gpu_name": "NVIDIA H200", "compute_capability": "9.0", "cuda_runtime": "12.8",
               "driver": "570.1", "tensorrt": "tensorrt==10.9.0", "onnxruntime": "absent",
               "l4t": "absent"}
SETTINGS = EngineSettings(workspace_mb=None, optimization_level=3, builder_threads=2, tf32=False,
                          strongly_typed=None)


def _onnx_file(path: Path, op_type: str = "Identity", domain: str = "") -> Path:
    """A one-node model, input (batch, 1, 8, 8) -> output ``logits``."""
    node = helper.make_node(op_type, ["input"], ["logits"], domain=domain)
    graph = helper.make_graph(
        [node], "one-node",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1, 8, 8])])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    return path


def _artifact(path: Path, precision: str = "fp32") -> Artifact:
    return Artifact("onnx", path, precision, (1, 8, 8), path.stat().st_size)


def _tensorrt_importable() -> bool:
    try:
        importlib.import_module("tensorrt")
    except (ImportError, OSError):
        return False
    return True


# --- no GPU needed ---------------------------------------------------------------------------


def test_registered_with_its_knobs() -> None:
    backend = BACKENDS["tensorrt"]
    assert backend.knobs == {"workspace_mb", "builder_optimization_level", "builder_threads",
                             "tf32", "strongly_typed", "cuda_graph"}
    assert backend.thread_knob == "builder_threads"


@pytest.mark.skipif(_tensorrt_importable(), reason="tensorrt is installed here")
def test_missing_tensorrt_is_a_build_error_naming_what_to_install(tmp_path: Path) -> None:
    artifact = _artifact(_onnx_file(tmp_path / "model.onnx"))
    with pytest.raises(BuildError) as caught:
        get_backend("tensorrt").compile(artifact, {}, CUDA_PROFILE, 4)
    message = str(caught.value)
    assert message.startswith("the tensorrt backend cannot import tensorrt (ModuleNotFoundError")
    assert "JetPack's python3-libnvinfer" in message
    assert "`pip install tensorrt-cu12` (or `pip install tensorrt`)" in message
    with pytest.raises(BuildError, match="cannot import tensorrt"):
        import_tensorrt()


@pytest.mark.parametrize(("text", "major", "minor", "strong_only"), [
    ("10.0.1", 10, 0, False), ("10.3.0", 10, 3, False), ("10.13.2.6", 10, 13, False),
    ("11.0.0.1", 11, 0, True), (" 11.4.1 ", 11, 4, True)])
def test_version_is_read_from_the_version_string(text: str, major: int, minor: int,
                                                 strong_only: bool) -> None:
    version = parse_version(text)
    assert (version.major, version.minor) == (major, minor)
    assert version.text == text.strip()
    assert version.strongly_typed_only is strong_only


@pytest.mark.parametrize(("text", "match"), [
    ("8.6.1.6", r"older than what dse supports \(majors \[10, 11\]\).*upgrade to 10 or 11"),
    ("9.3.0", "older than"),
    ("12.0.0", r"newer than what dse supports \(majors \[10, 11\]\).*use TensorRT 10 or 11"),
    ("", "cannot read the TensorRT version ''"),
    ("ten.1", "cannot read the TensorRT version 'ten.1'")])
def test_other_versions_are_refused(text: str, match: str) -> None:
    with pytest.raises(BuildError, match=match):
        parse_version(text)


def test_typing_is_weak_by_default_on_10_and_always_strong_on_11() -> None:
    ten, eleven = parse_version("10.9.0"), parse_version("11.0.0")
    assert resolve_typing(ten, None) is False
    assert resolve_typing(ten, True) is True
    assert resolve_typing(eleven, None) is True
    assert resolve_typing(eleven, True) is True
    with pytest.raises(BuildError, match="TensorRT 11 builds strongly typed networks only"):
        resolve_typing(eleven, False)
    assert ten.api_label(False) == "weakly typed 10"
    assert eleven.api_label(True) == "strongly typed 11"


@pytest.mark.parametrize(("precision", "flags"), [
    ("fp32", ()), ("fp16", ("FP16",)), ("bf16", ("BF16",)), ("int8", ("INT8",)),
    ("fp8", ("FP8",))])
def test_weak_typing_sets_the_precision_flag_and_strong_typing_none(
        precision: str, flags: tuple[str, ...]) -> None:
    assert precision_flags(precision, strongly_typed=False) == flags
    assert precision_flags(precision, strongly_typed=True) == ()


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(BuildError, match=r"builds precisions \['fp32', 'fp16', 'bf16', 'int8', "
                                         r"'fp8'\], got 'int4'"):
        precision_flags("int4", strongly_typed=False)


def test_strongly_typed_flag_only_where_it_is_an_opt_in() -> None:
    ten, eleven = parse_version("10.3.0"), parse_version("11.0.0")
    assert network_flag_names(ten, strongly_typed=False) == ()
    assert network_flag_names(ten, strongly_typed=True) == ("STRONGLY_TYPED",)
    # Deprecated and ignored in 11: every network is strongly typed there.
    assert network_flag_names(eleven, strongly_typed=True) == ()


def test_engine_key_names_everything_the_engine_depends_on(tmp_path: Path) -> None:
    def key(**change: object) -> dict[str, object]:
        args: dict[str, object] = {
            "onnx_id": "0123456789abcdef", "precision": "fp16", "settings": SETTINGS,
            "strongly_typed": False, "batch_size": 8, "fingerprint": FINGERPRINT,
            "tensorrt_version": "10.9.0.34"}
        args.update(change)
        return engine_key(**args)  # type: ignore[arg-type]  # values of several types

    base = key()
    assert key() == base
    assert base["profile"] == (1, 8, 8)
    variants = [
        key(onnx_id="fedcba9876543210"), key(precision="fp32"),
        key(settings=replace(SETTINGS, workspace_mb=512)),
        key(settings=replace(SETTINGS, optimization_level=5)),
        key(settings=replace(SETTINGS, tf32=True)), key(strongly_typed=True), key(batch_size=16),
        key(fingerprint={**FINGERPRINT, "driver": "575.2"}),
        key(fingerprint={**FINGERPRINT, "gpu_name": "NVIDIA A100"}),
        key(tensorrt_version="10.9.0.35")]
    cache = ArtifactCache(tmp_path)
    names = {cache.path_for(k, ".engine").name for k in [base, *variants]}
    assert len(names) == 1 + len(variants)
    # Builder threads change how fast an engine builds, not what is built.
    assert key(settings=replace(SETTINGS, builder_threads=16)) == base


def test_onnx_content_id_is_the_cache_name_or_a_hash_of_the_bytes(tmp_path: Path) -> None:
    named = _onnx_file(tmp_path / "0123456789abcdef.onnx")
    assert onnx_content_id(named) == "0123456789abcdef"
    plain = _onnx_file(tmp_path / "model.onnx")
    same = _onnx_file(tmp_path / "copy.onnx")
    other = _onnx_file(tmp_path / "other.onnx", op_type="Relu")
    assert onnx_content_id(plain) == onnx_content_id(same) != onnx_content_id(other)
    assert len(onnx_content_id(plain)) == 16


def test_engine_cache_folder_comes_from_the_device_cache_variable(tmp_path: Path) -> None:
    assert engine_cache_root({DEVICE_CACHE_ENV: str(tmp_path)}) == tmp_path / "trt-engines"
    default = engine_cache_root({})
    assert default.name == ENGINE_SUBFOLDER
    assert default.parent.name.startswith("dse-device-cache-")
    assert engine_cache_root({DEVICE_CACHE_ENV: ""}) == default


def test_knob_defaults() -> None:
    assert resolve_settings({}, default_threads=6) == EngineSettings(
        workspace_mb=None, optimization_level=3, builder_threads=6, tf32=False,
        strongly_typed=None)
    assert resolve_settings({"workspace_mb": 1024, "builder_optimization_level": 0,
                             "builder_threads": 1, "tf32": True, "strongly_typed": True},
                            default_threads=6) == EngineSettings(1024, 0, 1, True, True)


@pytest.mark.parametrize(("knob", "value", "allowed"), [
    ("workspace_mb", 0, "an integer number of MiB >= 1"),
    ("workspace_mb", -64, "an integer number of MiB >= 1"),
    ("workspace_mb", 1.5, "an integer number of MiB >= 1"),
    ("workspace_mb", "512", "an integer number of MiB >= 1"),
    ("workspace_mb", True, "an integer number of MiB >= 1"),
    ("builder_optimization_level", 6, "an integer from 0 to 5"),
    ("builder_optimization_level", -1, "an integer from 0 to 5"),
    ("builder_optimization_level", 2.0, "an integer from 0 to 5"),
    ("builder_threads", 0, "an integer >= 1"),
    ("tf32", "yes", "true or false"),
    ("tf32", 1, "true or false"),
    ("strongly_typed", "true", "true or false")])
def test_bad_knob_value_is_a_build_error_before_tensorrt_is_imported(
        tmp_path: Path, knob: str, value: object, allowed: str) -> None:
    artifact = _artifact(_onnx_file(tmp_path / "model.onnx"))
    with pytest.raises(BuildError) as caught:
        get_backend("tensorrt").compile(artifact, {knob: value}, CUDA_PROFILE, 4)
    assert str(caught.value) == f"knob {knob!r} must be {allowed}, got {value!r}"


def test_unknown_knob_lists_the_allowed_ones(tmp_path: Path) -> None:
    artifact = _artifact(_onnx_file(tmp_path / "model.onnx"))
    with pytest.raises(BuildError, match=r"no knob\(s\) \['fp16'\]; allowed: \['builder_opt"):
        get_backend("tensorrt").compile(artifact, {"fp16": True}, CUDA_PROFILE, 4)


def test_cpu_device_and_torch_artifact_are_refused(tmp_path: Path) -> None:
    backend = get_backend("tensorrt")
    artifact = _artifact(_onnx_file(tmp_path / "model.onnx"))
    with pytest.raises(BuildError, match="tensorrt needs a CUDA device; device 'test-cpu' is a "
                                         "cpu device"):
        backend.compile(artifact, {}, CPU_PROFILE, 4)
    torch_artifact = Artifact("torch", None, "fp32", (1, 8, 8), 0)
    with pytest.raises(BuildError, match="builds engines from ONNX files, got a 'torch' artifact"):
        backend.compile(torch_artifact, {}, CUDA_PROFILE, 4)
    with pytest.raises(BuildError, match="got 'int4'"):
        backend.compile(replace(artifact, precision="int4"), {}, CUDA_PROFILE, 4)


@pytest.mark.parametrize(("precision", "kind", "capability", "refusal"), [
    ("fp32", "cuda", (6, 1), None), ("fp16", "jetson", (7, 2), None),
    ("int8", "cuda", (7, 5), None), ("bf16", "cuda", (8, 0), None), ("fp8", "cuda", (8, 9), None),
    ("fp8", "cuda", (9, 0), None), ("fp8", "cuda", (12, 0), None),
    ("bf16", "cuda", (7, 5), "tensorrt bf16 needs CUDA compute capability >= 8.0, but GPU X has "
                             "7.5"),
    ("fp8", "cuda", (8, 6), "tensorrt fp8 needs CUDA compute capability >= 8.9, but GPU X has "
                            "8.6"),
    ("fp8", "jetson", (8, 7), "Jetson GPUs (Orin: compute capability 8.7) have no fp8")])
def test_compute_capability_is_checked_against_the_capability_table(
        precision: str, kind: str, capability: tuple[int, int], refusal: str | None) -> None:
    if refusal is None:
        check_compute_capability(precision, kind, capability, "GPU X")
        return
    with pytest.raises(BuildError) as caught:
        check_compute_capability(precision, kind, capability, "GPU X")
    assert str(caught.value).startswith(refusal)


def test_engine_io_types_map_to_torch_dtypes() -> None:
    assert torch_dtype_name("FLOAT") == "float32"
    assert torch_dtype_name("HALF") == "float16"
    assert torch_dtype_name("BF16") == "bfloat16"
    with pytest.raises(BuildError, match="an I/O tensor of type FP8"):
        torch_dtype_name("FP8")


# --- TensorRT and a CUDA GPU -----------------------------------------------------------------


@pytest.fixture
def engine_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Skip without TensorRT or CUDA; else a private engine cache for the test."""
    try:
        importlib.import_module("tensorrt")
    except (ImportError, OSError) as exc:
        pytest.skip(f"tensorrt cannot be imported ({type(exc).__name__}: {exc})")
    if not has_cuda():
        pytest.skip(NO_CUDA)
    monkeypatch.setenv(DEVICE_CACHE_ENV, str(tmp_path / "device-cache"))
    return tmp_path / "device-cache" / ENGINE_SUBFOLDER


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_engine_matches_the_fp32_reference(engine_cache: Path, precision: str,
                                           artifact_for: ArtifactFor, backends_split: DigitsSplit,
                                           reference_logits: np.ndarray) -> None:
    with get_backend("tensorrt").compile(artifact_for("tensorrt", precision), {}, CUDA_PROFILE,
                                         POOL_BATCH) as runner:
        check_runner(runner, precision, backends_split.x_test[:COMPARED_IMAGES], reference_logits)
        info = runner.describe()
    assert set(PROVENANCE_KEYS) <= set(info)
    assert all(isinstance(value, str) for value in info.values())
    assert (info["backend"], info["device"], info["precision"]) == ("tensorrt", "cuda", precision)
    assert info["threads"] == info["builder_threads"] == "2"
    major = info["backend_version"].split(".")[0]
    assert info["tensorrt_api"] == ("weakly typed 10" if major == "10" else "strongly typed 11")
    if major == "10":
        assert info["precision_flags"] == ("FP16" if precision == "fp16" else "none")
    assert info["tf32"] == "disabled"
    assert info["optimization_profile"] == f"batch min 1 / opt {POOL_BATCH} / max {POOL_BATCH}"
    assert info["input_dtype"] == info["output_dtype"] == "float32"
    assert info["engine_cached"] == "False"
    assert Path(info["engine_path"]).parent == engine_cache


@pytest.mark.gpu
def test_second_compile_loads_the_cached_engine(engine_cache: Path, artifact_for: ArtifactFor,
                                                backends_split: DigitsSplit) -> None:
    backend = get_backend("tensorrt")
    images = backends_split.x_test[:POOL_BATCH]
    with backend.compile(artifact_for("tensorrt", "fp32"), {}, CUDA_PROFILE, POOL_BATCH) as first:
        built = first.describe()
        logits = first.run(images)
    with backend.compile(artifact_for("tensorrt", "fp32"), {}, CUDA_PROFILE, POOL_BATCH) as again:
        cached = again.describe()
        np.testing.assert_array_equal(again.run(images), logits)
        # What was loaded, not how fast: a busy GPU host can make a load slower than a build.
        assert again.compile_seconds is not None and first.compile_seconds is not None
    assert (built["engine_cached"], cached["engine_cached"]) == ("False", "True")
    assert cached["engine_path"] == built["engine_path"]
    assert cached["engine_build_seconds"] == "0.000"
    assert built["timing_cache"].startswith("new ")
    assert len(list(engine_cache.glob("*.timing"))) == 1
    # Another batch size is another engine; its build reuses the device's timing cache.
    with backend.compile(artifact_for("tensorrt", "fp32"), {}, CUDA_PROFILE, 2) as other:
        assert other.describe()["engine_cached"] == "False"
        assert other.describe()["timing_cache"].startswith("reused ")
    assert len(list(engine_cache.glob("*.engine"))) == 2


@pytest.mark.gpu
def test_runs_from_several_threads_at_once(engine_cache: Path, artifact_for: ArtifactFor,
                                           backends_split: DigitsSplit) -> None:
    images = np.ascontiguousarray(backends_split.x_test[:POOL_BATCH])
    with get_backend("tensorrt").compile(artifact_for("tensorrt", "fp32"), {}, CUDA_PROFILE,
                                         POOL_BATCH) as runner:
        want = runner.run(images)
        outputs: list[list[np.ndarray]] = [[] for _ in range(3)]

        def work(into: list[np.ndarray]) -> None:
            into.extend(runner.run(images) for _ in range(20))

        threads = [threading.Thread(target=work, args=(into,)) for into in outputs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [len(into) for into in outputs] == [20, 20, 20]  # no thread died
        for result in (logits for into in outputs for logits in into):
            np.testing.assert_array_equal(result, want)
        assert runner.describe()["execution_contexts"] == "4"
        with pytest.raises(ValueError, match="this engine runs 1 to 4"):
            runner.run(backends_split.x_test[:POOL_BATCH + 1])
    with pytest.raises(RuntimeError, match="closed"):
        runner.run(images)


@pytest.mark.gpu
def test_unsupported_operator_is_a_build_error_with_the_parser_message(
        engine_cache: Path, tmp_path: Path) -> None:
    path = _onnx_file(tmp_path / "model.onnx", op_type="NoSuchOperator", domain="com.example")
    with pytest.raises(BuildError) as caught:
        get_backend("tensorrt").compile(_artifact(path), {}, CUDA_PROFILE, 2)
    message = str(caught.value)
    assert message.startswith("TensorRT's ONNX parser cannot load model.onnx: ")
    assert "NoSuchOperator" in message  # the parser's own words name the operator
    assert not list(engine_cache.glob("*.engine"))
