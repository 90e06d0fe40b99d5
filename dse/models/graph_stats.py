"""Static statistics of an ONNX graph: parameters, MACs and FLOPs, bytes, arithmetic intensity.

:func:`graph_stats` reads the graph only (nothing runs) at a given batch size: the graph input's
symbolic leading axis (``batch`` in dse's exports) is set to ``batch_size`` and ONNX shape
inference (strict, with data propagation) gives every tensor's shape. A tensor whose shape or type
it cannot give makes :func:`graph_stats` raise ValueError naming it, never count it as zero.

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

Bytes and arithmetic intensity
    ``activation_bytes``: every tensor a node writes, except graph outputs and ``Constant`` values,
    at its dtype: what a naive executor that keeps nothing in registers writes (a QDQ model's
    quantized and dequantized copies, and its dequantized weights, included). ``input_bytes`` and
    ``output_bytes``: the graph's inputs and outputs. ``arithmetic_intensity`` = ``flops /
    (weight_bytes + activation_bytes + input_bytes + output_bytes)`` in FLOP/byte: every weight and
    input read once, every tensor written once, reads of intermediates not counted again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class GraphStats:
    """What one call of the graph on ``batch_size`` samples computes and moves (module docstring
    defines each count). Byte counts are at the tensors' stored dtypes."""

    batch_size: int
    params: int
    weight_bytes: int
    macs: int
    flops: int
    activation_bytes: int
    input_bytes: int
    output_bytes: int
    arithmetic_intensity: float  # FLOP per byte
    by_op_type: dict[str, int] = field(hash=False)  # FLOPs per op type with a rule
    unknown_ops: tuple[str, ...] = ()  # op types with no rule, sorted; their FLOPs are not counted


@dataclass(frozen=True)
class _Tensor:
    elem_type: int
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


_Shapes = Mapping[str, _Tensor]

_DEFAULT_DOMAINS = ("", "ai.onnx")


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


_MAX_NAMED = 5

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
_REDUCTIONS = _names("""
    ArgMax ArgMin GlobalAveragePool GlobalLpPool GlobalMaxPool ReduceL1 ReduceL2 ReduceLogSum
    ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare
""")
_DATA_MOVEMENT = _names("""
    Cast CastLike Concat Constant ConstantOfShape DepthToSpace Dropout Expand Flatten Gather
    GatherElements GatherND Identity Pad Range Reshape ScatterElements ScatterND Shape Size Slice
    SpaceToDepth Split Squeeze Tile Transpose Unsqueeze
""")

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
    **{op: frozenset({1}) for op in _REDUCTIONS if op.startswith("Reduce")},
}

# Bits per element by TensorProto type name (looked up by name: older onnx lacks some types).
# STRING and the 6-bit floats have no fixed size here; a tensor of them raises ValueError.
_BITS_BY_TYPE_NAME = {
    "BOOL": 8, "INT8": 8, "UINT8": 8, "INT16": 16, "UINT16": 16, "INT32": 32, "UINT32": 32,
    "INT64": 64, "UINT64": 64, "FLOAT16": 16, "BFLOAT16": 16, "FLOAT": 32, "DOUBLE": 64,
    "COMPLEX64": 64, "COMPLEX128": 128, "FLOAT8E4M3FN": 8, "FLOAT8E4M3FNUZ": 8, "FLOAT8E5M2": 8,
    "FLOAT8E5M2FNUZ": 8, "FLOAT8E8M0": 8, "INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2,
    "UINT2": 2,
}


def graph_stats(model: str | Path | onnx.ModelProto, batch_size: int = 1) -> GraphStats:
    """Statistics of ``model`` (a path or a loaded model, left unchanged) for one call on
    ``batch_size`` samples; see the module docstring for every definition.

    Raises ValueError when ``batch_size`` < 1, when an input's batch axis is fixed to another size
    or another axis is symbolic, when shape inference fails, or naming the tensors whose shape or
    type it cannot give.
    """
    import onnx

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if isinstance(model, (str, Path)):
        proto = onnx.load(str(model), load_external_data=False)  # sizes need dims, not values
    else:
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    if proto.functions:
        import onnx.inliner

        proto = onnx.inliner.inline_local_functions(proto)
    _set_batch(proto.graph, batch_size)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ValueError(f"ONNX shape inference failed: {first_line}") from exc
    return _count(inferred.graph, batch_size)


def _set_batch(graph: Any, batch_size: int) -> None:
    """Fix the leading axis of every graph input to ``batch_size``, and every other dimension
    that shares its symbolic name (the exporter names the batch axis on outputs and
    intermediates too)."""
    initializer_names = {t.name for t in graph.initializer}
    batch_names: set[str] = set()
    for value in graph.input:
        if value.name in initializer_names or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        if not dims:
            continue
        lead = dims[0]
        if lead.HasField("dim_value"):
            if lead.dim_value != batch_size:
                raise ValueError(f"input {value.name!r} has a fixed batch of {lead.dim_value}; "
                                 f"it cannot be counted at batch_size={batch_size}")
        elif lead.dim_param:
            batch_names.add(lead.dim_param)
        lead.dim_value = batch_size
    for value in graph.input:
        if value.name in initializer_names:
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_param") and dim.dim_param not in batch_names:
                raise ValueError(f"input {value.name!r} has symbolic axis {axis} "
                                 f"({dim.dim_param!r}); only the leading batch axis may be")
    for value in [*graph.input, *graph.output, *graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in batch_names:
                dim.dim_value = batch_size


def _count(graph: Any, batch_size: int) -> GraphStats:
    shapes = _known_shapes(graph)
    constants = _constant_names(graph)
    constant_set = set(constants)
    inputs = [v.name for v in graph.input if v.name not in constant_set]
    outputs = [v.name for v in graph.output]
    produced = [name for node in graph.node for name in node.output
                if name and name not in constant_set]
    _require_sizes(shapes, [*inputs, *outputs, *produced, *constants])

    output_set = set(outputs)
    weights = _weight_names(graph, shapes, constants)
    weight_bytes = _nbytes(shapes, weights)
    activation_bytes = _nbytes(shapes, (n for n in produced if n not in output_set))
    input_bytes, output_bytes = _nbytes(shapes, inputs), _nbytes(shapes, outputs)

    macs = 0
    by_op_type: dict[str, int] = {}
    unknown: set[str] = set()
    for node in graph.node:
        key = _op_key(node)
        if node.domain not in _DEFAULT_DOMAINS:
            unknown.add(key)
            continue
        mac_rule = _MAC_RULES.get(node.op_type)
        if mac_rule is not None:
            node_macs = mac_rule(node, shapes)
            macs += node_macs
            flops = 2 * node_macs
        else:
            node_flops = _other_flops(node, shapes)
            if node_flops is None:
                unknown.add(key)
                continue
            flops = node_flops
        by_op_type[key] = by_op_type.get(key, 0) + flops
    total_flops = sum(by_op_type.values())
    moved = weight_bytes + activation_bytes + input_bytes + output_bytes
    return GraphStats(
        batch_size=batch_size,
        params=sum(shapes[name].numel for name in weights),
        weight_bytes=weight_bytes, macs=macs, flops=total_flops,
        activation_bytes=activation_bytes, input_bytes=input_bytes, output_bytes=output_bytes,
        arithmetic_intensity=total_flops / moved if moved else 0.0,
        by_op_type=by_op_type, unknown_ops=tuple(sorted(unknown)))


def _op_key(node: Any) -> str:
    op_type: str = node.op_type
    return op_type if node.domain in _DEFAULT_DOMAINS else f"{node.domain}:{op_type}"


def _known_shapes(graph: Any) -> dict[str, _Tensor]:
    """Every tensor whose element type and full static shape the graph states."""
    shapes: dict[str, _Tensor] = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        if not value.type.HasField("tensor_type"):
            continue
        tensor_type = value.type.tensor_type
        if not tensor_type.elem_type or not tensor_type.HasField("shape"):
            continue
        dims = tensor_type.shape.dim
        if all(dim.HasField("dim_value") for dim in dims):
            shapes[value.name] = _Tensor(tensor_type.elem_type, tuple(d.dim_value for d in dims))
    for tensor in graph.initializer:
        shapes[tensor.name] = _Tensor(tensor.data_type, tuple(tensor.dims))
    return shapes


def _constant_names(graph: Any) -> list[str]:
    """Initializers, then outputs of Constant nodes: tensors fixed before the graph runs."""
    names = [t.name for t in graph.initializer]
    names += [node.output[0] for node in graph.node
              if node.op_type == "Constant" and node.domain in _DEFAULT_DOMAINS]
    return names


def _require_sizes(shapes: _Shapes, names: Iterable[str]) -> None:
    missing = list(dict.fromkeys(name for name in names if name not in shapes))
    if missing:
        shown = ", ".join(repr(name) for name in missing[:_MAX_NAMED])
        more = f" and {len(missing) - _MAX_NAMED} more" if len(missing) > _MAX_NAMED else ""
        raise ValueError(f"shape inference could not give a static shape and type for tensor(s) "
                         f"{shown}{more}; declare them in graph.value_info")
    for name in names:
        _bits(shapes[name], name)


def _weight_names(graph: Any, shapes: _Shapes, constants: list[str]) -> list[str]:
    """The constants some node reads as data (module docstring: "Weights")."""
    import onnx

    read_as_data: set[str] = set()
    for node in graph.node:
        arguments = (_ARGUMENT_INPUTS.get(node.op_type, frozenset())
                     if node.domain in _DEFAULT_DOMAINS else frozenset())
        read_as_data.update(name for index, name in enumerate(node.input)
                            if name and index not in arguments)
    return [name for name in dict.fromkeys(constants)
            if name in read_as_data and shapes[name].shape
            and shapes[name].elem_type != onnx.TensorProto.INT64]


def _bits(tensor: _Tensor, name: str) -> int:
    import onnx

    type_name = onnx.TensorProto.DataType.Name(tensor.elem_type)
    bits = _BITS_BY_TYPE_NAME.get(type_name)
    if bits is None:
        raise ValueError(f"tensor {name!r} has element type {type_name}, which has no fixed "
                         f"size; known: {', '.join(sorted(_BITS_BY_TYPE_NAME))}")
    return bits


def _nbytes(shapes: _Shapes, names: Iterable[str]) -> int:
    # Sub-byte types pack: a tensor takes whole bytes, its elements share them.
    return sum(math.ceil(shapes[name].numel * _bits(shapes[name], name) / 8) for name in names)


def _attribute(node: Any, name: str, default: Any) -> Any:
    import onnx

    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _conv_macs(weight_input: int) -> Callable[[Any, _Shapes], int]:
    def macs(node: Any, shapes: _Shapes) -> int:
        # Each output element is a dot product over (C_in / group) x kernel elements: exactly
        # the weight's per-output-channel size.
        weight = shapes[node.input[weight_input]].shape
        return shapes[node.output[0]].numel * math.prod(weight[1:])
    return macs


def _conv_transpose_macs(node: Any, shapes: _Shapes) -> int:
    # Each input element is scattered into (C_out / group) x kernel outputs; W is (C_in, C_out/g, k...).
    weight = shapes[node.input[1]].shape
    return shapes[node.input[0]].numel * math.prod(weight[1:])


def _gemm_macs(node: Any, shapes: _Shapes) -> int:
    a = shapes[node.input[0]].shape
    k = a[0] if _attribute(node, "transA", 0) else a[1]
    return shapes[node.output[0]].numel * k


def _matmul_macs(node: Any, shapes: _Shapes) -> int:
    # numpy semantics: the output's shape already holds the broadcast batch dimensions, and every
    # element is a dot product of length K, A's last axis (also for 1-D A or B).
    return shapes[node.output[0]].numel * shapes[node.input[0]].shape[-1]


_MAC_RULES: dict[str, Callable[[Any, _Shapes], int]] = {
    "Conv": _conv_macs(1),
    "ConvInteger": _conv_macs(1),
    "QLinearConv": _conv_macs(3),
    "ConvTranspose": _conv_transpose_macs,
    "Gemm": _gemm_macs,
    "MatMul": _matmul_macs,
    "MatMulInteger": _matmul_macs,
    "QLinearMatMul": _matmul_macs,
}


def _other_flops(node: Any, shapes: _Shapes) -> int | None:
    """FLOPs of an op without MACs, or None when there is no rule for it."""
    op = node.op_type
    if op in _ELEMENTWISE:
        return shapes[node.output[0]].numel
    if op in _WINDOWED_POOLS:
        kernel: list[int] = _attribute(node, "kernel_shape", [])
        return shapes[node.output[0]].numel * math.prod(kernel)
    if op in _REDUCTIONS:
        return shapes[node.input[0]].numel
    if op in _DATA_MOVEMENT:
        return 0
    return None
