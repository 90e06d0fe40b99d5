"""The capability table, and that the package stays light to import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dse.backends import BACKENDS, CAPABILITIES, get_backend, supports


@pytest.mark.parametrize(("backend", "precision"), [
    ("onnxruntime", "fp32"), ("onnxruntime", "int8"), ("torch", "fp32")])
def test_supported_on_cpu(backend: str, precision: str) -> None:
    ok, reason = supports(backend, precision, "cpu")
    assert ok
    assert reason


def test_torch_int8_is_refused_with_the_way_out() -> None:
    assert supports("torch", "int8", "cpu") == (
        False, "torch eager int8 needs a quantized torch module; use onnxruntime for int8")


@pytest.mark.parametrize("kind", ["cuda", "jetson"])
@pytest.mark.parametrize("backend", ["onnxruntime", "torch"])
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_no_gpu_runner_yet(kind: str, backend: str, precision: str) -> None:
    ok, reason = supports(backend, precision, kind)
    assert not ok
    assert kind in reason
    assert backend in reason


def test_unknown_combination_names_what_is_known() -> None:
    ok, reason = supports("tensorrt", "fp16", "cuda")
    assert not ok
    assert "backend='tensorrt'" in reason
    assert "known backends: ['onnxruntime', 'torch']" in reason


def test_every_registered_backend_has_entries() -> None:
    assert {key[0] for key in CAPABILITIES} == set(BACKENDS)


def test_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="unknown backend 'tvm'; known: onnxruntime, torch"):
        get_backend("tvm")


def test_importing_backends_imports_no_runtime() -> None:
    code = ("import sys, dse.backends; "
            "print([m for m in ('torch', 'onnxruntime', 'onnx') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
