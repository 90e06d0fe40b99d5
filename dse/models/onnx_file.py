"""What dse needs to know of a user's ONNX model file before deploying it: its one input."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

# ONNX TensorProto.FLOAT: the runners feed float32 batches.
_FLOAT = 1


@dataclass(frozen=True)
class OnnxInput:
    """The graph's input: its name, one sample's shape, and the batch size when the file fixes
    it (None when the batch axis is dynamic)."""

    name: str
    sample_shape: tuple[int, ...]
    fixed_batch: int | None


def onnx_input(path: Path) -> OnnxInput:
    """The single float32 input of the model at ``path``, batch axis first.

    Raises ValueError naming the file and what is wrong: unreadable, several inputs, not float32,
    or a dynamic axis other than the batch (dse times fixed-shape samples).
    """
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ... : all mean "not a model"
        raise ValueError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from None
    weights = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in weights]
    if len(inputs) != 1:
        raise ValueError(f"{path}: dse deploys models with one input; this one has "
                         f"{len(inputs)} ({', '.join(i.name for i in inputs)})")
    tensor = inputs[0].type.tensor_type
    if tensor.elem_type != _FLOAT:
        name = onnx.TensorProto.DataType.Name(tensor.elem_type)
        raise ValueError(f"{path}: input {inputs[0].name!r} is {name}; dse feeds float32 inputs")
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
            for d in tensor.shape.dim]
    if len(dims) < 2:
        raise ValueError(f"{path}: input {inputs[0].name!r} has shape of rank {len(dims)}; dse "
                         f"needs a batch axis first and a sample shape after it")
    dynamic = [f"{index} ({_dim_name(tensor.shape.dim[index])})"
               for index, dim in enumerate(dims[1:], start=1) if dim is None]
    if dynamic:
        raise ValueError(f"{path}: input {inputs[0].name!r} has dynamic axes "
                         f"{', '.join(dynamic)} besides the batch (axis 0); dse feeds samples of "
                         f"one fixed shape: export it with a fixed sample shape")
    sample = tuple(int(d) for d in dims[1:] if d is not None)
    return OnnxInput(inputs[0].name, sample, dims[0])


def _dim_name(dim: onnx.TensorShapeProto.Dimension) -> str:
    """How the file names a dynamic dimension: its symbol (``'h'``), else that it has none."""
    return repr(dim.dim_param) if dim.dim_param else "unnamed"
