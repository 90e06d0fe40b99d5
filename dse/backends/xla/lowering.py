"""An ONNX graph as a jax function, for the xla backend.

The graph is lowered node by node while jax traces it (each op by :data:`dse.backends.xla.ops.OPS`),
so XLA sees one function and compiles it whole (fusing what it can); nothing here runs at inference
time. An op outside ``OPS`` (or a custom domain) is a BuildError naming it and the supported set.
Only jax, numpy and onnx are needed; importing this module imports jax, so the backend imports it
inside ``compile``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import onnx
from onnx import numpy_helper

from dse.backends.xla.ops import OPS, conv
from dse.backends.xla.values import Node, Value
from dse.core import BuildError

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
        depthwise_taps: lower 2-D depthwise Conv as a sum of taps (see :func:`dse.backends.xla.ops.conv`).
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
                outputs = conv(node, inputs, depthwise_taps=self.depthwise_taps)
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
