"""An ONNX graph as a jax function, for the xla backend: one small jax implementation per ONNX op.

The graph is lowered node by node while jax traces it, so XLA sees one function and compiles it
whole (fusing what it can); nothing here runs at inference time. Values are of two kinds:

* *static* values are numpy arrays known while tracing: integer initializers, ``Constant`` outputs,
  ``Shape`` of a traced tensor, and anything computed from static values only. Ops that take
  shapes, axes or indices as inputs (Reshape's shape, Slice's starts and ends, ReduceMean's axes)
  require them static, and ops whose inputs are all static are evaluated with numpy, so shape
  arithmetic folds away before XLA sees it.
* *traced* values are jax arrays: the graph input, the float initializers (the weights, passed as
  arguments of the compiled function so the HLO holds no weight bytes), and what depends on them.

An op outside :data:`OPS` (or a custom domain) is a BuildError naming it and the supported set.
Only jax, numpy and onnx are needed; importing this module imports jax, so the backend imports it
inside ``compile``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
import onnx
from jax import lax
from onnx import helper, numpy_helper

from dse.exceptions import BuildError

# A value flowing along an edge: numpy when known at trace time, else a jax array (a tracer).
Value: TypeAlias = np.ndarray | jax.Array
# An optional input left empty ("" in the node's input list) is None.
Inputs: TypeAlias = Sequence[Value | None]


@dataclass(frozen=True)
class Node:
    """An ONNX node as an op implementation sees it: its attributes decoded, and the opset."""

    proto: onnx.NodeProto
    opset: int

    @property
    def op(self) -> str:
        return self.proto.op_type

    def attr(self, name: str, default: Any = None) -> Any:
        for attribute in self.proto.attribute:
            if attribute.name == name:
                value = helper.get_attribute_value(attribute)
                return value.decode() if isinstance(value, bytes) else value
        return default


OpImpl = Callable[[Node, Inputs], list[Value]]


# --- helpers -------------------------------------------------------------------------------------

def is_static(value: Value | None) -> bool:
    return value is None or isinstance(value, np.ndarray)


def xp_for(inputs: Inputs) -> Any:
    """numpy when every input is known at trace time (the result is then static too), else
    jax.numpy. The two share the names used here (add, reshape, take, concatenate...)."""
    return np if all(is_static(value) for value in inputs) else jnp


def static(node: Node, value: Value | None, what: str) -> np.ndarray:
    """``value`` as a numpy array; BuildError when it depends on the graph's input."""
    if value is None or not isinstance(value, np.ndarray):
        raise BuildError(f"the xla lowering needs {node.op} {node.proto.name!r}'s {what} as a "
                         f"constant, but it is computed from the input at run time")
    return value


def ints(node: Node, value: Value | None, what: str) -> list[int]:
    return [int(v) for v in static(node, value, what).reshape(-1)]


def axes_of(node: Node, inputs: Inputs, index: int) -> list[int] | None:
    """The ``axes`` of a reduction/squeeze: an input from the opset that moved it there (13 or
    18), else the attribute; None when neither is given."""
    if len(inputs) > index and inputs[index] is not None:
        return ints(node, inputs[index], "axes")
    axes = node.attr("axes")
    return None if axes is None else [int(a) for a in axes]


def wrap(xp: Any, value: Any) -> Value:
    """numpy's scalar results back to 0-d arrays, so static values are always ndarrays."""
    return np.asarray(value) if xp is np else value


def rank(value: Value) -> int:
    return len(value.shape)


def positive(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


# --- elementwise ---------------------------------------------------------------------------------

def _binary(name: str) -> OpImpl:
    def impl(node: Node, inputs: Inputs) -> list[Value]:
        xp = xp_for(inputs)
        return [wrap(xp, getattr(xp, name)(inputs[0], inputs[1]))]
    return impl


def _div(node: Node, inputs: Inputs) -> list[Value]:
    a, b = inputs[0], inputs[1]
    xp = xp_for(inputs)
    assert a is not None and b is not None
    if np.issubdtype(a.dtype, np.integer):  # ONNX integer division truncates towards zero
        return [wrap(xp, xp.trunc(xp.true_divide(a, b)).astype(a.dtype))]
    return [wrap(xp, xp.divide(a, b))]


def _variadic(name: str) -> OpImpl:
    def impl(node: Node, inputs: Inputs) -> list[Value]:
        xp = xp_for(inputs)
        result = inputs[0]
        for other in inputs[1:]:
            result = getattr(xp, name)(result, other)
        assert result is not None
        return [wrap(xp, result)]
    return impl


def _unary(fn: Callable[[jax.Array], jax.Array]) -> OpImpl:
    """An activation or math function: always traced (never shape arithmetic)."""
    def impl(node: Node, inputs: Inputs) -> list[Value]:
        return [fn(jnp.asarray(inputs[0]))]
    return impl


def _clip(node: Node, inputs: Inputs) -> list[Value]:
    # Opset 11 moved min and max from attributes to optional inputs.
    low = inputs[1] if len(inputs) > 1 else node.attr("min")
    high = inputs[2] if len(inputs) > 2 else node.attr("max")
    return [jnp.clip(jnp.asarray(inputs[0]), low, high)]


def _where(node: Node, inputs: Inputs) -> list[Value]:
    xp = xp_for(inputs)
    return [wrap(xp, xp.where(inputs[0], inputs[1], inputs[2]))]


def _cast(node: Node, inputs: Inputs) -> list[Value]:
    dtype = helper.tensor_dtype_to_np_dtype(node.attr("to"))
    x = inputs[0]
    assert x is not None
    return [x.astype(dtype)]


def _gelu(node: Node, inputs: Inputs) -> list[Value]:
    approximate = node.attr("approximate", "none") == "tanh"
    return [jax.nn.gelu(jnp.asarray(inputs[0]), approximate=approximate)]


def _softmax(node: Node, inputs: Inputs) -> list[Value]:
    x = jnp.asarray(inputs[0])
    if node.opset >= 13:
        return [jax.nn.softmax(x, axis=node.attr("axis", -1))]
    # Before opset 13 Softmax flattened the input to 2-D at ``axis`` (default 1).
    axis = positive(node.attr("axis", 1), x.ndim)
    flat = x.reshape(math.prod(x.shape[:axis]), -1)
    return [jax.nn.softmax(flat, axis=-1).reshape(x.shape)]


# --- linear algebra and convolution --------------------------------------------------------------

def _matmul(node: Node, inputs: Inputs) -> list[Value]:
    return [jnp.matmul(jnp.asarray(inputs[0]), jnp.asarray(inputs[1]))]


def _gemm(node: Node, inputs: Inputs) -> list[Value]:
    a, b = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    a = a.T if node.attr("transA", 0) else a
    b = b.T if node.attr("transB", 0) else b
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    y = jnp.matmul(a, b)
    if alpha != 1.0:
        y = y * jnp.asarray(alpha, y.dtype)
    if len(inputs) > 2 and inputs[2] is not None:
        c = jnp.asarray(inputs[2])
        y = y + (c if beta == 1.0 else c * jnp.asarray(beta, c.dtype))
    return [y]


def _padding(node: Node, spatial: int, kernel: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int]) -> str | list[tuple[int, int]]:
    """lax padding for ONNX's ``auto_pad`` / ``pads`` (begins for every axis, then ends)."""
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return "SAME" if auto_pad == "SAME_UPPER" else "SAME_LOWER"
    if auto_pad == "VALID":
        return "VALID"
    pads = list(node.attr("pads", [0] * (2 * spatial)))
    return list(zip(pads[:spatial], pads[spatial:], strict=True))


def _conv(node: Node, inputs: Inputs, *, depthwise_taps: bool = False) -> list[Value]:
    x, w = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    spatial = x.ndim - 2
    kernel = node.attr("kernel_shape", w.shape[2:])
    strides = node.attr("strides", [1] * spatial)
    dilations = node.attr("dilations", [1] * spatial)
    group = node.attr("group", 1)
    padding = _padding(node, spatial, kernel, strides, dilations)
    if depthwise_taps and spatial == 2 and group == x.shape[1] > 1 and w.shape[1] == 1 \
            and not isinstance(padding, str):
        y = _depthwise_taps(x, w, strides, dilations, padding)
    else:
        # lax's default dimension numbers are ONNX's layout: NC<spatial> input, OI<spatial> kernel.
        y = lax.conv_general_dilated(x, w, window_strides=strides, padding=padding,
                                     rhs_dilation=dilations, feature_group_count=group)
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + jnp.asarray(inputs[2]).reshape(1, -1, *([1] * spatial))
    return [y]


def _depthwise_taps(x: jax.Array, w: jax.Array, strides: Sequence[int], dilations: Sequence[int],
                    padding: Sequence[tuple[int, int]]) -> jax.Array:
    """A 2-D depthwise convolution as a sum over the kernel's taps of shifted, strided slices of
    the padded input times one weight per channel: elementwise work that XLA fuses into one loop.
    XLA's CPU backend runs a grouped convolution through a generic loop that is several times
    slower (measured, jax 0.10.2: 222 us against 85 us for a 3x3 depthwise layer of 96 channels)."""
    multiplier = w.shape[0] // x.shape[1]
    if multiplier > 1:  # output channel o reads input channel o // multiplier
        x = jnp.repeat(x, multiplier, axis=1)
    x = jnp.pad(x, ((0, 0), (0, 0), *padding))
    (kh, kw), (sh, sw), (dh, dw) = w.shape[2:], strides, dilations
    out_h = (x.shape[2] - dh * (kh - 1) - 1) // sh + 1
    out_w = (x.shape[3] - dw * (kw - 1) - 1) // sw + 1
    total: jax.Array | None = None
    for i in range(kh):
        for j in range(kw):
            window = x[:, :, i * dh:i * dh + (out_h - 1) * sh + 1:sh,
                       j * dw:j * dw + (out_w - 1) * sw + 1:sw]
            term = window * w[:, 0, i, j].reshape(1, -1, 1, 1)
            total = term if total is None else total + term
    assert total is not None
    return total


# --- normalization and pooling -------------------------------------------------------------------

def _layer_norm(node: Node, inputs: Inputs) -> list[Value]:
    x = jnp.asarray(inputs[0])
    axis = positive(node.attr("axis", -1), x.ndim)
    axes = tuple(range(axis, x.ndim))
    # stash_type 1 (the default): mean and variance in float32 whatever the input's type.
    work = x.astype(jnp.float32) if node.attr("stash_type", 1) == 1 else x
    mean = work.mean(axis=axes, keepdims=True)
    var = jnp.square(work - mean).mean(axis=axes, keepdims=True)
    y = ((work - mean) * lax.rsqrt(var + node.attr("epsilon", 1e-5))).astype(x.dtype)
    y = y * jnp.asarray(inputs[1])
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + jnp.asarray(inputs[2])
    return [y]


def _batch_norm(node: Node, inputs: Inputs) -> list[Value]:
    x, scale, bias, mean, var = (jnp.asarray(v) for v in inputs[:5])
    shape = (1, -1, *([1] * (x.ndim - 2)))
    inv = lax.rsqrt(var + node.attr("epsilon", 1e-5)) * scale
    return [(x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)]


def _reduce_mean(node: Node, inputs: Inputs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    axes = axes_of(node, inputs, 1)
    if axes is None and node.attr("noop_with_empty_axes", 0):
        return [x]
    xp = xp_for(inputs[:1])
    return [wrap(xp, xp.mean(x, axis=None if axes is None else tuple(axes),
                             keepdims=bool(node.attr("keepdims", 1))))]


def _global_average_pool(node: Node, inputs: Inputs) -> list[Value]:
    x = jnp.asarray(inputs[0])
    return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)]


def _pool_window(node: Node, x: jax.Array) -> tuple[tuple[int, ...], tuple[int, ...],
                                                     str | list[tuple[int, int]]]:
    if node.attr("ceil_mode", 0):
        raise BuildError(f"the xla lowering has no {node.op} with ceil_mode=1 "
                         f"(node {node.proto.name!r})")
    spatial = x.ndim - 2
    kernel = list(node.attr("kernel_shape"))
    strides = list(node.attr("strides", [1] * spatial))
    dilations = list(node.attr("dilations", [1] * spatial))
    if any(d != 1 for d in dilations):
        raise BuildError(f"the xla lowering has no dilated {node.op} (node {node.proto.name!r})")
    padding = _padding(node, spatial, kernel, strides, dilations)
    if not isinstance(padding, str):
        padding = [(0, 0), (0, 0), *padding]
    return (1, 1, *kernel), (1, 1, *strides), padding


def _max_pool(node: Node, inputs: Inputs) -> list[Value]:
    x = jnp.asarray(inputs[0])
    window, strides, padding = _pool_window(node, x)
    return [lax.reduce_window(x, -jnp.inf, lax.max, window, strides, padding)]


def _average_pool(node: Node, inputs: Inputs) -> list[Value]:
    x = jnp.asarray(inputs[0])
    window, strides, padding = _pool_window(node, x)
    total = lax.reduce_window(x, 0.0, lax.add, window, strides, padding)
    if node.attr("count_include_pad", 0):
        return [total / math.prod(window)]
    # Divide by the number of real (unpadded) elements under each window.
    count = lax.reduce_window(jnp.ones_like(x), 0.0, lax.add, window, strides, padding)
    return [total / count]


# --- shape ops -----------------------------------------------------------------------------------

def _reshape(node: Node, inputs: Inputs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    shape = ints(node, inputs[1], "shape")
    if not node.attr("allowzero", 0):  # 0 copies the input's dimension
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    xp = xp_for(inputs[:1])
    return [wrap(xp, xp.reshape(x, shape))]


def _flatten(node: Node, inputs: Inputs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    axis = positive(node.attr("axis", 1), rank(x))
    xp = xp_for(inputs)
    return [wrap(xp, xp.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))))]


def _transpose(node: Node, inputs: Inputs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    perm = node.attr("perm")
    xp = xp_for(inputs)
    return [wrap(xp, xp.transpose(x, None if perm is None else list(perm)))]


def _squeeze(node: Node, inputs: Inputs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    axes = axes_of(node, inputs, 1)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    xp = xp_for(inputs[:1])
    return [wrap(xp, xp.squeeze(x, axis=tuple(positive(a, rank(x)) for a in axes)))]


def _unsqueeze(node: Node, inputs: Inputs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    axes = axes_of(node, inputs, 1) or []
    out_rank = rank(x) + len(axes)
    xp = xp_for(inputs[:1])
    return [wrap(xp, xp.expand_dims(x, tuple(sorted(positive(a, out_rank) for a in axes))))]


def _slice(node: Node, inputs: Inputs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    if node.opset < 10:  # starts/ends/axes were attributes before opset 10
        starts, ends = list(node.attr("starts")), list(node.attr("ends"))
        axes = list(node.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = ints(node, inputs[1], "starts"), ints(node, inputs[2], "ends")
        has = [len(inputs) > i and inputs[i] is not None for i in (3, 4)]
        axes = ints(node, inputs[3], "axes") if has[0] else list(range(len(starts)))
        steps = ints(node, inputs[4], "steps") if has[1] else [1] * len(starts)
    index = [slice(None)] * rank(x)
    # Python's slice clamps out-of-range starts and ends the way ONNX specifies.
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        index[positive(axis, rank(x))] = slice(start, end, step)
    return [wrap(xp_for(inputs[:1]), x[tuple(index)])]


def _concat(node: Node, inputs: Inputs) -> list[Value]:
    xp = xp_for(inputs)
    return [wrap(xp, xp.concatenate(list(inputs), axis=node.attr("axis")))]


def _gather(node: Node, inputs: Inputs) -> list[Value]:
    data, indices = inputs[0], inputs[1]
    assert data is not None and indices is not None
    axis = positive(node.attr("axis", 0), rank(data))
    if isinstance(indices, np.ndarray):  # ONNX allows negative indices; normalise them
        indices = np.where(indices < 0, indices + data.shape[axis], indices)
    xp = xp_for(inputs)
    return [wrap(xp, xp.take(data, indices, axis=axis))]


def _shape(node: Node, inputs: Inputs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    dims = np.array(x.shape, dtype=np.int64)
    return [dims[node.attr("start", 0):node.attr("end", len(dims))]]


def _expand(node: Node, inputs: Inputs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    shape = np.broadcast_shapes(tuple(x.shape), tuple(ints(node, inputs[1], "shape")))
    xp = xp_for(inputs[:1])
    return [wrap(xp, xp.broadcast_to(x, shape))]


def _constant(node: Node, inputs: Inputs) -> list[Value]:
    for name in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        value = node.attr(name)
        if value is not None:
            if isinstance(value, onnx.TensorProto):
                return [numpy_helper.to_array(value)]
            dtype = np.float32 if name.startswith("value_float") else np.int64
            return [np.asarray(value, dtype=dtype)]
    raise BuildError(f"the xla lowering supports Constant with a tensor, float(s) or int(s) "
                     f"value, not node {node.proto.name!r}")


def _constant_of_shape(node: Node, inputs: Inputs) -> list[Value]:
    fill = node.attr("value")
    value = numpy_helper.to_array(fill) if fill is not None else np.zeros(1, np.float32)
    return [np.full(ints(node, inputs[0], "shape"), value.reshape(-1)[0], dtype=value.dtype)]


def _identity(node: Node, inputs: Inputs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    return [x]


OPS: Mapping[str, OpImpl] = {
    "Add": _binary("add"), "Sub": _binary("subtract"), "Mul": _binary("multiply"), "Div": _div,
    "Pow": _binary("power"), "Equal": _binary("equal"), "Less": _binary("less"),
    "Greater": _binary("greater"), "Max": _variadic("maximum"), "Min": _variadic("minimum"),
    "Sum": _variadic("add"), "Where": _where,
    "Relu": _unary(jax.nn.relu), "Sigmoid": _unary(jax.nn.sigmoid), "Tanh": _unary(jnp.tanh),
    "Erf": _unary(lax.erf), "Sqrt": _unary(jnp.sqrt), "Exp": _unary(jnp.exp),
    "Log": _unary(jnp.log), "Neg": _unary(jnp.negative), "Abs": _unary(jnp.abs),
    "Reciprocal": _unary(jnp.reciprocal), "HardSwish": _unary(jax.nn.hard_swish),
    "HardSigmoid": _unary(lambda x: jnp.clip(x * 0.2 + 0.5, 0, 1)),
    "Clip": _clip, "Cast": _cast, "Gelu": _gelu, "Softmax": _softmax,
    "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv,
    "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm,
    "ReduceMean": _reduce_mean, "GlobalAveragePool": _global_average_pool,
    "MaxPool": _max_pool, "AveragePool": _average_pool,
    "Reshape": _reshape, "Flatten": _flatten, "Transpose": _transpose, "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze, "Slice": _slice, "Concat": _concat, "Gather": _gather,
    "Shape": _shape, "Expand": _expand, "Constant": _constant,
    "ConstantOfShape": _constant_of_shape, "Identity": _identity, "Dropout": _identity,
}


# --- the graph -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoweredGraph:
    """An ONNX graph ready to trace: ``forward(weights, x)`` computes its one output.

    Attributes:
        input_name, output_name: the graph's single input and first output.
        weights: the float initializers by name, as ``forward`` takes them: jax arrays make them
            arguments of the compiled function, these numpy arrays make them constants in it.
        constants: the other initializers (integers: shapes, axes, indices), static when tracing.
        nodes: the graph's nodes in order, each with the opset it was written for.
        op_counts: how many nodes of each op type, for provenance.
        depthwise_taps: lower 2-D depthwise Conv as a sum of taps (see :func:`_depthwise_taps`).
    """

    input_name: str
    output_name: str
    weights: Mapping[str, np.ndarray]
    constants: Mapping[str, np.ndarray]
    nodes: tuple[Node, ...]
    op_counts: Mapping[str, int]
    depthwise_taps: bool = False

    def forward(self, weights: Mapping[str, Value], x: jax.Array) -> jax.Array:
        env: dict[str, Value] = {**self.constants, **weights, self.input_name: x}
        for node in self.nodes:
            inputs = [env[name] if name else None for name in node.proto.input]
            if node.op == "Conv":
                outputs = _conv(node, inputs, depthwise_taps=self.depthwise_taps)
            else:
                outputs = OPS[node.op](node, inputs)
            env.update(zip(node.proto.output, outputs, strict=False))
        return jnp.asarray(env[self.output_name])


def lower_model(model: onnx.ModelProto, *, depthwise_taps: bool = False) -> LoweredGraph:
    """``model`` as a :class:`LoweredGraph`; BuildError (one line) for ops the lowering lacks, a
    graph with more than one input, or subgraphs."""
    graph = model.graph
    opset = next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")),
                 0)
    _check_ops(graph)
    initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in initializers]
    if len(inputs) != 1 or not graph.output:
        raise BuildError(f"the xla backend runs graphs with one input and an output, got inputs "
                         f"{inputs} and {len(graph.output)} output(s)")
    weights = {n: a for n, a in initializers.items() if np.issubdtype(a.dtype, np.floating)
               or a.dtype.name == "bfloat16"}
    constants = {n: a for n, a in initializers.items() if n not in weights}
    counts: dict[str, int] = {}
    for node in graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return LoweredGraph(inputs[0], graph.output[0].name, weights, constants,
                        tuple(Node(node, opset) for node in graph.node), counts, depthwise_taps)


def _check_ops(graph: onnx.GraphProto) -> None:
    unknown = sorted({node.op_type if node.domain in ("", "ai.onnx") else
                      f"{node.domain}.{node.op_type}" for node in graph.node
                      if node.domain not in ("", "ai.onnx") or node.op_type not in OPS})
    if unknown:
        raise BuildError(f"the xla lowering has no implementation of ONNX op(s) {unknown}; "
                         f"supported: {', '.join(sorted(OPS))}")
