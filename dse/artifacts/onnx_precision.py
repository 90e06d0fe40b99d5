"""fp32 ONNX -> an fp16 or bf16 graph, or a float8 (e4m3fn) Q/DQ graph: the entry points, the
versions that key their cached outputs, and what a runner must know to load an fp8 graph.

Every graph written here keeps float32 inputs and outputs, so a runner feeds and reads float32
whatever the precision. The passes themselves live in :mod:`dse.artifacts.onnx_float_pass` and
:mod:`dse.artifacts.onnx_fp8_pass`. onnx and onnxruntime load when a conversion runs, not at import.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dse.artifacts.onnx_float_pass import FloatGraphPass
from dse.artifacts.onnx_fp8_pass import Fp8Pass
from dse.artifacts.onnx_graph import (
    BFLOAT16,
    FLOAT16,
    at_least_opset,
    build_step,
    check_and_save,
    load_model,
)
from dse.core import BuildError

# Bump when a transform changes, so cached files from before are not reused.
FLOAT_VERSION = 1
FP8_VERSION = 1

# ONNX Runtime graph rewrites (1.32) that mishandle float8 Q/DQ: they read a QuantizeLinear's
# zero point as an integer one. With a Clip in front the session fails to load ("Unexpected data
# type for QuantizeLinear input y_zero_point of 17"); with a Relu in front the Relu is dropped and
# negative values pass. A runner loading an fp8 graph with ONNX Runtime passes these as
# ``disabled_optimizers``.
ORT_FP8_DISABLED_OPTIMIZERS = ("ClipQuantRewrite", "ReluQuantRewrite")

_LOW_FLOATS = {"fp16": FLOAT16, "bf16": BFLOAT16}
# The first opset in which Conv, the pools and HardSwish accept bfloat16; fp16 keeps the model's.
_BF16_OPSET = 22
# The first opset with float8 QuantizeLinear / DequantizeLinear.
_FP8_OPSET = 19


def convert_float(fp32_path: Path, out_path: Path, precision: str) -> None:
    """Write a copy of ``fp32_path`` that computes in ``precision`` ("fp16" or "bf16") to ``out_path``.

    Every float32 initializer and every float32 computation takes the target type; the graph's
    inputs and outputs stay float32, with Cast nodes at the boundary. An operator input that its
    schema allows in float32 only (say Resize scales under bf16) keeps float32. Initializer values
    beyond the target's range saturate to its largest finite value. bf16 graphs are raised to
    opset 22, the first in which Conv and the pools accept bfloat16.

    Raises BuildError, naming the op, for a graph the pass cannot convert safely (control flow,
    custom domains, an op without a version in the target type), and for an unreadable model.
    """
    if precision not in _LOW_FLOATS:
        raise BuildError(f"float conversion takes precision fp16 or bf16, got {precision!r}")
    what = f"{precision} conversion"
    with build_step(what, fp32_path):
        model = load_model(fp32_path)
        if precision == "bf16":
            model = at_least_opset(model, _BF16_OPSET)
        converted = FloatGraphPass(model, _LOW_FLOATS[precision], precision).run()
        check_and_save(converted, out_path)


def quantize_fp8(fp32_path: Path, out_path: Path, calibration: np.ndarray) -> None:
    """Write a float8 (e4m3fn) Q/DQ copy of ``fp32_path`` to ``out_path``: explicit quantization,
    the form TensorRT builds fp8 engines from.

    The weights of Conv, Gemm and MatMul are stored in float8 with one scale per output channel
    (max |w| / 448) behind a DequantizeLinear; the activations entering those ops pass a
    QuantizeLinear -> DequantizeLinear pair with one scale per tensor, max |x| / 448 over the
    ``calibration`` samples (N, *sample_shape, float). Biases, activation functions, residual adds and
    the outputs stay float32, as fp8 hardware accumulates and applies epilogues in higher
    precision. Models below opset 19 are raised to it. Raises BuildError on failure.
    """
    if calibration.ndim < 2 or len(calibration) == 0:
        raise BuildError(f"fp8 calibration needs a non-empty (N, *sample_shape) array, got shape "
                         f"{calibration.shape}")
    images = np.ascontiguousarray(calibration, dtype=np.float32)
    with build_step("fp8 quantization", fp32_path):
        model = at_least_opset(load_model(fp32_path), _FP8_OPSET)
        Fp8Pass(model, images).run()
        check_and_save(model, out_path)
