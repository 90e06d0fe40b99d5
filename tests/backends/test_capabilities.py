"""The capability table, and that the package stays light to import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dse.backends import BACKENDS, CAPABILITIES, get_backend, supports
from dse.backends.capabilities import BACKEND_NAMES, DEVICE_KINDS, PRECISIONS
from dse.plugins.backends import BACKEND_DECLARATIONS
from dse.spec.models import DeviceKind, HardwareProfile, Precision

BUILT_IN = {"executorch", "litert", "onnxruntime", "onnxruntime_cuda", "onnxruntime_genai",
            "onnxruntime_tensorrt", "openvino", "tensorrt", "torch", "torch_compile", "tvm", "xla"}


def test_table_covers_every_backend_precision_and_kind() -> None:
    # Every list of backends comes from the one registration of each.
    assert set(BACKEND_NAMES) == set(BACKENDS) == set(BACKEND_DECLARATIONS) == BUILT_IN
    schema = HardwareProfile.model_json_schema()
    assert schema["properties"]["backends"]["items"]["enum"] == sorted(BUILT_IN)
    for name, backend in BACKENDS.items():
        assert backend.declaration is BACKEND_DECLARATIONS[name] and backend.name == name
    assert set(PRECISIONS) == set(Precision.__args__)
    # A replay device runs nothing: its table says what exists.
    assert set(DEVICE_KINDS) == set(DeviceKind.__args__) - {"replay"}
    assert len(CAPABILITIES) == len(BACKEND_NAMES) * len(PRECISIONS) * len(DEVICE_KINDS)


@pytest.mark.parametrize(("backend", "precision"), [
    ("onnxruntime", "fp32"), ("onnxruntime", "int8"),
    ("torch", "fp32"), ("torch", "fp16"), ("torch", "bf16"),
    ("torch_compile", "fp32"), ("torch_compile", "fp16"), ("torch_compile", "bf16")])
def test_supported_on_cpu(backend: str, precision: str) -> None:
    ok, reason = supports(backend, precision, "cpu")
    assert ok
    assert reason
    assert CAPABILITIES[backend, precision, "cpu"].min_compute_capability is None


def test_torch_int8_is_refused_with_the_way_out() -> None:
    assert supports("torch", "int8", "cpu") == (
        False, "torch eager int8 needs a quantized torch module; use onnxruntime or tensorrt for "
               "int8")
    ok, reason = supports("torch_compile", "int8", "cpu")
    assert not ok
    assert "use onnxruntime or tensorrt for int8" in reason
    assert "use tensorrt for fp8" in supports("torch", "fp8", "cuda")[1]


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp8"])
def test_onnxruntime_cpu_refuses_what_it_would_only_emulate(precision: str) -> None:
    ok, reason = supports("onnxruntime", precision, "cpu")
    assert not ok
    assert {"fp16": "computes in fp32", "bf16": "does not load",
            "fp8": "no fp8 arithmetic"}[precision] in reason


@pytest.mark.parametrize("kind", ["cuda", "jetson"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_cpu_provider_is_not_offered_on_gpu_devices(kind: str, precision: str) -> None:
    ok, reason = supports("onnxruntime", precision, kind)
    assert not ok
    assert "use onnxruntime_cuda or onnxruntime_tensorrt" in reason


@pytest.mark.parametrize("backend", ["onnxruntime_cuda", "onnxruntime_tensorrt", "tensorrt"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_gpu_only_backends_refuse_cpu_devices(backend: str, precision: str) -> None:
    ok, reason = supports(backend, precision, "cpu")
    assert not ok
    assert reason == f"{backend} needs a CUDA device; a cpu profile has none"


@pytest.mark.parametrize("kind", ["cuda", "jetson"])
def test_gpu_backends_and_their_precisions(kind: str) -> None:
    offered = {(b, p) for (b, p, k), entry in CAPABILITIES.items() if k == kind and entry.supported}
    assert {("onnxruntime_cuda", "fp32"), ("onnxruntime_cuda", "fp16")} <= offered
    assert ("onnxruntime_cuda", "int8") not in offered  # would run dequantized in fp32
    assert {("onnxruntime_tensorrt", p) for p in ("fp32", "fp16", "int8")} <= offered
    assert {("tensorrt", p) for p in ("fp32", "fp16", "bf16", "int8")} <= offered
    # fp8 needs compute capability 8.9; Jetson Orin is 8.7.
    assert (("tensorrt", "fp8") in offered) == (kind == "cuda")
    if kind == "cuda":
        assert CAPABILITIES["tensorrt", "fp8", "cuda"].min_compute_capability == 8.9
    assert CAPABILITIES["tensorrt", "bf16", kind].min_compute_capability == 8.0


def test_compute_capability_of_the_profile_prunes_below_the_floor() -> None:
    from dse.backends import supports_device

    assert supports_device("tensorrt", "fp8", "cuda", 9.0)[0]
    ok, reason = supports_device("tensorrt", "fp8", "cuda", 8.0)
    assert not ok
    assert reason == "tensorrt fp8 needs compute capability >= 8.9; the device's GPU has 8"
    assert not supports_device("torch", "bf16", "jetson", 7.2)[0]
    # A profile that does not name its GPU is checked when compiling, not here.
    assert supports_device("tensorrt", "fp8", "cuda", None)[0]


@pytest.mark.parametrize("kind", ["cuda", "jetson"])
@pytest.mark.parametrize("backend", ["torch", "torch_compile"])
def test_torch_runs_on_gpus_with_bf16_from_ampere(kind: str, backend: str) -> None:
    for precision in ("fp32", "fp16", "bf16"):
        assert supports(backend, precision, kind)[0]
    bf16 = CAPABILITIES[backend, "bf16", kind]
    assert bf16.min_compute_capability == 8.0
    assert "compute capability >= 8.0 for bf16" in bf16.requires
    # Inductor's GPU kernels are Triton's, which needs compute capability 7.0; eager runs on any.
    floor = 7.0 if backend == "torch_compile" else None
    assert CAPABILITIES[backend, "fp32", kind].min_compute_capability == floor
    assert not supports(backend, "int8", kind)[0]


def test_unknown_combination_names_what_is_known() -> None:
    ok, reason = supports("coreml", "fp16", "cuda")
    assert not ok
    assert "backend='coreml'" in reason
    assert ("known backends: ['executorch', 'litert', 'onnxruntime', 'onnxruntime_cuda', "
            "'onnxruntime_genai', 'onnxruntime_tensorrt', 'openvino', 'tensorrt', 'torch', "
            "'torch_compile', 'tvm', 'xla']") in reason


def test_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="unknown backend 'coreml'; known: executorch, litert, "
                                       "onnxruntime, onnxruntime_cuda, onnxruntime_genai, "
                                       "onnxruntime_tensorrt, "
                                       "openvino, tensorrt, torch, torch_compile, tvm, xla"):
        get_backend("coreml")


def test_importing_backends_imports_no_runtime() -> None:
    code = ("import sys, dse.backends; "
            "print([m for m in ('torch', 'onnxruntime', 'onnx') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
