"""fp32 ONNX -> int8 ONNX: ONNX Runtime static QDQ quantization, calibrated on real images."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dse.core import BuildError

CALIBRATION_BATCH = 32


class _Batches:
    """ONNX Runtime's CalibrationDataReader protocol over an array of images."""

    def __init__(self, input_name: str, images: np.ndarray) -> None:
        self._feeds: Iterator[dict[str, np.ndarray]] = (
            {input_name: images[first:first + CALIBRATION_BATCH]}
            for first in range(0, len(images), CALIBRATION_BATCH))

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def quantize_int8(fp32_path: Path, out_path: Path, calibration: np.ndarray, *,
                  symmetric: bool = False) -> None:
    """Write an int8 copy of ``fp32_path`` to ``out_path``.

    ``symmetric`` quantizes activations with zero points of 0, as TensorRT requires of Q/DQ
    graphs (it rejects non-zero zero points); ONNX Runtime's CPU provider is more accurate with
    asymmetric activation ranges, so that is the default.

    Weights are int8 per output channel, activations int8 per tensor with ranges from min/max
    calibration over ``calibration`` (N samples of the model's input, float; typically training data). The
    model is pre-processed first (shape inference and fusion), as ONNX Runtime recommends, so
    that fused Conv+BN layers get one scale instead of two. Raises BuildError on failure.
    """
    if calibration.ndim < 2 or len(calibration) == 0:
        raise BuildError(f"int8 calibration needs a non-empty (N, *sample_shape) array, got shape "
                         f"{calibration.shape}")
    images = np.ascontiguousarray(calibration, dtype=np.float32)
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    # quantize_static makes its own temporary folder for calibration models; ours holds the
    # pre-processed model, and both are deleted when done.
    with tempfile.TemporaryDirectory(prefix="dse-quant-") as scratch:
        prepared = Path(scratch) / "preprocessed.onnx"
        try:
            quant_pre_process(str(fp32_path), str(prepared))
            reader = _Batches(_input_name(prepared), images)
            quantize_static(
                str(prepared), str(out_path), reader,
                quant_format=QuantFormat.QDQ, per_channel=True,
                weight_type=QuantType.QInt8, activation_type=QuantType.QInt8,
                calibrate_method=CalibrationMethod.MinMax,
                extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True})
        except BuildError:
            raise
        # Pre-processing and calibration fail with errors of onnx, onnxruntime, sympy and numpy;
        # for the campaign each means the same: this candidate has no int8 artifact.
        except Exception as exc:
            raise BuildError(f"int8 quantization of {fp32_path.name} failed: "
                             f"{type(exc).__name__}: {exc}") from exc
    if not out_path.is_file():
        raise BuildError(f"int8 quantization wrote no file at {out_path}")


def _input_name(model_path: Path) -> str:
    import onnx

    model: Any = onnx.load(str(model_path), load_external_data=False)
    inputs = [i.name for i in model.graph.input]
    if len(inputs) != 1:
        raise BuildError(f"int8 calibration expects a model with one input, got {inputs}")
    return str(inputs[0])
