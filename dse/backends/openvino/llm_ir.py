"""A language model as OpenVINO's stateful IR, its weights compressed by NNCF, built once per
weights, format and library versions (the folder is cached beside the other artifacts).

The loaded torch module is traced by ``openvino.convert_model`` through a wrapper that takes the
KV cache as explicit tensors (transformers' own cache grows from an empty 1-D tensor, which the
converter cannot shape). OpenVINO's make-stateful transformation then turns each layer's past
key/value input and present output into one internal state, so a request's cache never leaves
the plugin (the form OpenVINO deploys language models in); each state starts empty, shaped by the
request's batch. NNCF's data-free weight compression makes the int8 (asymmetric, per channel) and
int4 (symmetric, in groups) formats; NNCF keeps the embedding and output layers 8-bit under int4.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.core import BuildError, stable_hash

if TYPE_CHECKING:
    from dse.models import LanguageModel

IR_FILE = "openvino_model.xml"
# The IR's inputs before the KV cache's (which make-stateful turns into state).
_INPUTS = ("input_ids", "attention_mask", "position_ids", "logits_to_keep")
# Bump when what is traced or transformed changes, so older cached folders are not reused.
_VERSION = 2  # 2: the logits_to_keep input


def stateful_ir(model: LanguageModel, weights: str, group: int, cache_dir: Path) -> Path:
    """The folder holding ``model``'s stateful IR with its weights as ``weights`` (``same``,
    ``int8``, ``int4`` in groups of ``group``), built now or found in ``cache_dir``. BuildError
    with the converter's or NNCF's own reason when it cannot be made."""
    import openvino as ov

    key = stable_hash({"weights_key": model.key, "weights": weights,
                       "group": group if weights == "int4" else None,
                       "openvino": ov.__version__, "nncf": _nncf_version(weights),
                       "version": _VERSION})
    folder = cache_dir / "openvino_llm" / key
    if (folder / IR_FILE).is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    ir = _stateful_model(model)
    if weights != "same":
        ir = _compressed(ir, weights, group)
    with tempfile.TemporaryDirectory(prefix="dse-ov-llm-", dir=folder.parent) as work:
        built = Path(work) / "ir"
        built.mkdir()
        ov.save_model(ir, str(built / IR_FILE), compress_to_fp16=False)
        # Renamed into place whole: a folder with the IR is always a finished build (another
        # worker may have finished the same one meanwhile: its folder stands).
        if folder.exists():
            shutil.rmtree(built)
        else:
            os.replace(built, folder)
    return folder


def _nncf_version(weights: str) -> str | None:
    if weights == "same":
        return None
    try:
        import nncf
    except ImportError as exc:
        raise BuildError(f"openvino's {weights} weights are made by NNCF: pip install "
                         f"'dse[llm]' ({exc})") from exc
    return str(nncf.__version__)


def _past_names(layers: int) -> list[tuple[str, str]]:
    """(past input, present output) of each layer's key and value, in the wrapper's order."""
    return [(f"past_key_values.{layer}.{part}", f"present.{layer}.{part}")
            for layer in range(layers) for part in ("key", "value")]


def _stateful_model(model: LanguageModel) -> Any:
    """The traced model with its KV cache as internal state: inputs ``input_ids``,
    ``attention_mask``, ``position_ids`` and ``logits_to_keep`` (the positions whose logits are
    computed: the last one for a request's steps, every one for the quality pass — the language
    model head over a whole prompt would cost a prefill as much again as its vocabulary is wide);
    output ``logits``."""
    import openvino as ov
    import torch
    from openvino._offline_transformations import apply_make_stateful_transformation
    from torch.jit._trace import TracerWarning

    config = model.module.config
    layers = int(config.num_hidden_layers)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None)
                   or config.hidden_size // config.num_attention_heads)
    # Two sequences, three cached positions, four new ones; one position masked out, so that the
    # trace keeps the mask (transformers skips an all-ones mask).
    batch, cached, new = 2, 3, 4
    generator = torch.Generator().manual_seed(0)
    mask = torch.ones(batch, cached + new, dtype=torch.int64)
    mask[1, 0] = 0
    past = [torch.randn(batch, kv_heads, cached, head_dim, generator=generator)
            for _ in range(2 * layers)]
    # Two positions' logits kept, so that the trace keeps the selection general.
    example = (torch.randint(0, int(config.vocab_size), (batch, new), generator=generator), mask,
               torch.arange(cached, cached + new).expand(batch, new).contiguous(),
               torch.tensor([1, new - 1]), *past)
    try:
        # transformers' Python branches on shapes warn while traced; the example's shapes are
        # chosen so that each takes the general path.
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", TracerWarning)
            traced = ov.convert_model(_wrapper_class()(model.module), example_input=example)
    except Exception as exc:  # the converter raises its own error types
        raise BuildError(f"openvino cannot convert the language model: "
                         f"{_last_line(exc)}") from exc
    names = [*_INPUTS, *(p for p, _ in _past_names(layers))]
    for port, name in zip(traced.inputs, names, strict=True):
        port.get_tensor().set_names({name})
    outputs = ["logits"] + [p for _, p in _past_names(layers)]
    for port, name in zip(traced.outputs, outputs, strict=True):
        port.get_tensor().set_names({name})
    traced.reshape({port: ov.PartialShape([-1, -1]) if i < 3 else ov.PartialShape([-1])
                    if i == 3 else ov.PartialShape([-1, kv_heads, -1, head_dim])
                    for i, port in enumerate(traced.inputs)})
    apply_make_stateful_transformation(traced, dict(_past_names(layers)))
    _start_states_empty(traced)
    return traced


def _start_states_empty(traced: Any) -> None:
    """Each state's first value: zeros of (the request's batch, heads, 0 positions, head size),
    so that a reset state holds no position and takes any batch."""
    import openvino as ov
    from openvino import opset13 as ops

    ids_shape = ops.shape_of(traced.input("input_ids"), output_type="i64")
    batch = ops.gather(ids_shape, ops.constant(np.array([0], dtype=np.int64)), ops.constant(0))
    for node in traced.get_ops():
        if node.get_type_name() != "ReadValue":
            continue
        shape = node.get_output_partial_shape(0)
        fixed = [ops.constant(np.array([shape[i].get_length()], dtype=np.int64))
                 for i in (1, 3)]
        empty = ops.constant(np.array([0], dtype=np.int64))
        zero = ops.constant(np.array(0, dtype=np.float32)).output(0)
        if node.get_output_element_type(0) != ov.Type.f32:
            zero = ops.convert(zero, node.get_output_element_type(0)).output(0)
        node.set_arguments([ops.broadcast(zero, ops.concat([batch, fixed[0], empty, fixed[1]],
                                                           axis=0))])
    traced.validate_nodes_and_infer_types()


def _compressed(ir: Any, weights: str, group: int) -> Any:
    """``ir`` with NNCF's data-free weight compression: int8 asymmetric per output channel, or
    int4 symmetric in groups of ``group`` inputs."""
    import nncf

    if weights == "int8":
        options: dict[str, Any] = {"mode": nncf.CompressWeightsMode.INT8_ASYM}
    else:
        options = {"mode": nncf.CompressWeightsMode.INT4_SYM, "group_size": group, "ratio": 1.0}
    nncf.set_log_level(logging.ERROR)
    try:
        # NNCF draws its statistics table and a progress bar on stdout: a worker's log is no
        # terminal, and the trial records the format itself.
        with contextlib.redirect_stdout(io.StringIO()):
            return nncf.compress_weights(ir, **options)
    except Exception as exc:  # NNCF's own errors (a group that does not divide a layer's width)
        raise BuildError(f"NNCF cannot compress the weights to {weights}"
                         f"{f' in groups of {group}' if weights == 'int4' else ''}: "
                         f"{_last_line(exc)}") from exc


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(exc).__name__


def _wrapper_class() -> type:
    """The tracing wrapper's class (a torch module: defined when torch is imported)."""
    import torch

    class CacheAsTensors(torch.nn.Module):
        """The causal LM with its KV cache passed in and returned as one tensor per layer's keys
        and values (the layout OpenVINO's make-stateful transformation pairs up)."""

        def __init__(self, module: Any) -> None:
            super().__init__()
            self.module = module

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any,
                    logits_to_keep: Any, *past: Any) -> tuple[Any, ...]:
            from transformers import DynamicCache

            cache = DynamicCache(config=self.module.config)
            layers: list[Any] = list(cache.layers)
            # Filled in place: update() would start each layer from an empty 1-D tensor.
            for index, layer in enumerate(layers):
                layer.keys, layer.values = past[2 * index], past[2 * index + 1]
                layer.dtype, layer.device = layer.keys.dtype, layer.keys.device
                layer.is_initialized = True
            out = self.module(input_ids=input_ids, attention_mask=attention_mask,
                              position_ids=position_ids, past_key_values=cache, use_cache=True,
                              logits_to_keep=logits_to_keep)
            done: list[Any] = list(out.past_key_values.layers)
            present = [tensor for layer in done
                       for tensor in (layer.keys, layer.values)]
            return (out.logits, *present)

    return CacheAsTensors
