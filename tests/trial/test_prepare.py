"""prepare_candidate: real training, building and compiling; accuracy of the deployed runner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from dse.accuracy import load_digits_split
from dse.core.candidate import Candidate
from dse.core.exceptions import BuildError
from dse.spec import HardwareProfile, TrainingSpec
from dse.trial.prepare import PreparedCandidate, prepare_candidate

TINY = {"num_stages": 2, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}
FAST = TrainingSpec(epochs=2, batch_size=64, learning_rate=0.02, seed=0, threads=1)
PROFILE = HardwareProfile(name="test-cpu", kind="cpu", backends=["onnxruntime", "torch"],
                          precisions=["fp32", "int8"], max_threads=1)
METRICS = {"accuracy", "params_m", "model_size_mb", "build_seconds", "train_seconds",
           "max_abs_error", "rel_l2_error", "top1_agreement", "first_call_ms", "macs_m",
           "flops_m", "weight_mb", "activation_mb", "arithmetic_intensity", "proxy_synflow",
           "proxy_naswot", "proxy_grad_norm"}


def _candidate(backend: str, precision: str, batch_size: int = 8, **changes: Any) -> Candidate:
    fields: dict[str, Any] = {"family": "cnn", "arch": TINY, "precision": precision,
                              "batch_size": batch_size, "backend": backend, "knobs": {},
                              "device_profile": PROFILE.name}
    return Candidate(**{**fields, **changes})


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def prepared(cache_dir: Path) -> Iterator[dict[str, PreparedCandidate]]:
    """fp32 then int8 through ONNX Runtime, then eager torch, in one shared cache."""
    import torch

    threads = torch.get_num_threads()
    done = {
        "fp32": prepare_candidate(_candidate("onnxruntime", "fp32", 7), FAST, PROFILE, cache_dir),
        "int8": prepare_candidate(_candidate("onnxruntime", "int8", 7), FAST, PROFILE, cache_dir),
        "torch": prepare_candidate(_candidate("torch", "fp32", 7), FAST, PROFILE, cache_dir),
    }
    yield done
    for item in done.values():
        item.runner.close()
    torch.set_num_threads(threads)


def test_metrics_are_complete_and_plausible(prepared: dict[str, PreparedCandidate]) -> None:
    for item in prepared.values():
        assert set(item.metrics) == METRICS
        assert all(isinstance(v, float) and np.isfinite(v) for v in item.metrics.values())
        assert 0.0 <= item.metrics["accuracy"] <= 1.0
        assert item.metrics["params_m"] > 0
        assert item.metrics["model_size_mb"] > 0
    fp32, int8, eager = prepared["fp32"], prepared["int8"], prepared["torch"]
    assert fp32.metrics["params_m"] == int8.metrics["params_m"] == eager.metrics["params_m"]
    # Trained once, then loaded; exported once, then reused by the int8 build.
    assert fp32.metrics["train_seconds"] > 0
    assert int8.metrics["train_seconds"] == eager.metrics["train_seconds"] == 0.0
    assert fp32.metrics["build_seconds"] > 0
    assert int8.metrics["build_seconds"] > 0
    assert eager.metrics["build_seconds"] == 0.0
    # Fidelity against the fp32 torch reference: eager is the reference itself, ORT fp32 agrees to
    # float rounding, int8 moves the numbers but keeps most top-1 decisions.
    assert eager.metrics["max_abs_error"] < 1e-5  # same module; thread count changes rounding
    assert fp32.metrics["max_abs_error"] < 1e-3
    assert fp32.metrics["top1_agreement"] == 1.0
    assert int8.metrics["max_abs_error"] > fp32.metrics["max_abs_error"]
    assert int8.metrics["rel_l2_error"] > 0
    assert int8.metrics["top1_agreement"] >= 0.8


def test_example_is_a_test_batch_of_the_candidates_size(
        prepared: dict[str, PreparedCandidate]) -> None:
    x_test = load_digits_split(FAST.seed).x_test
    for item in prepared.values():
        np.testing.assert_array_equal(item.example, x_test[:7])
        assert item.runner.run(item.example).shape == (7, 10)


def test_int8_accuracy_is_what_the_int8_session_computes(
        prepared: dict[str, PreparedCandidate]) -> None:
    import onnxruntime as ort

    int8 = prepared["int8"]
    path = int8.provenance["artifact_path"]
    model = onnx.load(path)
    assert "QuantizeLinear" in {node.op_type for node in model.graph.node}
    # Score the int8 file independently, with a session of our own, in batches of 7.
    split = load_digits_split(FAST.seed)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    predictions = np.concatenate([
        session.run(None, {"input": split.x_test[i:i + 7]})[0].argmax(1)
        for i in range(0, len(split.x_test), 7)])
    assert int8.metrics["accuracy"] == float(np.mean(predictions == split.y_test))
    # The int8 runner computes other logits than fp32 (it is not fp32's number copied over).
    fp32_logits = prepared["fp32"].runner.run(split.x_test)
    int8_logits = int8.runner.run(split.x_test)
    assert not np.allclose(int8_logits, fp32_logits, atol=1e-4)


def test_fp32_runners_agree_with_the_trained_accuracy(
        prepared: dict[str, PreparedCandidate]) -> None:
    fp32, eager = prepared["fp32"], prepared["torch"]
    assert fp32.metrics["accuracy"] == pytest.approx(float(fp32.provenance["fp32_accuracy"]),
                                                     abs=1 / 360)
    assert eager.metrics["accuracy"] == pytest.approx(float(eager.provenance["fp32_accuracy"]),
                                                      abs=1e-6)


def test_provenance_names_runner_and_sources(prepared: dict[str, PreparedCandidate]) -> None:
    fp32, int8, eager = prepared["fp32"], prepared["int8"], prepared["torch"]
    assert fp32.provenance["device"] == "CPUExecutionProvider"
    assert fp32.provenance["threads"] == "1"  # the profile's max_threads
    assert int8.provenance["precision"] == "int8"
    assert eager.provenance["backend"] == "torch"
    assert eager.provenance["artifact_path"] == ""
    assert fp32.provenance["weights_cached"] == "False"
    assert int8.provenance["weights_cached"] == "True"
    assert fp32.provenance["arch_id"] == _candidate("torch", "fp32").arch_id


def test_a_batch_larger_than_the_test_split_cycles(cache_dir: Path) -> None:
    big = prepare_candidate(_candidate("onnxruntime", "fp32", 400), FAST, PROFILE, cache_dir)
    with big.runner:
        assert big.example.shape == (400, 1, 8, 8)
        assert big.runner.run(big.example).shape == (400, 10)
        assert big.metrics["build_seconds"] == 0.0  # the export is cached


@pytest.mark.parametrize(("candidate", "profile", "message"), [
    (_candidate("torch", "int8"), PROFILE,
     "torch eager int8 needs a quantized torch module; use onnxruntime or tensorrt for int8"),
    (_candidate("onnxruntime", "fp32"), PROFILE.model_copy(update={"kind": "cuda"}),
     "on a GPU device it would measure the host CPU"),
    (_candidate("torch", "fp32"), PROFILE.model_copy(update={"backends": ["onnxruntime"]}),
     "device 'test-cpu' has no backend 'torch'"),
    (_candidate("onnxruntime", "int8"), PROFILE.model_copy(update={"precisions": ["fp32"]}),
     "does not support precision 'int8'"),
    (_candidate("onnxruntime", "fp32", knobs={"threads": 2}), PROFILE,
     r"no knob\(s\) \['threads'\]; allowed: \['graph_optimization_level', "
     r"'inter_op_threads', 'intra_op_threads'\]"),
    (_candidate("onnxruntime", "fp32", arch={**TINY, "kernel_size": 4}), PROFILE,
     "kernel_size must be 3 or 5, got 4"),
    (_candidate("onnxruntime", "fp32", family="mlp"), PROFILE, "unknown model family 'mlp'"),
])
def test_impossible_candidates_fail_before_any_training(
        tmp_path: Path, candidate: Candidate, profile: HardwareProfile, message: str) -> None:
    with pytest.raises(BuildError, match=message):
        prepare_candidate(candidate, FAST, profile, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_torch_compile_reports_its_compile_time_as_a_metric(
        cache_dir: Path, prepared: dict[str, PreparedCandidate]) -> None:
    profile = PROFILE.model_copy(update={"backends": [*PROFILE.backends, "torch_compile"]})
    compiled = prepare_candidate(_candidate("torch_compile", "fp32", 7), FAST, profile, cache_dir)
    with compiled.runner:
        assert compiled.metrics["compile_seconds"] > 0
        assert compiled.metrics["top1_agreement"] == 1.0
    assert "compile_seconds" not in prepared["fp32"].metrics  # ONNX Runtime compiles nothing here


def test_graph_statistics_describe_the_architecture(
        prepared: dict[str, PreparedCandidate]) -> None:
    """MACs are the architecture's, whatever runtime or precision deploys it; int8 weights take a
    quarter of the bytes or so (int32 biases and scales keep it above exactly a quarter)."""
    fp32, int8, eager = (prepared[k].metrics for k in ("fp32", "int8", "torch"))
    assert fp32["macs_m"] == int8["macs_m"] == eager["macs_m"] > 0
    assert fp32["flops_m"] >= 2 * fp32["macs_m"]
    assert 0.2 * fp32["weight_mb"] < int8["weight_mb"] < 0.5 * fp32["weight_mb"]
    assert fp32["arithmetic_intensity"] > 0
