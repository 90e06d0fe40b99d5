"""The standalone ``run.py`` of the torch, torch.compile and OpenVINO backends gives the runner's
own outputs, run in a fresh environment with only the runtime installed; the GPU backends'
``run.py`` at least compiles (they run where a GPU and their runtime are)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

from dse.accuracy.digits import DigitsSplit
from dse.artifacts.fingerprint import DEVICE_CACHE_ENV
from dse.backends import BACKENDS, Runner, get_backend
from dse.backends.onnxruntime.backend import SessionPlan, SessionSettings
from dse.backends.tensorrt.backend import bundle_settings
from dse.backends.tensorrt.engine import BuildPlan
from dse.backends.tensorrt.settings import EngineSettings
from dse.core.exceptions import BuildError
from dse.deploy.run_script import render_run_script
from dse.spec import HardwareProfile
from tests.backends._devices import NO_CUDA, has_cuda, missing_runtime
from tests.backends.conftest import CPU_PROFILE, POOL_BATCH, ArtifactFor, RunnerFor
from tests.deploy.standalone_check import run_standalone

# Ten images at batch 4: the last batch is short, padded by run.py and cut.
IMAGES = 10
# bf16 logits of the test cnn differ from fp32 ones by ~0.08: a run.py computing in the wrong
# precision fails these; the same kernels on the same threads agree to the bit here.
BF16_ATOL = 1e-3


def _check(tmp_path: Path, got: np.ndarray, expected: np.ndarray, printed: str, atol: float,
           requirement: str) -> None:
    assert got.shape == (IMAGES, 10) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=atol, rtol=0)
    assert f"outputs ({IMAGES}, 10)" in printed and "p50" in printed
    lines = (tmp_path / "bundle" / "requirements.txt").read_text().splitlines()
    assert any(line.startswith(f"{requirement}==") for line in lines), lines


@pytest.mark.parametrize(("precision", "atol"), [("fp32", 1e-5), ("bf16", BF16_ATOL)])
def test_torch_run_py_without_dse(tmp_path: Path, artifact_for: ArtifactFor,
                                  runner_pool: RunnerFor, backends_split: DigitsSplit,
                                  precision: str, atol: float) -> None:
    knobs, threads = ({}, 2) if precision == "fp32" else ({"num_threads": 1}, 1)
    got, expected, printed = run_standalone(
        tmp_path, "torch", runner_pool("torch", precision), artifact_for("torch", precision),
        knobs, threads, backends_split.x_test[:IMAGES])
    _check(tmp_path, got, expected, printed, atol, "torch")
    assert (tmp_path / "bundle" / "model" / "model.pt2").is_file()


def test_torch_autocast_run_py_without_dse(tmp_path: Path, artifact_for: ArtifactFor,
                                           backends_split: DigitsSplit) -> None:
    """``precision_mode: autocast``: the program stays fp32 and run.py computes under
    ``torch.autocast``, as the runner did."""
    import torch

    knobs = {"num_threads": 1, "precision_mode": "autocast"}
    artifact = artifact_for("torch", "bf16")
    threads = torch.get_num_threads()
    runner = get_backend("torch").compile(artifact, knobs, CPU_PROFILE, POOL_BATCH)
    torch.set_num_threads(threads)
    try:
        got, expected, printed = run_standalone(tmp_path, "torch", runner, artifact, knobs, 1,
                                                backends_split.x_test[:IMAGES])
    finally:
        runner.close()
    _check(tmp_path, got, expected, printed, BF16_ATOL, "torch")


def test_torch_compile_run_py_without_dse(tmp_path: Path, artifact_for: ArtifactFor,
                                          runner_pool: RunnerFor,
                                          backends_split: DigitsSplit) -> None:
    """run.py compiles the exported program with the runner's mode: inductor may fuse the
    exported graph a little differently from the module's, hence a looser bound than eager's."""
    got, expected, printed = run_standalone(
        tmp_path, "torch_compile", runner_pool("torch_compile", "fp32"),
        artifact_for("torch_compile", "fp32"), {}, 2, backends_split.x_test[:IMAGES],
        timeout_s=600)
    _check(tmp_path, got, expected, printed, 1e-4, "torch")


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_openvino_run_py_without_dse(tmp_path: Path, artifact_for: ArtifactFor,
                                     runner_pool: RunnerFor, backends_split: DigitsSplit,
                                     precision: str) -> None:
    """The same ONNX file compiled with the same properties runs the same kernels."""
    knobs, threads = ({}, 2) if precision == "fp32" else ({"num_threads": 1}, 1)
    runner = runner_pool("openvino", precision)
    got, expected, printed = run_standalone(
        tmp_path, "openvino", runner, artifact_for("openvino", precision), knobs, threads,
        backends_split.x_test[:IMAGES])
    _check(tmp_path, got, expected, printed, 1e-5, "openvino")
    settings = (tmp_path / "bundle" / "run.py").read_text()
    assert "'INFERENCE_PRECISION_HINT': 'f32'" in settings
    assert f"'INFERENCE_NUM_THREADS': {threads}" in settings


# --- models that choose their own SDPA kernel ---------------------------------------------------


@pytest.mark.parametrize(("attention", "kernel"), [("explicit", "default"), ("math", "math"),
                                                   ("flash", "flash")])
def test_torch_bundle_keeps_the_models_own_sdpa_kernel(attention: str, kernel: str) -> None:
    """An ``sdpa_kernel`` context inside the forward is not in an exported program: the kernel
    it restricts to is recorded for run.py, which runs the program under it."""
    import torch

    from dse.artifacts import Artifact
    from dse.backends.torch.bundle import PROGRAM
    from dse.models._encoder import EncoderClassifier

    module = EncoderClassifier(features=4, seq_len=8, hidden=16, num_heads=2, num_layers=1,
                               mlp_hidden=32, num_classes=3, attention=attention).eval()
    artifact = Artifact("torch", None, "fp32", (8, 4), 0, module)
    threads = torch.get_num_threads()
    with get_backend("torch").compile(artifact, {"num_threads": 1}, CPU_PROFILE, 2) as runner:
        torch.set_num_threads(threads)
        extras = get_backend("torch").bundle_extras(runner, artifact)
    assert extras.settings["sdpa_kernel"] == kernel and extras.model_file == PROGRAM
    program = torch.export.load(io.BytesIO(extras.files[PROGRAM])).module()
    batch = torch.randn(2, 8, 4)
    with torch.inference_mode():
        torch.testing.assert_close(program(batch), module(batch), rtol=0, atol=1e-6)


def test_torch_bundle_refuses_a_module_torch_export_cannot_trace() -> None:
    import torch

    from dse.artifacts import Artifact

    class DataDependent(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.flatten(1) if bool(x.sum() > 0) else -x.flatten(1)

    artifact = Artifact("torch", None, "fp32", (1, 8, 8), 0, DataDependent().eval())
    threads = torch.get_num_threads()
    with get_backend("torch").compile(artifact, {"num_threads": 1}, CPU_PROFILE, 2) as runner:
        torch.set_num_threads(threads)
        with pytest.raises(BuildError, match=r"torch\.export could not export the module"):
            get_backend("torch").bundle_extras(runner, artifact)


# --- GPU backends: run.py renders everywhere, runs where a GPU and the runtime are -------------

_BASE = {"precision": "fp16", "batch_size": 4, "input_shape": [1, 8, 8], "knobs": {},
         "threads": 2, "model_file": "model/model.onnx", "files": {},
         "inputs_file": "data/inputs.npy"}
_TRT_OPTIONS = {"device_id": "0", "trt_fp16_enable": "True", "trt_engine_cache_enable": "True",
                "trt_engine_cache_path": "/cache/ort-trt/x/engines/y",
                "trt_timing_cache_enable": "True", "trt_timing_cache_path": "/cache/ort-trt/x"}


def _ort_stub(backend: str, providers: tuple[tuple[str, dict[str, str]], ...]) -> Runner:
    """Just what ``ort_bundle_extras`` reads of a runner: its session plan."""
    plan = SessionPlan(backend, providers)
    return cast(Runner, SimpleNamespace(sibling=(plan, Path("m.onnx"),
                                                 SessionSettings(2, 1, "all"))))


def _gpu_settings(backend: str) -> dict[str, Any]:
    """run.py's settings for ``backend`` on a GPU, its extras from the backend's own code where
    that needs no GPU."""
    if backend == "onnxruntime_cuda":
        stub = _ort_stub(backend, (("CUDAExecutionProvider", {"device_id": "0",
                                                               "enable_cuda_graph": "1"}),))
        return {**_BASE, **get_backend(backend).bundle_extras(stub, cast(Any, None)).settings}
    if backend == "onnxruntime_tensorrt":
        stub = _ort_stub(backend, (("TensorrtExecutionProvider", _TRT_OPTIONS),
                                   ("CUDAExecutionProvider", {"device_id": "0"})))
        return {**_BASE, **get_backend(backend).bundle_extras(stub, cast(Any, None)).settings}
    if backend == "tensorrt":
        plan = BuildPlan(EngineSettings(None, 3, 2, False, None), ("STRONGLY_TYPED",), (), 4,
                         (1, 8, 8))
        return {**_BASE, **bundle_settings(plan, True, "10.3.0")}
    return {**_BASE, "model_file": "model/model.pt2", "files": {"model.pt2": "model/model.pt2"},
            "device": "cuda", "dtype": "float16", "precision_mode": "autocast",
            "sdpa_kernel": "flash", "cuda_graph": backend == "torch",
            **({"compile_mode": "max-autotune"} if backend == "torch_compile" else {})}


@pytest.mark.parametrize("backend", ["onnxruntime_cuda", "onnxruntime_tensorrt", "tensorrt",
                                     "torch", "torch_compile"])
def test_gpu_run_py_renders_as_python(backend: str) -> None:
    settings = _gpu_settings(backend)
    text = render_run_script(backend, {**settings, "backend": backend})
    compile(text, "run.py", "exec")
    assert "\ndef load(settings" in text and "\ndef main(load, settings" in text
    if backend == "onnxruntime_tensorrt":
        (_, options), _cuda = settings["providers"]
        assert options == {"device_id": "0", "trt_fp16_enable": "True"}  # no device cache paths
    standalone = get_backend(backend).declaration.standalone
    assert standalone is not None
    assert ("onnxruntime-gpu" in standalone.requirements) == backend.startswith("onnxruntime_")


def test_every_standalone_script_renders_as_python() -> None:
    for name in sorted(BACKENDS):
        if get_backend(name).declaration.standalone is not None:
            compile(render_run_script(name, {**_BASE, "backend": name}), "run.py", "exec")


GPU_PROFILE = HardwareProfile(name="test-cuda", kind="cuda",
                              backends=["onnxruntime_cuda", "onnxruntime_tensorrt", "tensorrt",
                                        "torch", "torch_compile"],
                              precisions=["fp32", "fp16"], max_threads=2)
# (backend, precision, knobs): each launch path of run.py once.
GPU_CASES = [("onnxruntime_cuda", "fp32", {}), ("onnxruntime_cuda", "fp32",
                                                {"enable_cuda_graph": True}),
             ("onnxruntime_tensorrt", "fp16", {}), ("tensorrt", "fp32", {}),
             ("tensorrt", "fp16", {"cuda_graph": True}), ("torch", "fp16", {"cuda_graph": True}),
             ("torch_compile", "fp16", {})]


@pytest.mark.gpu
@pytest.mark.parametrize(("backend", "precision", "knobs"), GPU_CASES,
                         ids=[f"{b}-{p}-{'-'.join(k) or 'default'}" for b, p, k in GPU_CASES])
def test_gpu_run_py_without_dse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                artifact_for: ArtifactFor, backends_split: DigitsSplit,
                                backend: str, precision: str, knobs: dict[str, object]) -> None:
    """run.py on the GPU matches the runner: TensorRT builds its engine anew (tactics may differ
    in the last bits of fp32), fp16 within fp16's rounding."""
    if not has_cuda():
        pytest.skip(NO_CUDA)
    missing = missing_runtime(backend)
    if missing is not None:
        pytest.skip(missing)
    monkeypatch.setenv(DEVICE_CACHE_ENV, str(tmp_path / "device-cache"))
    artifact = artifact_for(backend, precision)
    try:
        runner = get_backend(backend).compile(artifact, knobs, GPU_PROFILE, POOL_BATCH)
    except BuildError as exc:
        if "dropped TensorrtExecutionProvider" in str(exc):
            pytest.skip(f"the TensorRT provider cannot load TensorRT here: {exc}")
        raise
    with runner:
        got, expected, printed = run_standalone(tmp_path, backend, runner, artifact, knobs, 2,
                                                backends_split.x_test[:IMAGES], timeout_s=900)
    atol = 1e-3 if precision == "fp32" else 5e-2
    assert got.shape == (IMAGES, 10)
    np.testing.assert_allclose(got, expected, atol=atol, rtol=0)
    assert "p50" in printed
