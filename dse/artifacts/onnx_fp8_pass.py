"""The float8 (e4m3fn) pass: calibrates the activations entering Conv, Gemm and MatMul on
sample inputs, then puts Q/DQ pairs in front of them and stores their weights in float8 with one
scale per output channel.

onnx, onnxruntime and ml_dtypes load when the pass runs, not at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dse.artifacts.onnx_graph import FLOAT32, FreshNames, drop_unused, tensor_types
from dse.core import BuildError

if TYPE_CHECKING:
    import onnx

_FP8_MAX = 448.0  # the largest finite float8 e4m3fn
_CALIBRATION_BATCH = 32


class Fp8Pass:
    """Inserts float8 Q/DQ in front of the Conv, Gemm and MatMul nodes of a float32 model."""

    def __init__(self, model: onnx.ModelProto, images: np.ndarray) -> None:
        self._model = model
        self._graph = model.graph
        self._images = images
        self._names = FreshNames(self._graph)
        self._types = tensor_types(model)
        self._weights = {tensor.name: tensor for tensor in self._graph.initializer
                         if tensor.data_type == FLOAT32}

    def run(self) -> None:
        # One entry per node, in graph order (protobuf hands out a new wrapper object on every
        # access, so nodes cannot be dictionary keys).
        plan = [self._quantized_inputs(node) for node in self._graph.node]
        if not any(plan):
            raise BuildError("the model has no Conv, Gemm or MatMul with float32 inputs to "
                             "quantize")
        activations = sorted({node.input[i] for node, inputs in zip(self._graph.node, plan, strict=True)
                              for i, axis in inputs if axis is None})
        amax = self._calibrate(activations)
        dequantized: dict[str, str] = {}
        nodes: list[onnx.NodeProto] = []
        for node, inputs in zip(self._graph.node, plan, strict=True):
            for index, axis in inputs:
                name = node.input[index]
                if name not in dequantized:
                    if axis is None:
                        dequantized[name] = self._fake_quantize(name, amax[name], nodes)
                    else:
                        dequantized[name] = self._quantize_weight(name, axis, nodes)
                node.input[index] = dequantized[name]
            nodes.append(node)
        del self._graph.node[:]
        self._graph.node.extend(nodes)
        drop_unused(self._graph, self._weights)

    def _quantized_inputs(self, node: onnx.NodeProto) -> list[tuple[int, int | None]]:
        """(input index, channel axis) of the node's inputs to quantize; axis None for an
        activation (one scale), else the weight's output-channel axis (one scale per channel)."""
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Conv", "Gemm", "MatMul"):
            return []
        quantized: list[tuple[int, int | None]] = []
        for index in (0, 1):
            name = node.input[index]
            if self._types.get(name) != FLOAT32:
                continue
            weight = self._weights.get(name)
            if weight is None:
                quantized.append((index, None))
            elif index == 1 and (axis := _weight_axis(node, len(weight.dims))) is not None:
                quantized.append((index, axis))
        return quantized

    def _calibrate(self, activations: list[str]) -> dict[str, float]:
        """max |x| of each activation over the calibration images, from an fp32 ORT session
        that exposes them as extra outputs."""
        import onnx
        import onnxruntime

        inputs = [info.name for info in self._graph.input if info.name not in self._weights]
        if len(inputs) != 1:
            raise BuildError(f"fp8 calibration expects a model with one input, got {inputs}")
        probe = onnx.ModelProto()
        probe.CopyFrom(self._model)
        inner = [name for name in activations if name != inputs[0]]
        known = {output.name for output in probe.graph.output}
        probe.graph.output.extend(onnx.helper.make_tensor_value_info(name, FLOAT32, None)
                                  for name in inner if name not in known)
        session = onnxruntime.InferenceSession(probe.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
        amax = dict.fromkeys(activations, 0.0)
        for first in range(0, len(self._images), _CALIBRATION_BATCH):
            batch = self._images[first:first + _CALIBRATION_BATCH]
            values = dict(zip(inner, session.run(inner, {inputs[0]: batch}), strict=True))
            values[inputs[0]] = batch
            for name in activations:
                amax[name] = max(amax[name], float(np.max(np.abs(values[name]))))
        broken = [name for name, value in amax.items() if not np.isfinite(value)]
        if broken:
            raise BuildError(f"activation {broken[0]!r} is not finite on the calibration images")
        return amax

    def _fake_quantize(self, name: str, amax: float, nodes: list[onnx.NodeProto]) -> str:
        from onnx import helper

        scale = self._initializer(f"{name}_fp8_scale", np.float32(_scale(amax)))
        zero = self._initializer(f"{name}_fp8_zero_point", _fp8_zeros(()))
        quantized = self._names.fresh(f"{name}_fp8")
        dequantized = self._names.fresh(f"{name}_dequantized")
        nodes.append(helper.make_node("QuantizeLinear", [name, scale, zero], [quantized],
                                      name=self._names.fresh(f"QuantizeLinear_{name}")))
        nodes.append(helper.make_node("DequantizeLinear", [quantized, scale, zero], [dequantized],
                                      name=self._names.fresh(f"DequantizeLinear_{name}")))
        return dequantized

    def _quantize_weight(self, name: str, axis: int, nodes: list[onnx.NodeProto]) -> str:
        import ml_dtypes
        from onnx import helper, numpy_helper

        weight = numpy_helper.to_array(self._weights[name])
        others = tuple(i for i in range(weight.ndim) if i != axis)
        scales = np.array([_scale(float(a)) for a in np.max(np.abs(weight), axis=others)],
                          dtype=np.float32)
        shape = [1] * weight.ndim
        shape[axis] = len(scales)
        # Clipped first: a rounding hair above 448 would cast to NaN, as e4m3fn has no infinity.
        scaled = np.clip(weight / scales.reshape(shape), -_FP8_MAX, _FP8_MAX)
        stored = self._initializer(f"{name}_fp8", scaled.astype(ml_dtypes.float8_e4m3fn))
        scale = self._initializer(f"{name}_fp8_scale", scales)
        zero = self._initializer(f"{name}_fp8_zero_point", _fp8_zeros(scales.shape))
        dequantized = self._names.fresh(f"{name}_dequantized")
        nodes.append(helper.make_node("DequantizeLinear", [stored, scale, zero], [dequantized],
                                      axis=axis, name=self._names.fresh(f"DequantizeLinear_{name}")))
        return dequantized

    def _initializer(self, base: str, values: np.ndarray | np.generic) -> str:
        from onnx import numpy_helper

        name = self._names.fresh(base)
        self._graph.initializer.append(numpy_helper.from_array(np.asarray(values), name))
        return name


def _weight_axis(node: onnx.NodeProto, ndim: int) -> int | None:
    """The output-channel axis of a Conv, Gemm or MatMul weight; None for a MatMul vector,
    which has no output channels and stays float32."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        trans_b = any(attr.name == "transB" and attr.i for attr in node.attribute)
        return 0 if trans_b else 1
    return ndim - 1 if ndim >= 2 else None  # MatMul: (..., K, N), one scale per column


def _scale(amax: float) -> float:
    # A tensor that was all zeros in calibration quantizes exactly with any scale.
    return amax / _FP8_MAX if amax > 0 else 1.0


def _fp8_zeros(shape: tuple[int, ...]) -> np.ndarray:
    import ml_dtypes

    return np.zeros(shape, dtype=ml_dtypes.float8_e4m3fn)
