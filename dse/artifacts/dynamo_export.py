"""torch's dynamo ONNX exporter, with torchlib's operator registry built once per process.

``torch.onnx.export(dynamo=True)`` rebuilds the registry of torchlib's ~500 ONNX functions on every
call (onnxscript reads and parses each function's source): about 0.55 s of a 0.9 s export of a
small CNN here, paid again for every architecture a campaign builds (docs/benchmarks.md,
"Backends"). The registry is read, never changed, by an export that registers no custom
operators, so one built once serves every export of the process. This is the exporter's own
entry point (``torch.onnx._internal.exporter._core.export``) given that registry, with the
arguments and the axis renaming of ``torch.onnx.export`` (torch 2.13's ``_compat.export_compat``);
where this torch lacks any of those internals, the public ``torch.onnx.export`` is used unchanged.
tests/artifacts/test_dynamo_export.py checks the two give the same graph.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def dynamo_export(module: torch.nn.Module, args: tuple[Any, ...], path: Path, *,
                  input_names: Sequence[str], output_names: Sequence[str],
                  dynamic_shapes: tuple[Any, ...]) -> None:
    """Export ``module`` called with ``args`` to ``path``: one self-contained file (weights
    inside), the default opset, the exporter's graph optimisation on — as ``torch.onnx.export``
    with ``dynamo=True, external_data=False``."""
    import torch

    entry = _exporter_entry()
    registry = None if entry is None else _torchlib_registry()
    if entry is None or registry is None:
        torch.onnx.export(module, args, str(path), dynamo=True, external_data=False,
                          input_names=list(input_names), output_names=list(output_names),
                          dynamic_shapes=dynamic_shapes, verbose=False)
        return
    from torch.onnx import _constants
    from torch.onnx._internal.exporter import _dynamic_shapes

    # As torch.onnx.export does: named axes become the exporter's dynamic dims for tracing, and
    # the graph's axes are renamed back to the given names after (the batch axis reads "batch").
    traced_shapes, rename_axes = _dynamic_shapes.convert_str_to_export_dim(dynamic_shapes)
    program = entry(module, args, None, registry=registry, dynamic_shapes=traced_shapes,
                    input_names=list(input_names), output_names=list(output_names),
                    verbose=False, optimize=True, opset_version=_constants.ONNX_DEFAULT_OPSET)
    if rename_axes:
        program._rename_dynamic_axes(dynamic_shapes)
    program.save(str(path), include_initializers=True, keep_initializers_as_inputs=False,
                 external_data=False)


@functools.cache
def _exporter_entry() -> Any | None:
    """The exporter's ``_core.export`` where it takes the arguments used here, else None."""
    try:
        from torch.onnx import _constants
        from torch.onnx._internal.exporter import _core, _dynamic_shapes, _onnx_program
    except ImportError:
        return None
    if not (hasattr(_dynamic_shapes, "convert_str_to_export_dim")
            and hasattr(_onnx_program.ONNXProgram, "_rename_dynamic_axes")):
        return None
    wanted = {"registry", "dynamic_shapes", "input_names", "output_names", "optimize",
              "opset_version", "verbose"}
    parameters = set(inspect.signature(_core.export).parameters)
    if not wanted <= parameters or not hasattr(_constants, "ONNX_DEFAULT_OPSET"):
        return None
    return _core.export


@functools.cache
def _torchlib_registry() -> Any | None:
    """torchlib's registry at the opset ``torch.onnx.export`` would build it for (the default
    opset, or torchlib's own where the default is older), built once."""
    try:
        from torch.onnx import _constants as onnx_constants
        from torch.onnx._internal.exporter import _constants, _registration
    except ImportError:
        return None
    opset = max(onnx_constants.ONNX_DEFAULT_OPSET, _constants.TORCHLIB_OPSET)
    return _registration.ONNXRegistry.from_torchlib(opset_version=opset)
