"""Which constant tensors of an ONNX graph are weights, and which are arguments.

Weights (``params``, ``weight_bytes``)
    The constant tensors (initializers and ``Constant`` node outputs) that some node reads as
    *data*. Not weights: int64 tensors (ONNX's shape and index arguments), rank-0 scalars (literals
    such as epsilons and clip bounds) and tensors read only at an *argument* input, as listed in
    ``_ARGUMENT_INPUTS``: shape, axes, pads, indices, bounds, exponents and resize scales, the
    scales and zero points of quantized ops, the running mean and variance of
    ``BatchNormalization`` (torch buffers, not parameters). Weights are counted at their stored
    dtype: int8 in a QDQ model (the ``DequantizeLinear`` in front of a conv reads them as data),
    int32 for quantized biases, 2 bytes in fp16; 4-bit types pack two to a byte. A constant buffer
    read as data (a fixed mask or positional table) counts as a weight: the graph cannot tell it
    from a parameter.

    Against torch's ``sum(p.numel() for p in module.parameters())``: dse's export folds each
    Conv2d -> BatchNorm2d pair into one conv with a bias, so a folded pair of C channels has C
    fewer parameters in ONNX (the norm's 2C scale and shift become C bias values); where the folded
    bias is all zero (an untrained network) the exporter drops it and the pair has 2C fewer. The
    exporter also stores equal initializers once (an untrained network's all-ones norm scales, its
    zero biases), and they count once; a literal it writes with shape (1,) rather than () (the
    attention scale of ``scaled_dot_product_attention``) counts as one parameter.
"""

from __future__ import annotations

from typing import Any

from dse.models.op_costs import DEFAULT_DOMAINS, REDUCTIONS
from dse.models.tensor_sizes import Shapes

# Inputs that are arguments, not data: a constant read there is not a weight.
_QUANT_ARGS = frozenset({1, 2})
_ARGUMENT_INPUTS: dict[str, frozenset[int]] = {
    "BatchNormalization": frozenset({3, 4}),
    "Clip": frozenset({1, 2}),
    "ConstantOfShape": frozenset({0}),
    "ConvInteger": frozenset({2, 3}),
    "CumSum": frozenset({1}),
    "DequantizeLinear": _QUANT_ARGS,
    "Dropout": frozenset({1, 2}),
    "Expand": frozenset({1}),
    "Gather": frozenset({1}),
    "GatherElements": frozenset({1}),
    "GatherND": frozenset({1}),
    "MatMulInteger": frozenset({2, 3}),
    "Pad": frozenset({1, 2, 3}),
    "Pow": frozenset({1}),
    "QLinearConv": frozenset({1, 2, 4, 5, 6, 7}),
    "QLinearMatMul": frozenset({1, 2, 4, 5, 6, 7}),
    "QuantizeLinear": _QUANT_ARGS,
    "Range": frozenset({0, 1, 2}),
    "Reshape": frozenset({1}),
    "Resize": frozenset({1, 2, 3}),
    "ScatterElements": frozenset({1}),
    "ScatterND": frozenset({1}),
    "Slice": frozenset({1, 2, 3, 4}),
    "Split": frozenset({1}),
    "Squeeze": frozenset({1}),
    "Tile": frozenset({1}),
    "TopK": frozenset({1}),
    "Trilu": frozenset({1}),
    "Unsqueeze": frozenset({1}),
    "Upsample": frozenset({1}),
    "Where": frozenset({0}),
    **{op: frozenset({1}) for op in REDUCTIONS if op.startswith("Reduce")},
}


def constant_names(graph: Any) -> list[str]:
    """Initializers, then outputs of Constant nodes: tensors fixed before the graph runs."""
    names = [t.name for t in graph.initializer]
    names += [node.output[0] for node in graph.node
              if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS]
    return names


def weight_names(graph: Any, shapes: Shapes, constants: list[str]) -> list[str]:
    """The constants some node reads as data (module docstring)."""
    import onnx

    read_as_data: set[str] = set()
    for node in graph.node:
        arguments = (_ARGUMENT_INPUTS.get(node.op_type, frozenset())
                     if node.domain in DEFAULT_DOMAINS else frozenset())
        read_as_data.update(name for index, name in enumerate(node.input)
                            if name and index not in arguments)
    return [name for name in dict.fromkeys(constants)
            if name in read_as_data and shapes[name].shape
            and shapes[name].elem_type != onnx.TensorProto.INT64]
