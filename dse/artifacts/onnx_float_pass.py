"""The fp16 / bf16 pass: one walk over a float32 ONNX graph that gives every float32
computation the lower-precision type its schema allows, with Casts where types meet.

onnx and ml_dtypes load when the pass runs, not at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dse.artifacts.onnx_graph import BFLOAT16, FLOAT16, FLOAT32, FreshNames, drop_unused, tensor_types
from dse.core import BuildError

if TYPE_CHECKING:
    import onnx

# The largest finite value of each: 65504, and bfloat16's (2 - 2**-7) * 2**127.
_LARGEST = {FLOAT16: 65504.0, BFLOAT16: (2 - 2**-7) * 2.0**127}
_TYPE_STRINGS = {FLOAT32: "tensor(float)", FLOAT16: "tensor(float16)", BFLOAT16: "tensor(bfloat16)"}
_TYPE_NAMES = {FLOAT32: "float32", FLOAT16: "fp16", BFLOAT16: "bf16"}


def low_float_array(values: np.ndarray, target: int) -> np.ndarray:
    """``values`` in the target type; finite values beyond its range saturate instead of
    turning into infinities (a -3.4e38 mask stays a large negative number)."""
    import ml_dtypes

    dtype = np.dtype(np.float16) if target == FLOAT16 else np.dtype(ml_dtypes.bfloat16)
    largest = _LARGEST[target]
    saturated = np.where(np.isfinite(values), np.clip(values, -largest, largest), values)
    return saturated.astype(dtype)


def _formal_type(params: Any, index: int) -> str | None:
    """The type string (a type parameter like "T", or a concrete type) of an op's
    ``index``-th input or output, per its schema's formal parameters."""
    from onnx.defs import OpSchema

    if index < len(params):
        return str(params[index].type_str)
    if params and params[-1].option == OpSchema.FormalParameterOption.Variadic:
        return str(params[-1].type_str)
    return None


class FloatGraphPass:
    """One walk over the (topologically sorted) graph that gives every float32 computation the
    target type.

    Each node's inputs and outputs are grouped by their type parameter in the op's schema (all of
    a group share one type). A group that holds float32 tensors takes the target type where the
    schema allows it, else stays float32; a group whose tensors are in the wrong type gets a Cast
    (or, for an initializer, a copy in the right type). The group of the first output is the
    op's computation: if it cannot take the target type, the op has no such version and the
    pass fails.
    """

    def __init__(self, model: onnx.ModelProto, target: int, precision: str) -> None:
        self._model = model
        self._graph = model.graph
        self._target = target
        self._precision = precision
        self._opsets = {entry.domain if entry.domain != "ai.onnx" else "": int(entry.version)
                        for entry in model.opset_import}
        self._original = tensor_types(model)
        self._current = dict(self._original)
        self._names = FreshNames(self._graph)
        self._fp32_initializers: dict[str, np.ndarray] = {}
        self._new_initializers: list[onnx.TensorProto] = []
        self._in_type: dict[tuple[str, int], str] = {}
        self._nodes: list[onnx.NodeProto] = []

    def run(self) -> onnx.ModelProto:
        self._convert_initializers()
        for node in self._graph.node:
            self._visit(node)
        self._cast_outputs_back()
        del self._graph.node[:]
        self._graph.node.extend(self._nodes)
        self._graph.initializer.extend(self._new_initializers)
        drop_unused(self._graph, self._fp32_initializers)
        for info in self._graph.value_info:
            if info.name in self._current and info.type.HasField("tensor_type"):
                info.type.tensor_type.elem_type = self._current[info.name]
        return self._model

    def _convert_initializers(self) -> None:
        from onnx import numpy_helper

        # An initializer that is also a graph input is a default the caller may override with
        # float32: it is an input, and stays float32.
        inputs = {info.name for info in self._graph.input}
        for tensor in self._graph.initializer:
            if tensor.data_type != FLOAT32 or tensor.name in inputs:
                continue
            values = numpy_helper.to_array(tensor)
            self._fp32_initializers[tensor.name] = values
            tensor.CopyFrom(numpy_helper.from_array(low_float_array(values, self._target),
                                                    tensor.name))
            self._current[tensor.name] = self._target

    def _visit(self, node: onnx.NodeProto) -> None:
        import onnx

        op = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
        if any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for attr in node.attribute):
            raise BuildError(f"op {op} (node {node.name!r}) holds subgraphs; the {self._precision} "
                             f"pass converts flat graphs only")
        names = [name for name in (*node.input, *node.output) if name]
        unknown = [name for name in names if name not in self._original]
        if unknown:
            raise BuildError(f"shape inference gave no type for {unknown[0]!r} of op {op}")
        if not any(self._original[name] == FLOAT32 for name in names):
            self._nodes.append(node)  # integer work (shape arithmetic): nothing to convert
            return
        schema = self._schema(node, op)
        inputs = [(name, _formal_type(schema.inputs, i)) for i, name in enumerate(node.input)]
        outputs = [(name, _formal_type(schema.outputs, i)) for i, name in enumerate(node.output)]
        wants = self._group_types(schema, [*inputs, *outputs])
        compute = _formal_type(schema.outputs, 0)
        if wants.get(compute or "") == FLOAT32:
            raise BuildError(f"op {op} (node {node.name!r}) has no {self._precision} version in "
                             f"opset {schema.since_version}'s schema")
        converted = onnx.NodeProto()
        converted.CopyFrom(node)
        for i, (name, formal) in enumerate(inputs):
            if name and formal in wants:
                converted.input[i] = self._in_type_of(name, wants[formal])
        for name, formal in outputs:
            if name and formal in wants:
                self._current[name] = wants[formal]
        if wants.get(compute or "") == self._target:
            self._convert_attributes(converted, op)
        self._nodes.append(converted)

    def _schema(self, node: onnx.NodeProto, op: str) -> Any:
        from onnx import defs

        domain = node.domain if node.domain != "ai.onnx" else ""
        version = self._opsets.get(domain, 0)
        try:
            return defs.get_schema(node.op_type, version, domain)
        except defs.SchemaError:
            raise BuildError(f"op {op} has no ONNX schema at opset {version}; the "
                             f"{self._precision} pass converts standard ONNX ops only") from None

    def _group_types(self, schema: Any, slots: list[tuple[str, str | None]]) -> dict[str, int]:
        """The type each float32 group of a node takes: the target where the schema allows it."""
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        wants: dict[str, int] = {}
        for name, formal in slots:
            if name and formal is not None and self._original[name] == FLOAT32:
                # A formal without a type parameter names its one concrete type.
                target_ok = _TYPE_STRINGS[self._target] in allowed.get(formal, {formal})
                wants[formal] = self._target if target_ok else FLOAT32
        return wants

    def _in_type_of(self, name: str, elem_type: int) -> str:
        """``name`` itself if it already has ``elem_type``, else a copy of it in that type."""
        if self._current[name] == elem_type:
            return name
        key = (name, elem_type)
        if key not in self._in_type:
            from onnx import helper, numpy_helper

            copy = self._names.fresh(f"{name}_{_TYPE_NAMES[elem_type]}")
            if name in self._fp32_initializers and elem_type == FLOAT32:
                # A float32 copy of the original values, not a Cast of the rounded ones.
                self._new_initializers.append(
                    numpy_helper.from_array(self._fp32_initializers[name], copy))
            else:
                self._nodes.append(helper.make_node("Cast", [name], [copy], to=elem_type,
                                                    name=self._names.fresh(f"Cast_{copy}")))
            self._current[copy] = elem_type
            self._in_type[key] = copy
        return self._in_type[key]

    def _convert_attributes(self, node: onnx.NodeProto, op: str) -> None:
        """The attributes that make float32 values or name float32 as a type, in the target type."""
        import onnx
        from onnx import numpy_helper

        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == FLOAT32:
                attr.i = self._target
            elif attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == FLOAT32:
                if node.op_type not in ("Constant", "ConstantOfShape"):
                    raise BuildError(f"op {op} (node {node.name!r}) holds a float32 tensor "
                                     f"attribute {attr.name!r} the pass cannot convert")
                values = low_float_array(numpy_helper.to_array(attr.t), self._target)
                attr.t.CopyFrom(numpy_helper.from_array(values, attr.t.name))
            elif node.op_type == "Constant" and attr.name in ("value_float", "value_floats"):
                values = np.array(attr.f if attr.name == "value_float" else list(attr.floats),
                                  dtype=np.float32)
                constant = numpy_helper.from_array(low_float_array(values, self._target))
                attr.CopyFrom(onnx.helper.make_attribute("value", constant))
            elif attr.name in ("to", "dtype") and attr.i == FLOAT32:
                raise BuildError(f"op {op} (node {node.name!r}) sets its output type by "
                                 f"attribute {attr.name!r}; the pass cannot convert it")

    def _cast_outputs_back(self) -> None:
        """Graph outputs that came out in the target type: the producer writes a renamed tensor
        and a final Cast gives the output its float32 name back."""
        from onnx import helper

        for output in self._graph.output:
            name = output.name
            if self._original.get(name) != FLOAT32 or self._current[name] == FLOAT32:
                continue
            inner = self._names.fresh(f"{name}_{self._precision}")
            for node in self._nodes:
                for names in (node.input, node.output):
                    for i, used in enumerate(names):
                        if used == name:
                            names[i] = inner
            for tensor in self._graph.initializer:
                if tensor.name == name:
                    tensor.name = inner
            self._nodes.append(helper.make_node("Cast", [inner], [name], to=FLOAT32,
                                                name=self._names.fresh(f"Cast_{name}")))
            self._current[inner], self._current[name] = self._current[name], FLOAT32
