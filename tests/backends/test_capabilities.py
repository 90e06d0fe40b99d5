"""The capability table, and that the package stays light to import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dse.backends import BACKENDS, CAPABILITIES, get_backend, supports
from dse.backends.capabilities import BACKEND_NAMES, DEVICE_KINDS, PRECISIONS
from dse.spec.models import BackendName, DeviceKind, Precision


def test_table_covers_every_backend_precision_and_kind() -> None:
    assert set(BACKEND_NAMES) == set(BackendName.__args__) == set(BACKENDS)
    assert set(PRECISIONS) == set(Precision.__args__)
    assert set(DEVICE_KINDS) == set(DeviceKind.__args__)
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
        False, "torch eager int8 needs a quantized torch module; use onnxruntime for int8")
    ok, reason = supports("torch_compile", "int8", "cpu")
    assert not ok
    assert "use onnxruntime for int8" in reason


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_onnx_half_precisions_wait_for_their_transforms(precision: str) -> None:
    assert supports("onnxruntime", precision, "cpu") == (
        False, "dse builds no fp16/bf16 ONNX artifact yet (ONNX precision transforms arrive "
               "with the TensorRT/CUDA providers)")


@pytest.mark.parametrize("kind", ["cuda", "jetson"])
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16", "int8"])
def test_no_gpu_runner_for_onnxruntime_yet(kind: str, precision: str) -> None:
    assert supports("onnxruntime", precision, kind) == (
        False, "dse has no CUDA runner for onnxruntime yet")


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
    ok, reason = supports("tensorrt", "fp16", "cuda")
    assert not ok
    assert "backend='tensorrt'" in reason
    assert "known backends: ['onnxruntime', 'torch', 'torch_compile']" in reason


def test_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(KeyError,
                       match="unknown backend 'tvm'; known: onnxruntime, torch, torch_compile"):
        get_backend("tvm")


def test_importing_backends_imports_no_runtime() -> None:
    code = ("import sys, dse.backends; "
            "print([m for m in ('torch', 'onnxruntime', 'onnx') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
