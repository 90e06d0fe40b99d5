"""The arithmetic one ONNX node does: its MACs and FLOPs, from the static shapes of its tensors.

MACs
    ``Conv``, ``ConvInteger``, ``QLinearConv``: output elements x (input channels per group x
    kernel elements), i.e. ``numel(Y) * prod(W.shape[1:])``; grouping, strides, dilations and pads
    act through the inferred output shape, and padded zeros count. ``ConvTranspose``: input
    elements x ``prod(W.shape[1:])``. ``Gemm``: ``numel(Y) * K`` with K read from A after
    ``transA``. ``MatMul``, ``MatMulInteger``, ``QLinearMatMul``: ``numel(Y) * A.shape[-1]`` (numpy
    broadcasting, batched 3-D/4-D products such as attention's QK^T and AV included). Bias
    additions and Gemm's alpha/beta scalings are not counted. In a QDQ model the MACs are those of
    the float op between the Q/DQ pairs, so they equal the fp32 model's.

FLOPs
    2 per MAC for the ops above, plus:

    * 1 per element of the first output for elementwise, activation, normalisation and softmax
      ops: Abs, Acos, Acosh, Add, And, Asin, Asinh, Atan, Atanh, BatchNormalization, BitShift,
      BitwiseAnd, BitwiseNot, BitwiseOr, BitwiseXor, Ceil, Celu, Clip, Cos, Cosh, CumSum,
      DequantizeLinear, Div, DynamicQuantizeLinear, Elu, Equal, Erf, Exp, Floor, Gelu, Greater,
      GreaterOrEqual, GroupNormalization, HardSigmoid, HardSwish, Hardmax, InstanceNormalization,
      IsInf, IsNaN, LayerNormalization, LeakyRelu, Less, LessOrEqual, Log, LogSoftmax,
      LpNormalization, Max, Mean, MeanVarianceNormalization, Min, Mish, Mod, Mul, Neg, Not, Or,
      Pow, PRelu, QuantizeLinear, RMSNormalization, Reciprocal, Relu, Round, Selu, Shrink, Sigmoid,
      Sign, Sin, Sinh, Softmax, Softplus, Softsign, Sqrt, Sub, Sum, Tan, Tanh, ThresholdedRelu,
      Trilu, Where, Xor.
    * windowed pooling, output elements x kernel elements (each output reads its window):
      AveragePool, LpPool, MaxPool.
    * reductions and global pooling, 1 per *input* element: ArgMax, ArgMin, GlobalAveragePool,
      GlobalLpPool, GlobalMaxPool, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceMax,
      ReduceMean, ReduceMin, ReduceProd, ReduceSum, ReduceSumSquare.
    * 0 for data movement: Cast, CastLike, Concat, Constant, ConstantOfShape, DepthToSpace,
      Dropout, Expand, Flatten, Gather, GatherElements, GatherND, Identity, Pad, Range, Reshape,
      ScatterElements, ScatterND, Shape, Size, Slice, SpaceToDepth, Split, Squeeze, Tile,
      Transpose, Unsqueeze.

    Only the default ONNX domain has rules. Any other op (``Resize``, ``Einsum``, recurrent ops,
    control flow, ``com.microsoft`` fusions, custom ops) is named in ``unknown_ops`` and its FLOPs
    are not counted; its initializers still count as weights. Model-local functions are inlined
    first.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from dse.models.tensor_sizes import Shapes, StaticTensor

#: The ONNX domains the rules below are for; ops of any other domain have none.
DEFAULT_DOMAINS = ("", "ai.onnx")


class OpCost(NamedTuple):
    """One node's multiply-accumulates and floating-point operations."""

    macs: int
    flops: int


def op_cost(node: Any, shapes: Shapes) -> OpCost | None:
    """What ``node`` computes at the shapes in ``shapes``, or None when no rule covers its op."""
    if node.domain not in DEFAULT_DOMAINS:
        return None
    mac_rule = _MAC_RULES.get(node.op_type)
    if mac_rule is not None:
        macs = mac_rule(node, shapes)
        return OpCost(macs, 2 * macs)
    flops = _other_flops(node, shapes)
    return None if flops is None else OpCost(0, flops)


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


_ELEMENTWISE = _names("""
    Abs Acos Acosh Add And Asin Asinh Atan Atanh BatchNormalization BitShift BitwiseAnd BitwiseNot
    BitwiseOr BitwiseXor Ceil Celu Clip Cos Cosh CumSum DequantizeLinear Div DynamicQuantizeLinear
    Elu Equal Erf Exp Floor Gelu Greater GreaterOrEqual GroupNormalization HardSigmoid HardSwish
    Hardmax InstanceNormalization IsInf IsNaN LayerNormalization LeakyRelu Less LessOrEqual Log
    LogSoftmax LpNormalization Max Mean MeanVarianceNormalization Min Mish Mod Mul Neg Not Or Pow
    PRelu QuantizeLinear RMSNormalization Reciprocal Relu Round Selu Shrink Sigmoid Sign Sin Sinh
    Softmax Softplus Softsign Sqrt Sub Sum Tan Tanh ThresholdedRelu Trilu Where Xor
""")
_WINDOWED_POOLS = frozenset({"AveragePool", "LpPool", "MaxPool"})
REDUCTIONS = _names("""
    ArgMax ArgMin GlobalAveragePool GlobalLpPool GlobalMaxPool ReduceL1 ReduceL2 ReduceLogSum
    ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare
""")
_DATA_MOVEMENT = _names("""
    Cast CastLike Concat Constant ConstantOfShape DepthToSpace Dropout Expand Flatten Gather
    GatherElements GatherND Identity Pad Range Reshape ScatterElements ScatterND Shape Size Slice
    SpaceToDepth Split Squeeze Tile Transpose Unsqueeze
""")


def _attribute(node: Any, name: str, default: Any) -> Any:
    import onnx

    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _conv_macs(weight_input: int) -> Callable[[Any, Shapes], int]:
    def macs(node: Any, shapes: Shapes) -> int:
        # Each output element is a dot product over (C_in / group) x kernel elements: exactly
        # the weight's per-output-channel size.
        weight = shapes[node.input[weight_input]].shape
        return shapes[node.output[0]].numel * math.prod(weight[1:])
    return macs


def _conv_transpose_macs(node: Any, shapes: Shapes) -> int:
    # Each input element is scattered into (C_out / group) x kernel outputs; W is (C_in, C_out/g, k...).
    weight = shapes[node.input[1]].shape
    return shapes[node.input[0]].numel * math.prod(weight[1:])


def _gemm_macs(node: Any, shapes: Shapes) -> int:
    a = shapes[node.input[0]].shape
    k = a[0] if _attribute(node, "transA", 0) else a[1]
    return shapes[node.output[0]].numel * k


def _matmul_macs(node: Any, shapes: Shapes) -> int:
    # numpy semantics: the output's shape already holds the broadcast batch dimensions, and every
    # element is a dot product of length K, A's last axis (also for 1-D A or B).
    return shapes[node.output[0]].numel * shapes[node.input[0]].shape[-1]


_MAC_RULES: dict[str, Callable[[Any, Shapes], int]] = {
    "Conv": _conv_macs(1),
    "ConvInteger": _conv_macs(1),
    "QLinearConv": _conv_macs(3),
    "ConvTranspose": _conv_transpose_macs,
    "Gemm": _gemm_macs,
    "MatMul": _matmul_macs,
    "MatMulInteger": _matmul_macs,
    "QLinearMatMul": _matmul_macs,
}


def _other_flops(node: Any, shapes: Shapes) -> int | None:
    """FLOPs of an op without MACs, or None when there is no rule for it."""
    op = node.op_type
    if op in _ELEMENTWISE:
        return shapes[node.output[0]].numel
    if op in _WINDOWED_POOLS:
        kernel: list[int] = _attribute(node, "kernel_shape", [])
        return shapes[node.output[0]].numel * math.prod(kernel)
    if op in REDUCTIONS:
        return shapes[node.input[0]].numel
    if op in _DATA_MOVEMENT:
        return 0
    return None


# Runtime fusions of an ONNX op that compute what the op does plus an activation or a scaling:
# their arithmetic is the base op's (the activation's elementwise work is not counted).
FUSED_BASE_OPS = {"FusedConv": "Conv", "FusedGemm": "Gemm", "FusedMatMul": "MatMul",
                   "NhwcConv": "Conv", "NhwcFusedConv": "Conv", "QLinearAdd": "Add",
                   "QLinearMul": "Mul", "QLinearSigmoid": "Sigmoid",
                   "QLinearGlobalAveragePool": "GlobalAveragePool",
                   "QLinearAveragePool": "AveragePool",
                   # ONNX Runtime's NCHWc layout changes: data movement, like a Transpose.
                   "ReorderInput": "Transpose", "ReorderOutput": "Transpose"}
# Bytes per element by the type names runtimes' profiles use (ONNX Runtime's "float", "int8").
_PROFILE_TYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "float16": 2,
                       "bfloat16": 2, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2,
                       "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "bool": 1,
                       "float8e4m3fn": 1, "float8e5m2": 1}

TypedShape = tuple[str, tuple[int, ...]]


def cost_from_shapes(op_type: str, inputs: list[TypedShape], outputs: list[TypedShape],
                     attributes: dict[str, Any] | None = None) -> tuple[float | None, float | None]:
    """(FLOPs, bytes) of one call of an operator that ran with ``inputs`` and ``outputs``
    (element type name as a runtime's profile writes it, shape), by this module's rules for the
    ONNX op it is (a runtime fusion such as ``FusedConv`` counts as its base op). Bytes are the
    inputs and outputs, each read or written once; None for what is unknown (an op with no rule,
    an element type of no fixed size)."""
    import onnx

    sizes = [_PROFILE_TYPE_BYTES.get(dtype.lower()) for dtype, _ in inputs + outputs]
    nbytes = None if any(s is None for s in sizes) else float(sum(
        size * math.prod(shape) for size, (_, shape) in zip(sizes, inputs + outputs, strict=True)
        if size is not None))
    base = FUSED_BASE_OPS.get(op_type, op_type)
    in_names = [f"in{k}" for k in range(len(inputs))]
    out_names = [f"out{k}" for k in range(len(outputs))]
    node = onnx.helper.make_node(base, in_names, out_names, **(attributes or {}))
    # The element type only matters for sizes, which are counted above: FLOAT for all.
    shapes = {name: StaticTensor(onnx.TensorProto.FLOAT, tuple(shape))
              for name, (_, shape) in zip(in_names + out_names, inputs + outputs, strict=True)}
    try:
        cost = op_cost(node, shapes)
    except (KeyError, IndexError):  # fewer tensors than the rule reads: no count
        cost = None
    return (None if cost is None else float(cost.flops)), nbytes
