"""The ``transformer`` family: a small pre-LayerNorm encoder that classifies float sequences.

This module only describes and validates architectures; the torch layers live in
:mod:`dse.models._encoder` and are imported when a network is built, so registering the family
costs no torch import.

Inputs are float feature vectors, not token ids: every stage of the deployment pipeline (ONNX
export, int8 calibration, fp16/bf16, TensorRT) feeds float32 tensors. The input format is fixed
here, by :data:`FEATURES` and :data:`NUM_CLASSES`, and :mod:`dse.accuracy.sequences` generates its
task in that format. (They are defined here, not there, because ``dse.accuracy`` imports
``dse.models``; the other way round would be an import cycle.)
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dse.models.family import ModelFamily, register_family

if TYPE_CHECKING:
    import torch

FEATURES = 8
"""Float features per sequence position (see :mod:`dse.accuracy.sequences` for their meaning)."""
NUM_CLASSES = 4

MAX_LAYERS = 6
MAX_HEADS = 8
MIN_HIDDEN, MAX_HIDDEN = 16, 256
MAX_MLP_RATIO = 8
MIN_SEQ_LEN, MAX_SEQ_LEN = 8, 128

DEFAULT_ARCH: dict[str, Any] = {
    "num_layers": 2,
    "num_heads": 2,
    "hidden": 32,
    "mlp_ratio": 2,
    "seq_len": 16,
}

ATTENTION_KERNELS = ("explicit", "math", "flash", "efficient")
"""Values of the ``attention`` arch parameter: "explicit" spells attention out with matmul and
softmax (the default, and the graph every cache entry made before the parameter existed holds);
the others call ``scaled_dot_product_attention`` restricted to that one torch SDPA backend."""
DEFAULT_ATTENTION = "explicit"
# The device kinds with no implementation of a kernel in torch (2.13): the memory-efficient
# kernel is CUDA-only. Flash on a GPU also needs fp16/bf16 and Ampere or newer; that depends on
# the candidate's precision and the GPU, so it is found when the runner first runs (strictly: the
# sdpa_kernel context allows no other backend), not here.
_KERNEL_MISSING_ON = {"efficient": frozenset({"cpu"})}


def _is_int(value: object) -> bool:
    # bool is an int subclass, but `num_layers: true` in a YAML file is a mistake, not 1.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _in_range(value: Any, low: int, high: int) -> bool:
    return _is_int(value) and low <= value <= high


def _problems(arch: Mapping[str, Any]) -> list[str]:
    problems = []
    layers, heads, hidden = arch["num_layers"], arch["num_heads"], arch["hidden"]
    mlp_ratio, seq_len = arch["mlp_ratio"], arch["seq_len"]
    if not _in_range(layers, 1, MAX_LAYERS):
        problems.append(f"num_layers must be an integer in 1..{MAX_LAYERS}, got {layers!r}")
    heads_ok = _in_range(heads, 1, MAX_HEADS)
    if not heads_ok:
        problems.append(f"num_heads must be an integer in 1..{MAX_HEADS}, got {heads!r}")
    hidden_ok = _in_range(hidden, MIN_HIDDEN, MAX_HIDDEN)
    if not hidden_ok:
        problems.append(f"hidden must be an integer in {MIN_HIDDEN}..{MAX_HIDDEN}, got {hidden!r}")
    if heads_ok and hidden_ok and hidden % heads:
        problems.append(f"hidden must be a multiple of num_heads (each head gets hidden / "
                        f"num_heads channels), got hidden={hidden!r}, num_heads={heads!r}")
    if not _in_range(mlp_ratio, 1, MAX_MLP_RATIO):
        problems.append(f"mlp_ratio must be an integer in 1..{MAX_MLP_RATIO}, got {mlp_ratio!r}")
    if not _in_range(seq_len, MIN_SEQ_LEN, MAX_SEQ_LEN):
        problems.append(f"seq_len must be an integer in {MIN_SEQ_LEN}..{MAX_SEQ_LEN}, "
                        f"got {seq_len!r}")
    attention = arch.get("attention", DEFAULT_ATTENTION)
    if not isinstance(attention, str) or attention not in ATTENTION_KERNELS:
        problems.append(f"attention must be one of {list(ATTENTION_KERNELS)}, got {attention!r}")
    return problems


def _full_arch(full: Mapping[str, Any]) -> dict[str, Any]:
    """Plain types, so a numpy int from a sampler and a YAML int hash to one cache key; the
    default ``attention`` left out, so the default arch's trained-model and artifact keys (which
    hash this dict) are those of the cache entries made before the parameter existed."""
    plain: dict[str, Any] = {key: int(value) for key, value in full.items() if key != "attention"}
    attention = full.get("attention", DEFAULT_ATTENTION)
    if attention != DEFAULT_ATTENTION:
        plain["attention"] = str(attention)
    return plain


@register_family
class TransformerFamily(ModelFamily):
    """Linear token projection + learned positions, ``num_layers`` pre-LayerNorm encoder blocks,
    mean over positions, linear classifier.

    Arch parameters (integers but ``attention``; those left out take :data:`DEFAULT_ARCH`'s
    values, and ``attention`` "explicit"):

    - ``num_layers``: encoder blocks, 1..6.
    - ``num_heads``: attention heads per block, 1..8; must divide ``hidden``.
    - ``hidden``: model width, 16..256.
    - ``mlp_ratio``: the MLP's inner width is ``mlp_ratio * hidden``, 1..8. An integer, so the
      inner width is exact and equal architectures hash alike.
    - ``seq_len``: positions per sample, 8..128. It sets the input shape, ``(seq_len,
      FEATURES)``, and so the data the network is trained on: the positional embedding has one
      row per position and accepts no other length.
    - ``attention``: the attention kernel, one of :data:`ATTENTION_KERNELS`. "explicit" (default)
      is matmul + softmax; "math", "flash" and "efficient" call torch's
      ``scaled_dot_product_attention`` under ``sdpa_kernel`` with that one backend, so a kernel
      that cannot run raises rather than falling back. Part of the arch (trained and cached per
      value) so the search weighs each kernel per device. "efficient" has no CPU kernel:
      :meth:`device_problem` refuses it on cpu devices (see :mod:`dse.models._encoder` for the
      CPU-side training of a GPU candidate).
    """

    name = "transformer"
    arch_params = frozenset({*DEFAULT_ARCH, "attention"})
    input_shape = (DEFAULT_ARCH["seq_len"], FEATURES)
    num_classes = NUM_CLASSES
    dataset = "sequences"

    def input_shape_for(self, arch: Mapping[str, Any]) -> tuple[int, ...]:
        return (self.validate(arch)["seq_len"], FEATURES)

    def validate(self, arch: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(arch) - self.arch_params)
        if unknown:
            raise ValueError(f"transformer: unknown arch parameter(s) {unknown}; "
                             f"allowed: {sorted(self.arch_params)}")
        full = {**DEFAULT_ARCH, **arch}
        problems = _problems(full)
        if problems:
            raise ValueError("transformer: " + "; ".join(problems))
        return _full_arch(full)

    def device_problem(self, arch: Mapping[str, Any], device_kind: str) -> str | None:
        attention = self.validate(arch).get("attention", DEFAULT_ATTENTION)
        if device_kind in _KERNEL_MISSING_ON.get(attention, ()):
            runs = [k for k in ATTENTION_KERNELS if device_kind not in _KERNEL_MISSING_ON.get(k, ())]
            return (f"transformer attention {attention!r}: torch has no {attention} SDPA kernel for "
                    f"a {device_kind} device (it is CUDA-only); allowed there: {', '.join(runs)}")
        return None

    def build(self, arch: Mapping[str, Any]) -> torch.nn.Module:
        from dse.models._encoder import EncoderClassifier

        full = self.validate(arch)
        return EncoderClassifier(
            features=FEATURES,
            seq_len=full["seq_len"],
            hidden=full["hidden"],
            num_heads=full["num_heads"],
            num_layers=full["num_layers"],
            mlp_hidden=full["mlp_ratio"] * full["hidden"],
            num_classes=self.num_classes,
            attention=full.get("attention", DEFAULT_ATTENTION),
        )
