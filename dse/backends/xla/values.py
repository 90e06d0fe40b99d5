"""The values and nodes the xla lowering passes around, and the helpers every op implementation
uses (:mod:`dse.backends.xla.ops`). Values are of two kinds:

* *static* values are numpy arrays known while tracing: integer initializers, ``Constant`` outputs,
  ``Shape`` of a traced tensor, and anything computed from static values only. Ops that take
  shapes, axes or indices as inputs (Reshape's shape, Slice's starts and ends, ReduceMean's axes)
  require them static, and ops whose inputs are all static are evaluated with numpy, so shape
  arithmetic folds away before XLA sees it.
* *traced* values are jax arrays: the graph input, the float initializers when they are passed as
  arguments (the ``weights: arguments`` knob), and what depends on them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
import onnx
from onnx import helper

from dse.core import BuildError

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
