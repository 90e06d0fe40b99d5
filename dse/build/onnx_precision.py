"""fp32 ONNX -> an fp16 or bf16 graph, or a float8 (e4m3fn) Q/DQ graph.

Every graph written here keeps float32 inputs and outputs, so a runner feeds and reads float32
whatever the precision. onnx and onnxruntime load when a conversion runs, not at import.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.exceptions import BuildError

if TYPE_CHECKING:
    import onnx

# Bump when a transform changes, so cached files from before are not reused.
FLOAT_VERSION = 1
FP8_VERSION = 1

# ONNX Runtime graph rewrites (1.32) that mishandle float8 Q/DQ: they read a QuantizeLinear's
# zero point as an integer one. With a Clip in front the session fails to load ("Unexpected data
# type for QuantizeLinear input y_zero_point of 17"); with a Relu in front the Relu is dropped and
# negative values pass. A runner loading an fp8 graph with ONNX Runtime passes these as
# ``disabled_optimizers``.
ORT_FP8_DISABLED_OPTIMIZERS = ("ClipQuantRewrite", "ReluQuantRewrite")

# ONNX element types (TensorProto.DataType), by number so that this module imports without onnx.
_FLOAT32, _FLOAT16, _BFLOAT16 = 1, 10, 16
_LOW_FLOATS = {"fp16": _FLOAT16, "bf16": _BFLOAT16}
# The largest finite value of each: 65504, and bfloat16's (2 - 2**-7) * 2**127.
_LARGEST = {_FLOAT16: 65504.0, _BFLOAT16: (2 - 2**-7) * 2.0**127}
_TYPE_STRINGS = {_FLOAT32: "tensor(float)", _FLOAT16: "tensor(float16)", _BFLOAT16: "tensor(bfloat16)"}
_TYPE_NAMES = {_FLOAT32: "float32", _FLOAT16: "fp16", _BFLOAT16: "bf16"}
# The first opset in which Conv, the pools and HardSwish accept bfloat16; fp16 keeps the model's.
_BF16_OPSET = 22
# The first opset with float8 QuantizeLinear / DequantizeLinear.
_FP8_OPSET = 19
_FP8_MAX = 448.0  # the largest finite float8 e4m3fn
_CALIBRATION_BATCH = 32


def convert_float(fp32_path: Path, out_path: Path, precision: str) -> None:
    """Write a copy of ``fp32_path`` that computes in ``precision`` ("fp16" or "bf16") to ``out_path``.

    Every float32 initializer and every float32 computation takes the target type; the graph's
    inputs and outputs stay float32, with Cast nodes at the boundary. An operator input that its
    schema allows in float32 only (say Resize scales under bf16) keeps float32. Initializer values
    beyond the target's range saturate to its largest finite value. bf16 graphs are raised to
    opset 22, the first in which Conv and the pools accept bfloat16.

    Raises BuildError, naming the op, for a graph the pass cannot convert safely (control flow,
    custom domains, an op without a version in the target type), and for an unreadable model.
    """
    if precision not in _LOW_FLOATS:
        raise BuildError(f"float conversion takes precision fp16 or bf16, got {precision!r}")
    what = f"{precision} conversion"
    with _build_step(what, fp32_path):
        model = _load_model(fp32_path)
        if precision == "bf16":
            model = _at_least_opset(model, _BF16_OPSET)
        converted = _FloatGraphPass(model, _LOW_FLOATS[precision], precision).run()
        _check_and_save(converted, out_path)


def quantize_fp8(fp32_path: Path, out_path: Path, calibration: np.ndarray) -> None:
    """Write a float8 (e4m3fn) Q/DQ copy of ``fp32_path`` to ``out_path``: explicit quantization,
    the form TensorRT builds fp8 engines from.

    The weights of Conv, Gemm and MatMul are stored in float8 with one scale per output channel
    (max |w| / 448) behind a DequantizeLinear; the activations entering those ops pass a
    QuantizeLinear -> DequantizeLinear pair with one scale per tensor, max |x| / 448 over the
    ``calibration`` samples (N, *sample_shape, float). Biases, activation functions, residual adds and
    the outputs stay float32, as fp8 hardware accumulates and applies epilogues in higher
    precision. Models below opset 19 are raised to it. Raises BuildError on failure.
    """
    if calibration.ndim < 2 or len(calibration) == 0:
        raise BuildError(f"fp8 calibration needs a non-empty (N, *sample_shape) array, got shape "
                         f"{calibration.shape}")
    images = np.ascontiguousarray(calibration, dtype=np.float32)
    with _build_step("fp8 quantization", fp32_path):
        model = _at_least_opset(_load_model(fp32_path), _FP8_OPSET)
        _Fp8Pass(model, images).run()
        _check_and_save(model, out_path)


# ---------------------------------------------------------------------------------------------
# shared steps


@contextmanager
def _build_step(what: str, model_path: Path) -> Iterator[None]:
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


def _load_model(path: Path) -> onnx.ModelProto:
    import onnx

    model = onnx.load(str(path))
    # A file of junk can parse as an empty model; the checker names what is missing.
    onnx.checker.check_model(model)
    return model


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise BuildError("the model imports no default-domain (ai.onnx) opset")


def _at_least_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    if _default_opset(model) >= opset:
        return model
    from onnx import version_converter

    converted: onnx.ModelProto = version_converter.convert_version(model, opset)
    _carry_metadata(model, converted)
    return converted


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


def _check_and_save(model: onnx.ModelProto, out_path: Path) -> None:
    import onnx

    # Strict inference fills in the types of the tensors the pass added and fails on any
    # mismatch; the full check then validates every node against its schema.
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(inferred, full_check=True)
    onnx.save(inferred, str(out_path))


def _tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    """The element type of every tensor of the graph, as shape inference sees it."""
    import onnx

    graph = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph
    types = {info.name: int(info.type.tensor_type.elem_type)
             for info in (*graph.input, *graph.output, *graph.value_info)
             if info.type.HasField("tensor_type")}
    types.update({tensor.name: int(tensor.data_type) for tensor in graph.initializer})
    return types


class _Names:
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


def _drop_unused(graph: onnx.GraphProto, names: Iterable[str]) -> None:
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


# ---------------------------------------------------------------------------------------------
# fp16 / bf16


def _low_float_array(values: np.ndarray, target: int) -> np.ndarray:
    """``values`` in the target type; finite values beyond its range saturate instead of
    turning into infinities (a -3.4e38 mask stays a large negative number)."""
    import ml_dtypes

    dtype = np.dtype(np.float16) if target == _FLOAT16 else np.dtype(ml_dtypes.bfloat16)
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


class _FloatGraphPass:
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
        self._original = _tensor_types(model)
        self._current = dict(self._original)
        self._names = _Names(self._graph)
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
        _drop_unused(self._graph, self._fp32_initializers)
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
            if tensor.data_type != _FLOAT32 or tensor.name in inputs:
                continue
            values = numpy_helper.to_array(tensor)
            self._fp32_initializers[tensor.name] = values
            tensor.CopyFrom(numpy_helper.from_array(_low_float_array(values, self._target),
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
        if not any(self._original[name] == _FLOAT32 for name in names):
            self._nodes.append(node)  # integer work (shape arithmetic): nothing to convert
            return
        schema = self._schema(node, op)
        inputs = [(name, _formal_type(schema.inputs, i)) for i, name in enumerate(node.input)]
        outputs = [(name, _formal_type(schema.outputs, i)) for i, name in enumerate(node.output)]
        wants = self._group_types(schema, [*inputs, *outputs])
        compute = _formal_type(schema.outputs, 0)
        if wants.get(compute or "") == _FLOAT32:
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
            if name and formal is not None and self._original[name] == _FLOAT32:
                # A formal without a type parameter names its one concrete type.
                target_ok = _TYPE_STRINGS[self._target] in allowed.get(formal, {formal})
                wants[formal] = self._target if target_ok else _FLOAT32
        return wants

    def _in_type_of(self, name: str, elem_type: int) -> str:
        """``name`` itself if it already has ``elem_type``, else a copy of it in that type."""
        if self._current[name] == elem_type:
            return name
        key = (name, elem_type)
        if key not in self._in_type:
            from onnx import helper, numpy_helper

            copy = self._names.fresh(f"{name}_{_TYPE_NAMES[elem_type]}")
            if name in self._fp32_initializers and elem_type == _FLOAT32:
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
            if node.op_type == "Cast" and attr.name == "to" and attr.i == _FLOAT32:
                attr.i = self._target
            elif attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == _FLOAT32:
                if node.op_type not in ("Constant", "ConstantOfShape"):
                    raise BuildError(f"op {op} (node {node.name!r}) holds a float32 tensor "
                                     f"attribute {attr.name!r} the pass cannot convert")
                values = _low_float_array(numpy_helper.to_array(attr.t), self._target)
                attr.t.CopyFrom(numpy_helper.from_array(values, attr.t.name))
            elif node.op_type == "Constant" and attr.name in ("value_float", "value_floats"):
                values = np.array(attr.f if attr.name == "value_float" else list(attr.floats),
                                  dtype=np.float32)
                constant = numpy_helper.from_array(_low_float_array(values, self._target))
                attr.CopyFrom(onnx.helper.make_attribute("value", constant))
            elif attr.name in ("to", "dtype") and attr.i == _FLOAT32:
                raise BuildError(f"op {op} (node {node.name!r}) sets its output type by "
                                 f"attribute {attr.name!r}; the pass cannot convert it")

    def _cast_outputs_back(self) -> None:
        """Graph outputs that came out in the target type: the producer writes a renamed tensor
        and a final Cast gives the output its float32 name back."""
        from onnx import helper

        for output in self._graph.output:
            name = output.name
            if self._original.get(name) != _FLOAT32 or self._current[name] == _FLOAT32:
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
            self._nodes.append(helper.make_node("Cast", [inner], [name], to=_FLOAT32,
                                                name=self._names.fresh(f"Cast_{name}")))
            self._current[inner], self._current[name] = self._current[name], _FLOAT32


# ---------------------------------------------------------------------------------------------
# fp8


class _Fp8Pass:
    """Inserts float8 Q/DQ in front of the Conv, Gemm and MatMul nodes of a float32 model."""

    def __init__(self, model: onnx.ModelProto, images: np.ndarray) -> None:
        self._model = model
        self._graph = model.graph
        self._images = images
        self._names = _Names(self._graph)
        self._types = _tensor_types(model)
        self._weights = {tensor.name: tensor for tensor in self._graph.initializer
                         if tensor.data_type == _FLOAT32}

    def run(self) -> None:
        # One entry per node, in graph order (protobuf hands out a new wrapper object on every
        # access, so nodes cannot be dictionary keys).
        plan = [self._quantized_inputs(node) for node in self._graph.node]
        if not any(plan):
            raise BuildError("the model has no Conv, Gemm or MatMul with float32 inputs to "
                             "quantize")
        activations = sorted({node.input[i] for node, inputs in zip(self._graph.node, plan, strict=True)
                              for i, axis in inputs if axis is None})
        amax = self._calibrate(activations)
        dequantized: dict[str, str] = {}
        nodes: list[onnx.NodeProto] = []
        for node, inputs in zip(self._graph.node, plan, strict=True):
            for index, axis in inputs:
                name = node.input[index]
                if name not in dequantized:
                    if axis is None:
                        dequantized[name] = self._fake_quantize(name, amax[name], nodes)
                    else:
                        dequantized[name] = self._quantize_weight(name, axis, nodes)
                node.input[index] = dequantized[name]
            nodes.append(node)
        del self._graph.node[:]
        self._graph.node.extend(nodes)
        _drop_unused(self._graph, self._weights)

    def _quantized_inputs(self, node: onnx.NodeProto) -> list[tuple[int, int | None]]:
        """(input index, channel axis) of the node's inputs to quantize; axis None for an
        activation (one scale), else the weight's output-channel axis (one scale per channel)."""
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Conv", "Gemm", "MatMul"):
            return []
        quantized: list[tuple[int, int | None]] = []
        for index in (0, 1):
            name = node.input[index]
            if self._types.get(name) != _FLOAT32:
                continue
            weight = self._weights.get(name)
            if weight is None:
                quantized.append((index, None))
            elif index == 1 and (axis := _weight_axis(node, len(weight.dims))) is not None:
                quantized.append((index, axis))
        return quantized

    def _calibrate(self, activations: list[str]) -> dict[str, float]:
        """max |x| of each activation over the calibration images, from an fp32 ORT session
        that exposes them as extra outputs."""
        import onnx
        import onnxruntime

        inputs = [info.name for info in self._graph.input if info.name not in self._weights]
        if len(inputs) != 1:
            raise BuildError(f"fp8 calibration expects a model with one input, got {inputs}")
        probe = onnx.ModelProto()
        probe.CopyFrom(self._model)
        inner = [name for name in activations if name != inputs[0]]
        known = {output.name for output in probe.graph.output}
        probe.graph.output.extend(onnx.helper.make_tensor_value_info(name, _FLOAT32, None)
                                  for name in inner if name not in known)
        session = onnxruntime.InferenceSession(probe.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
        amax = dict.fromkeys(activations, 0.0)
        for first in range(0, len(self._images), _CALIBRATION_BATCH):
            batch = self._images[first:first + _CALIBRATION_BATCH]
            values = dict(zip(inner, session.run(inner, {inputs[0]: batch}), strict=True))
            values[inputs[0]] = batch
            for name in activations:
                amax[name] = max(amax[name], float(np.max(np.abs(values[name]))))
        broken = [name for name, value in amax.items() if not np.isfinite(value)]
        if broken:
            raise BuildError(f"activation {broken[0]!r} is not finite on the calibration images")
        return amax

    def _fake_quantize(self, name: str, amax: float, nodes: list[onnx.NodeProto]) -> str:
        from onnx import helper

        scale = self._initializer(f"{name}_fp8_scale", np.float32(_scale(amax)))
        zero = self._initializer(f"{name}_fp8_zero_point", _fp8_zeros(()))
        quantized = self._names.fresh(f"{name}_fp8")
        dequantized = self._names.fresh(f"{name}_dequantized")
        nodes.append(helper.make_node("QuantizeLinear", [name, scale, zero], [quantized],
                                      name=self._names.fresh(f"QuantizeLinear_{name}")))
        nodes.append(helper.make_node("DequantizeLinear", [quantized, scale, zero], [dequantized],
                                      name=self._names.fresh(f"DequantizeLinear_{name}")))
        return dequantized

    def _quantize_weight(self, name: str, axis: int, nodes: list[onnx.NodeProto]) -> str:
        import ml_dtypes
        from onnx import helper, numpy_helper

        weight = numpy_helper.to_array(self._weights[name])
        others = tuple(i for i in range(weight.ndim) if i != axis)
        scales = np.array([_scale(float(a)) for a in np.max(np.abs(weight), axis=others)],
                          dtype=np.float32)
        shape = [1] * weight.ndim
        shape[axis] = len(scales)
        # Clipped first: a rounding hair above 448 would cast to NaN, as e4m3fn has no infinity.
        scaled = np.clip(weight / scales.reshape(shape), -_FP8_MAX, _FP8_MAX)
        stored = self._initializer(f"{name}_fp8", scaled.astype(ml_dtypes.float8_e4m3fn))
        scale = self._initializer(f"{name}_fp8_scale", scales)
        zero = self._initializer(f"{name}_fp8_zero_point", _fp8_zeros(scales.shape))
        dequantized = self._names.fresh(f"{name}_dequantized")
        nodes.append(helper.make_node("DequantizeLinear", [stored, scale, zero], [dequantized],
                                      axis=axis, name=self._names.fresh(f"DequantizeLinear_{name}")))
        return dequantized

    def _initializer(self, base: str, values: np.ndarray | np.generic) -> str:
        from onnx import numpy_helper

        name = self._names.fresh(base)
        self._graph.initializer.append(numpy_helper.from_array(np.asarray(values), name))
        return name


def _weight_axis(node: onnx.NodeProto, ndim: int) -> int | None:
    """The output-channel axis of a Conv, Gemm or MatMul weight; None for a MatMul vector,
    which has no output channels and stays float32."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        trans_b = any(attr.name == "transB" and attr.i for attr in node.attribute)
        return 0 if trans_b else 1
    return ndim - 1 if ndim >= 2 else None  # MatMul: (..., K, N), one scale per column


def _scale(amax: float) -> float:
    # A tensor that was all zeros in calibration quantizes exactly with any scale.
    return amax / _FP8_MAX if amax > 0 else 1.0


def _fp8_zeros(shape: tuple[int, ...]) -> np.ndarray:
    import ml_dtypes

    return np.zeros(shape, dtype=ml_dtypes.float8_e4m3fn)
