"""The graph plumbing the precision passes share: loading, checking and saving a model, raising
its opset, naming new tensors, dropping dead initializers, and turning onnx and onnxruntime
failures into a BuildError.

onnx and onnxruntime load when a function here runs, not at import.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from dse.core import BuildError

if TYPE_CHECKING:
    import onnx

# ONNX element types (TensorProto.DataType), by number so that the passes import without onnx.
FLOAT32, FLOAT16, BFLOAT16 = 1, 10, 16


@contextmanager
def build_step(what: str, model_path: Path) -> Iterator[None]:
    """Turn the failures of onnx and onnxruntime (reading, converting, inferring, checking,
    calibrating) into a BuildError that names the step and the file. Other exceptions are bugs
    and propagate."""
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped, unused-ignore]
    from onnx.checker import ValidationError
    from onnx.shape_inference import InferenceError
    from onnx.version_converter import ConvertError
    from onnxruntime.capi.onnxruntime_pybind11_state import (
        Fail,
        InvalidArgument,
        InvalidGraph,
        RuntimeException,
    )

    library_errors = (OSError, DecodeError, ValidationError, InferenceError, ConvertError, Fail,
                      InvalidArgument, InvalidGraph, RuntimeException)
    try:
        yield
    except BuildError as exc:
        raise BuildError(f"{what} of {model_path.name} failed: {exc}") from exc
    except library_errors as exc:
        raise BuildError(f"{what} of {model_path.name} failed: {type(exc).__name__}: "
                         f"{str(exc).strip()}") from exc


def load_model(path: Path) -> onnx.ModelProto:
    import onnx

    model = onnx.load(str(path))
    # A file of junk can parse as an empty model; the checker names what is missing.
    onnx.checker.check_model(model)
    return model


def at_least_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``model`` itself if its default-domain opset is ``opset`` or later, else a converted copy
    that keeps the exporter's annotations."""
    if _default_opset(model) >= opset:
        return model
    from onnx import version_converter

    converted: onnx.ModelProto = version_converter.convert_version(model, opset)
    _carry_metadata(model, converted)
    return converted


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise BuildError("the model imports no default-domain (ai.onnx) opset")


def _carry_metadata(source: onnx.ModelProto, target: onnx.ModelProto) -> None:
    """Give back what the version converter drops: the exporter's annotations of nodes and
    tensors, and the value_info of initializers. They are most of a small model's bytes, so
    without them a converted file would look several times smaller than an unconverted one."""
    nodes = {node.name: node for node in source.graph.node if node.name}
    for node in target.graph.node:
        if node.name in nodes and not node.metadata_props:
            node.doc_string = nodes[node.name].doc_string
            node.metadata_props.extend(nodes[node.name].metadata_props)
    graph = source.graph
    infos = {info.name: info for info in (*graph.input, *graph.output, *graph.value_info)}
    for info in (*target.graph.input, *target.graph.output, *target.graph.value_info):
        if info.name in infos and not info.metadata_props:
            info.metadata_props.extend(infos[info.name].metadata_props)
    # Initializers keep their values and types across opsets, so their value_info still holds.
    known = {info.name for info in target.graph.value_info}
    initializers = {tensor.name for tensor in target.graph.initializer}
    target.graph.value_info.extend(info for info in graph.value_info
                                   if info.name in initializers and info.name not in known)


def check_and_save(model: onnx.ModelProto, out_path: Path) -> None:
    import onnx

    # Strict inference fills in the types of the tensors the pass added and fails on any
    # mismatch; the full check then validates every node against its schema.
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(inferred, full_check=True)
    onnx.save(inferred, str(out_path))


def tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    """The element type of every tensor of the graph, as shape inference sees it."""
    import onnx

    graph = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph
    types = {info.name: int(info.type.tensor_type.elem_type)
             for info in (*graph.input, *graph.output, *graph.value_info)
             if info.type.HasField("tensor_type")}
    types.update({tensor.name: int(tensor.data_type) for tensor in graph.initializer})
    return types


class FreshNames:
    """Fresh tensor and node names: new names must not collide with any name in the graph."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self._taken = {tensor.name for tensor in graph.initializer}
        self._taken.update(info.name for info in (*graph.input, *graph.output, *graph.value_info))
        for node in graph.node:
            self._taken.update((*node.input, *node.output, node.name))

    def fresh(self, base: str) -> str:
        name, count = base, 0
        while name in self._taken:
            count += 1
            name = f"{base}_{count}"
        self._taken.add(name)
        return name


def drop_unused(graph: onnx.GraphProto, names: Iterable[str]) -> None:
    """Remove the initializers (and their value_info) among ``names`` that nothing reads any more."""
    used = {name for node in graph.node for name in node.input}
    used.update(output.name for output in graph.output)
    unused = set(names) - used
    kept = [tensor for tensor in graph.initializer if tensor.name not in unused]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    infos = [info for info in graph.value_info if info.name not in unused]
    del graph.value_info[:]
    graph.value_info.extend(infos)
