"""Static statistics of an ONNX graph: parameters, MACs and FLOPs, bytes, arithmetic intensity.

:func:`graph_stats` reads the graph only (nothing runs) at a given batch size: the graph input's
symbolic leading axis (``batch`` in dse's exports) is set to ``batch_size`` and ONNX shape
inference (strict, with data propagation) gives every tensor's shape. A tensor whose shape or type
it cannot give makes :func:`graph_stats` raise ValueError naming it, never count it as zero.

Weights (``params``, ``weight_bytes``)
    The constant tensors some node reads as data, at their stored dtype; which constants those
    are, and how the count compares with torch's, is defined in :mod:`dse.models.graph_weights`.

MACs and FLOPs
    Summed over the nodes by the per-op rules of :mod:`dse.models.op_costs`. Only the default
    ONNX domain has rules; any other op is named in ``unknown_ops`` and its FLOPs are not counted.
    Model-local functions are inlined first.

Bytes and arithmetic intensity
    ``activation_bytes``: every tensor a node writes, except graph outputs and ``Constant`` values,
    at its dtype: what a naive executor that keeps nothing in registers writes (a QDQ model's
    quantized and dequantized copies, and its dequantized weights, included). ``input_bytes`` and
    ``output_bytes``: the graph's inputs and outputs. ``arithmetic_intensity`` = ``flops /
    (weight_bytes + activation_bytes + input_bytes + output_bytes)`` in FLOP/byte: every weight and
    input read once, every tensor written once, reads of intermediates not counted again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from dse.models.graph_weights import constant_names, weight_names
from dse.models.op_costs import DEFAULT_DOMAINS, op_cost
from dse.models.tensor_sizes import Shapes, StaticTensor, element_bits, total_bytes

if TYPE_CHECKING:
    import onnx

_MAX_NAMED = 5  # missing tensors named in an error; the rest are counted


@dataclass(frozen=True)
class GraphStats:
    """What one call of the graph on ``batch_size`` samples computes and moves (module docstring
    defines each count). Byte counts are at the tensors' stored dtypes.

    Attributes:
        batch_size: The samples of the call counted.
        params: Weight elements.
        weight_bytes: Bytes of the weights.
        macs: Multiply-accumulates of the call.
        flops: FLOPs of the call, over the ops with a rule.
        activation_bytes: Bytes of the intermediate tensors the call writes.
        input_bytes: Bytes of the graph's inputs.
        output_bytes: Bytes of the graph's outputs.
        arithmetic_intensity: FLOP per byte moved (0.0 when nothing moves).
        by_op_type: FLOPs per op type with a rule (``domain:op`` outside the default domain).
        unknown_ops: Op types with no rule, sorted; their FLOPs are not counted.

    Examples:
        >>> from onnx import TensorProto, helper
        >>> from dse import graph_stats
        >>> graph = helper.make_graph(
        ...     [helper.make_node("Relu", ["x"], ["y"])], "relu",
        ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
        >>> stats = graph_stats(helper.make_model(graph), batch_size=3)
        >>> stats.params, stats.flops, stats.input_bytes + stats.output_bytes
        (0, 12, 96)
        >>> stats.arithmetic_intensity  # 12 FLOPs over 96 bytes moved
        0.125
    """

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


def graph_stats(model: str | Path | onnx.ModelProto, batch_size: int = 1) -> GraphStats:
    """Statistics of ``model`` (a path or a loaded model, left unchanged) for one call on
    ``batch_size`` samples; see the module docstring for every definition.

    Args:
        model: An ONNX file's path, or a loaded model (copied, never changed).
        batch_size: The samples of one call; the inputs' symbolic leading axis is set to it.

    Returns:
        The counts of one call (:class:`GraphStats`).

    Raises:
        ValueError: When ``batch_size`` < 1, when an input's batch axis is fixed to another size
            or another axis is symbolic, when shape inference fails, or naming the tensors whose
            shape or type it cannot give.

    Examples:
        >>> import numpy as np
        >>> from onnx import TensorProto, helper, numpy_helper
        >>> from dse import graph_stats
        >>> weight = numpy_helper.from_array(np.ones((4, 3), dtype=np.float32), name="W")
        >>> graph = helper.make_graph(
        ...     [helper.make_node("MatMul", ["x", "W"], ["y"])], "tiny",
        ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        ...     initializer=[weight])
        >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        >>> stats = graph_stats(model, batch_size=2)
        >>> stats.params, stats.weight_bytes, stats.macs, stats.flops
        (12, 48, 24, 48)
        >>> stats.input_bytes, stats.output_bytes, stats.by_op_type, stats.unknown_ops
        (32, 24, {'MatMul': 48}, ())
        >>> graph_stats(model, batch_size=0)
        Traceback (most recent call last):
        ...
        ValueError: batch_size must be an integer >= 1, got 0
    """
    return _count(_inferred_graph(model, batch_size), batch_size)


class NodeCost(NamedTuple):
    """One node of the graph at a batch size: its op, FLOPs (None when no rule covers it) and
    the bytes of its inputs and outputs, each once (None when a size is unknown)."""

    op_type: str
    flops: int | None
    bytes: int | None


def node_costs(model: str | Path | onnx.ModelProto, batch_size: int = 1) -> dict[str, NodeCost]:
    """Every named node's cost for one call on ``batch_size`` samples: what a runtime profile's
    per-node times are joined with (``dse profile``). Same arguments and errors as
    :func:`graph_stats`."""
    graph = _inferred_graph(model, batch_size)
    shapes = _known_shapes(graph)
    costs: dict[str, NodeCost] = {}
    for node in graph.node:
        if not node.name:
            continue
        cost = op_cost(node, shapes)
        tensors = [name for name in [*node.input, *node.output] if name]
        try:
            nbytes: int | None = total_bytes(shapes, tensors)
        except (KeyError, ValueError):  # a tensor of no static shape or fixed-size type
            nbytes = None
        costs[node.name] = NodeCost(node.op_type, None if cost is None else cost.flops, nbytes)
    return costs


def _inferred_graph(model: str | Path | onnx.ModelProto, batch_size: int) -> Any:
    """The model's graph with its batch axis fixed and every shape inferred."""
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
    return inferred.graph


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
    constants = constant_names(graph)
    constant_set = set(constants)
    inputs = [v.name for v in graph.input if v.name not in constant_set]
    outputs = [v.name for v in graph.output]
    produced = [name for node in graph.node for name in node.output
                if name and name not in constant_set]
    _require_sizes(shapes, [*inputs, *outputs, *produced, *constants])

    output_set = set(outputs)
    weights = weight_names(graph, shapes, constants)
    weight_bytes = total_bytes(shapes, weights)
    activation_bytes = total_bytes(shapes, (n for n in produced if n not in output_set))
    input_bytes, output_bytes = total_bytes(shapes, inputs), total_bytes(shapes, outputs)

    macs = 0
    by_op_type: dict[str, int] = {}
    unknown: set[str] = set()
    for node in graph.node:
        key = _op_key(node)
        cost = op_cost(node, shapes)
        if cost is None:
            unknown.add(key)
            continue
        macs += cost.macs
        by_op_type[key] = by_op_type.get(key, 0) + cost.flops
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
    return op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}:{op_type}"


def _known_shapes(graph: Any) -> dict[str, StaticTensor]:
    """Every tensor whose element type and full static shape the graph states."""
    shapes: dict[str, StaticTensor] = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        if not value.type.HasField("tensor_type"):
            continue
        tensor_type = value.type.tensor_type
        if not tensor_type.elem_type or not tensor_type.HasField("shape"):
            continue
        dims = tensor_type.shape.dim
        if all(dim.HasField("dim_value") for dim in dims):
            shapes[value.name] = StaticTensor(tensor_type.elem_type, tuple(d.dim_value for d in dims))
    for tensor in graph.initializer:
        shapes[tensor.name] = StaticTensor(tensor.data_type, tuple(tensor.dims))
    return shapes


def _require_sizes(shapes: Shapes, names: Iterable[str]) -> None:
    """ValueError naming the tensors among ``names`` without a static shape and type, or with a
    type of no fixed size: a tensor that cannot be sized must never count as zero."""
    missing = list(dict.fromkeys(name for name in names if name not in shapes))
    if missing:
        shown = ", ".join(repr(name) for name in missing[:_MAX_NAMED])
        more = f" and {len(missing) - _MAX_NAMED} more" if len(missing) > _MAX_NAMED else ""
        raise ValueError(f"shape inference could not give a static shape and type for tensor(s) "
                         f"{shown}{more}; declare them in graph.value_info")
    for name in names:
        element_bits(shapes[name], name)
