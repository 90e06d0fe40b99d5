"""The ExecuTorch conversion: the trained torch module to a ``.pte`` file, on the device worker.

``torch.export`` at the candidate's batch size (static shapes) -> for int8, PT2E post-training
quantization with ExecuTorch's XNNPACK quantizer (torchao's ``prepare_pt2e``/``convert_pt2e``),
calibrated on the training samples the request carries -> ``to_edge_transform_and_lower`` with the
XNNPACK partitioner (none for ``delegate: false``: ExecuTorch's portable kernels run everything) ->
``to_executorch`` -> the program's bytes. fp16 is the module cast with ``half()``: its weights,
activations and input are fp16, and XNNPACK's partitioner takes the fp16 graph whole.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from dse.backends.base import first_error_line, flag_knob
from dse.core import BuildError
from dse.plugins import ConversionRequest

# The precisions the conversion makes; the capability entries say why the others are refused.
CONVERTED_PRECISIONS = ("fp32", "fp16", "int8")
# The int8 scheme, in describe() and the reasons: what convert() below sets up.
# Samples per calibration call (see _calibration_graph).
CALIBRATION_BATCH = 32
INT8_SCHEME = ("PT2E static int8 (torchao prepare_pt2e/convert_pt2e), ExecuTorch XNNPACKQuantizer: "
               "symmetric, per-channel weights, per-tensor activations")


def convert(request: ConversionRequest, out_path: Path) -> None:
    """Write the ``.pte`` of ``request`` at ``out_path``; BuildError with the converter's message.

    The request's module is copied first: ``half()`` casts in place, and the module is shared with
    the fp32 reference and other candidates.
    """
    delegate = flag_knob(request.knobs, "delegate", True)
    if request.precision not in CONVERTED_PRECISIONS:
        raise BuildError(f"executorch converts {list(CONVERTED_PRECISIONS)}, not "
                         f"{request.precision}")
    if request.precision == "int8" and not delegate:
        # Measured: to_executorch stops with "Missing out variants: quantized_decomposed::..."
        raise BuildError("executorch: int8 runs only inside the XNNPACK delegate (knob delegate: "
                         "true); ExecuTorch's portable kernels have no quantize/dequantize kernels")
    try:
        import torch
        from executorch import exir
        from executorch.backends.xnnpack.partition import xnnpack_partitioner
    except ImportError as exc:
        raise BuildError(f"executorch: the converter cannot be imported ({exc}); install "
                         f"dse[executorch]") from exc
    module = copy.deepcopy(request.module).eval()
    sample = torch.zeros((request.batch_size, *request.input_shape), dtype=torch.float32)
    if request.precision == "fp16":
        module, sample = module.half(), sample.half()
    if request.precision == "int8":
        exported = _quantized(torch, module, sample, request.calibration)
    else:
        exported = _exported(torch, module, sample)
    try:
        partitioners = [xnnpack_partitioner.XnnpackPartitioner()] if delegate else []
        edge = exir.to_edge_transform_and_lower(exported, partitioner=partitioners)
        program = edge.to_executorch()
    except Exception as exc:  # the lowering passes raise many types for what they cannot take
        raise BuildError(f"executorch: lowering to ExecuTorch failed: {type(exc).__name__}: "
                         f"{first_error_line(exc)}") from exc
    out_path.write_bytes(program.buffer)


def _exported(torch: Any, module: Any, sample: Any) -> Any:
    try:
        return torch.export.export(module, (sample,))
    except Exception as exc:  # torch.export's errors share no base class below Exception
        raise BuildError(f"executorch: torch.export could not export the model: "
                         f"{type(exc).__name__}: {first_error_line(exc)}") from exc


def _quantized(torch: Any, module: Any, sample: Any, calibration: Any) -> Any:
    """``module`` quantized to int8 for XNNPACK (:data:`INT8_SCHEME`), calibrated on
    ``calibration``, and exported at ``sample``'s (the candidate's) static batch size."""
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer
    from torchao.quantization.pt2e import quantize_pt2e

    images = np.ascontiguousarray(calibration, dtype=np.float32)
    if images.ndim < 1 or len(images) == 0:
        raise BuildError("executorch: int8 needs calibration samples; none were given")
    graph, batch = _calibration_graph(torch, module, sample)
    quantizer = xnnpack_quantizer.XNNPACKQuantizer().set_global(
        xnnpack_quantizer.get_symmetric_quantization_config(is_per_channel=True))
    try:
        prepared = quantize_pt2e.prepare_pt2e(graph, quantizer)
        # The last batch wraps round to the first samples, for a graph static in its batch size
        # (a repeated sample moves no observer's range; zero padding would).
        with torch.no_grad():
            for start in range(0, len(images), batch):
                rows = np.arange(start, start + batch) % len(images)
                prepared(torch.from_numpy(images[rows]))
        converted = quantize_pt2e.convert_pt2e(prepared)
    except Exception as exc:
        raise BuildError(f"executorch: PT2E int8 quantization failed: {type(exc).__name__}: "
                         f"{first_error_line(exc)}") from exc
    return _exported(torch, converted, sample)


def _calibration_graph(torch: Any, module: Any, sample: Any) -> tuple[Any, int]:
    """The module exported for calibration, and the batch size it takes.

    Calibration runs :data:`CALIBRATION_BATCH` samples a call, on a graph exported with a dynamic
    batch dimension, rather than a call per candidate batch (256 calls for dse's 256 calibration
    images at batch size 1, each through every observer); the quantized graph is exported again
    at the candidate's batch size. A model that fixes its batch size is calibrated at the
    candidate's, a call per batch.
    """
    wide = torch.zeros((CALIBRATION_BATCH, *sample.shape[1:]), dtype=sample.dtype)
    batch = torch.export.Dim("batch", min=1, max=max(CALIBRATION_BATCH, len(sample)))
    try:
        return torch.export.export(module, (wide,), dynamic_shapes=({0: batch},)).module(), len(wide)
    except Exception:  # a batch size fixed by the model: torch.export's errors vary
        return _exported(torch, module, sample).module(), len(sample)
