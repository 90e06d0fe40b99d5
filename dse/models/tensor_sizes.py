"""A tensor's static element type and shape, and its size in bytes at that stored type.

Sizes are looked up by the TensorProto type's name, so this module imports without onnx and works
with onnx releases that lack some types; onnx loads when a size is first asked for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class StaticTensor:
    """A tensor whose element type (TensorProto.DataType) and full shape the graph states."""

    elem_type: int
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


#: Every tensor of a graph with a known static shape, by name.
Shapes = Mapping[str, StaticTensor]

# Bits per element by TensorProto type name (looked up by name: older onnx lacks some types).
# STRING and the 6-bit floats have no fixed size here; a tensor of them raises ValueError.
_BITS_BY_TYPE_NAME = {
    "BOOL": 8, "INT8": 8, "UINT8": 8, "INT16": 16, "UINT16": 16, "INT32": 32, "UINT32": 32,
    "INT64": 64, "UINT64": 64, "FLOAT16": 16, "BFLOAT16": 16, "FLOAT": 32, "DOUBLE": 64,
    "COMPLEX64": 64, "COMPLEX128": 128, "FLOAT8E4M3FN": 8, "FLOAT8E4M3FNUZ": 8, "FLOAT8E5M2": 8,
    "FLOAT8E5M2FNUZ": 8, "FLOAT8E8M0": 8, "INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2,
    "UINT2": 2,
}


def element_bits(tensor: StaticTensor, name: str) -> int:
    """Bits per element of ``tensor`` (called ``name`` in errors); ValueError for a type with no
    fixed size."""
    import onnx

    type_name = onnx.TensorProto.DataType.Name(tensor.elem_type)
    bits = _BITS_BY_TYPE_NAME.get(type_name)
    if bits is None:
        raise ValueError(f"tensor {name!r} has element type {type_name}, which has no fixed "
                         f"size; known: {', '.join(sorted(_BITS_BY_TYPE_NAME))}")
    return bits


def total_bytes(shapes: Shapes, names: Iterable[str]) -> int:
    """The bytes the tensors ``names`` take at their stored types."""
    # Sub-byte types pack: a tensor takes whole bytes, its elements share them.
    return sum(math.ceil(shapes[name].numel * element_bits(shapes[name], name) / 8)
               for name in names)
