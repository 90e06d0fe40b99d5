"""int8 static quantization: QDQ, per-channel int8 weights, int8 activations, runs in ORT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from dse.accuracy.digits import DigitsSplit
from dse.artifacts import quantize_int8
from dse.core.exceptions import BuildError


@pytest.fixture(scope="module")
def int8_onnx(fp32_onnx: Path, build_split: DigitsSplit,
              tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("int8") / "model.int8.onnx"
    quantize_int8(fp32_onnx, out, build_split.x_train[:256])
    return out


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    result: np.ndarray = session.run(["logits"], {"input": x})[0]
    return result


def test_only_the_output_file_is_written(int8_onnx: Path) -> None:
    assert list(int8_onnx.parent.iterdir()) == [int8_onnx]


def test_graph_is_qdq_with_int8_per_channel_weights(int8_onnx: Path) -> None:
    model = onnx.load(str(int8_onnx))
    ops = {node.op_type for node in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    initializers = {t.name: t for t in model.graph.initializer}
    conv_weights = [node for node in model.graph.node if node.op_type == "DequantizeLinear"
                    and initializers.get(node.input[0]) is not None
                    and numpy_helper.to_array(initializers[node.input[0]]).ndim == 4]
    assert conv_weights, "no quantized conv weights"
    for node in conv_weights:
        weight = numpy_helper.to_array(initializers[node.input[0]])
        scale = numpy_helper.to_array(initializers[node.input[1]])
        assert weight.dtype == np.int8
        assert scale.shape == (weight.shape[0],)  # one scale per output channel
    activation_zero_points = [
        numpy_helper.to_array(initializers[node.input[2]]) for node in model.graph.node
        if node.op_type == "QuantizeLinear" and len(node.input) > 2]
    assert activation_zero_points
    assert {zp.dtype for zp in activation_zero_points} == {np.dtype(np.int8)}


def test_int8_runs_close_to_fp32_but_not_equal(int8_onnx: Path, fp32_onnx: Path,
                                               build_split: DigitsSplit) -> None:
    x = build_split.x_test[:64]
    fp32, int8 = _run(fp32_onnx, x), _run(int8_onnx, x)
    assert int8.shape == fp32.shape == (64, 10)
    assert not np.array_equal(int8, fp32)
    assert np.mean(int8.argmax(1) == fp32.argmax(1)) > 0.8
    # The dynamic batch axis survives quantization.
    assert _run(int8_onnx, x[:3]).shape == (3, 10)


def test_bad_calibration_is_a_build_error(fp32_onnx: Path, tmp_path: Path) -> None:
    with pytest.raises(BuildError,
                       match=r"non-empty \(N, \*sample_shape\) array, got shape \(0, 1, 8, 8\)"):
        quantize_int8(fp32_onnx, tmp_path / "q.onnx", np.zeros((0, 1, 8, 8), np.float32))
    with pytest.raises(BuildError, match=r"got shape \(8,\)"):
        quantize_int8(fp32_onnx, tmp_path / "q.onnx", np.zeros((8,), np.float32))


def test_a_broken_model_is_a_build_error(tmp_path: Path, build_split: DigitsSplit) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"this is not a protobuf")
    with pytest.raises(BuildError, match=r"int8 quantization of broken\.onnx failed"):
        quantize_int8(broken, tmp_path / "q.onnx", build_split.x_train[:8])
    assert not (tmp_path / "q.onnx").exists()
