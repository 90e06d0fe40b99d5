"""The litert backend's conversion: the trained torch module -> a ``.tflite`` file at the
candidate's precision and batch size (:func:`convert_to_tflite`, called and cached by dse.artifacts).

- fp32: ``litert_torch.convert(module, (sample,))``, the file exported as is.
- fp16: the fp32 file with its Conv/DepthwiseConv/FullyConnected weights cast to fp16 by
  ai-edge-quantizer's ``float_casting`` weight-only recipe; a DEQUANTIZE op feeds each fp16 weight
  to its fp32 consumer, which the runtime folds at load (fp16 *weights*, fp32 arithmetic).
- int8: full-integer post-training quantization through torch's PT2E flow with litert_torch's
  quantizer (per-channel symmetric int8 weights, per-tensor affine int8 activations calibrated by
  histogram observers on the calibration samples), then converted with the quantizer's config.
  Chosen over ai-edge-quantizer's ``static_wi8_ai8`` recipe on the fp32 file: both give int8
  tensors on every op and full XNNPACK delegation, but on the test cnn PT2E's logits stay closer to
  fp32 (max |logit error| 1.3 against 2.5; top-1 agreement 0.988 against 0.977 on 256 images),
  since its histogram observers clip outliers that min/max calibration keeps.

Both int8 flows give a file whose input and output tensors are int8 themselves (the runner
quantizes the batch and dequantizes the logits, with the scales in the file). Dynamic-range int8
(int8 weights, float activations) is not offered: on the test cnn XNNPACK leaves its hybrid
depthwise convolutions on builtin kernels and it runs slower than fp32 (see litert.py).
"""

from __future__ import annotations

import copy
import importlib
import math
from pathlib import Path
from typing import Any

import numpy as np

from dse.backends.base import first_error_line
from dse.core import BuildError
from dse.plugins import ConversionRequest

# The distributions the converted file depends on (the cache key holds their versions).
CONVERTER_DISTRIBUTIONS = ("ai-edge-litert", "litert-torch", "litert-converter", "ai-edge-quantizer",
                           "torchao")
# Precision -> how the file is quantized, in words (the runner's describe() reports it).
SCHEMES: dict[str, str] = {
    "fp32": "none (fp32 weights and activations)",
    "fp16": "fp16 weights (ai-edge-quantizer float_casting, weight-only), fp32 activations",
    "int8": "full-integer int8: per-channel symmetric weights, per-tensor affine activations "
            "(PT2E with litert_torch's PT2EQuantizer, histogram calibration)",
}


def convert_to_tflite(request: ConversionRequest, out_path: Path) -> None:
    """Write ``request.module`` as a ``.tflite`` file at ``out_path``, with static shapes at
    ``request.batch_size``. The module itself is left as it was (converted from a deep copy).

    Raises BuildError for a precision the backend has no conversion for, a converter that cannot
    be imported, and a module the converter refuses (its message, in one line).
    """
    if request.precision not in SCHEMES:
        raise BuildError(f"litert converts {sorted(SCHEMES)}, not {request.precision!r}")
    try:
        torch = importlib.import_module("torch")
        litert_torch = importlib.import_module("litert_torch")
    except ImportError as exc:
        raise BuildError(f"litert: the converter cannot be imported ({exc}); install dse[litert]") from exc
    module = copy.deepcopy(request.module).eval()
    sample = torch.zeros((request.batch_size, *request.input_shape), dtype=torch.float32)
    step = "convert the model"
    try:
        if request.precision == "int8":
            step = "quantize the model to int8 (PT2E)"
            edge = _int8_model(torch, litert_torch, module, sample, request)
        else:
            edge = litert_torch.convert(module, (sample,))
        content: bytes = edge.model_content()
        if request.precision == "fp16":
            step = "cast the weights to fp16 (ai-edge-quantizer)"
            content = _fp16_weights(content)
    except BuildError:
        raise
    except Exception as exc:  # torch.export, PT2E and the MLIR converter raise many types
        raise BuildError(f"litert: litert_torch could not {step}: {type(exc).__name__}: "
                         f"{first_error_line(exc)}") from exc
    out_path.write_bytes(content)


def _int8_model(torch: Any, litert_torch: Any, module: Any, sample: Any,
                request: ConversionRequest) -> Any:
    """The module quantized to int8 by PT2E, calibrated on ``request.calibration``, converted."""
    quantizer_module = importlib.import_module("litert_torch.quantize.pt2e_quantizer")
    quant_config = importlib.import_module("litert_torch.quantize.quant_config")
    pt2e = importlib.import_module("torchao.quantization.pt2e")
    quantize_pt2e = importlib.import_module("torchao.quantization.pt2e.quantize_pt2e")

    images = _calibration_batches(request.calibration, request.batch_size, request.input_shape)
    quantizer = quantizer_module.PT2EQuantizer().set_global(
        quantizer_module.get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False))
    graph = torch.export.export(module, (sample,)).module()
    prepared = quantize_pt2e.prepare_pt2e(graph, quantizer)
    with torch.no_grad():
        for batch in images:  # the graph was exported at the batch size: feed whole batches
            prepared(torch.from_numpy(batch))
    quantized = quantize_pt2e.convert_pt2e(prepared, fold_quantize=False)
    pt2e.move_exported_model_to_eval(quantized)
    return litert_torch.convert(quantized, (sample,),
                                quant_config=quant_config.QuantConfig(pt2e_quantizer=quantizer))


def _calibration_batches(calibration: Any, batch_size: int,
                         input_shape: tuple[int, ...]) -> list[np.ndarray]:
    """The calibration samples as whole batches of ``batch_size`` (the last filled up with samples
    from the start, so no zero padding skews the observers' ranges)."""
    images = np.ascontiguousarray(calibration, dtype=np.float32) if calibration is not None else None
    if images is None or len(images) == 0:
        raise BuildError("litert: int8 needs calibration samples; none were given")
    if tuple(images.shape[1:]) != tuple(input_shape):
        raise BuildError(f"litert: calibration samples have shape {tuple(images.shape[1:])}, the "
                         f"model takes {tuple(input_shape)}")
    rows = math.ceil(len(images) / batch_size) * batch_size
    order = np.arange(rows) % len(images)
    return [np.ascontiguousarray(images[order[i:i + batch_size]])
            for i in range(0, rows, batch_size)]


def _fp16_weights(content: bytes) -> bytes:
    """``content`` (an fp32 .tflite) with the weights of every op ai-edge-quantizer's
    float_casting covers (Conv, DepthwiseConv, FullyConnected, ...) stored as fp16."""
    quantizer = importlib.import_module("ai_edge_quantizer.quantizer")
    qtyping = importlib.import_module("ai_edge_quantizer.qtyping")
    algorithms = importlib.import_module("ai_edge_quantizer.algorithm_manager")

    casting = quantizer.Quantizer(content)
    casting.add_weight_only_config(regex=".*", operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
                                   num_bits=16, algorithm_key=algorithms.AlgorithmName.FLOAT_CASTING)
    result = casting.quantize(enable_progress_report=False)
    return bytes(result.quantized_model)
