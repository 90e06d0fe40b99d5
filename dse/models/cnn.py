"""The ``cnn`` family: a MobileNetV2-style inverted-residual network for 1x8x8 digit images.

This module only describes and validates architectures; the torch layers live in
:mod:`dse.models._inverted_residual` and are imported when a network is built, so registering the
family costs no torch import.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dse.models.family import ModelFamily, register_family

if TYPE_CHECKING:
    import torch

# Output channels of each stage at width_mult 1. Later stages run on fewer pixels, so they can
# afford more channels, as in MobileNetV2.
STAGE_CHANNELS = (16, 24, 32, 48)
STEM_CHANNELS = 16
HEAD_CHANNELS = 128
MAX_STAGES = len(STAGE_CHANNELS)

DEFAULT_ARCH: dict[str, Any] = {
    "num_stages": 2,
    "depth": 2,
    "width_mult": 1.0,
    "kernel_size": 3,
    "expand_ratio": 4,
}


def scaled_channels(base: int, width_mult: float) -> int:
    """``base * width_mult`` rounded to a multiple of 4, at least 8 (tiny layers learn nothing)."""
    return max(8, round(base * width_mult / 4) * 4)


def _is_int(value: object) -> bool:
    # bool is an int subclass, but `depth: true` in a YAML file is a mistake, not 1.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _problems(arch: Mapping[str, Any]) -> list[str]:
    problems = []
    num_stages, depth = arch["num_stages"], arch["depth"]
    width_mult, kernel_size = arch["width_mult"], arch["kernel_size"]
    expand_ratio = arch["expand_ratio"]
    if not (_is_int(num_stages) and 1 <= num_stages <= MAX_STAGES):
        problems.append(f"num_stages must be an integer in 1..{MAX_STAGES}, got {num_stages!r}")
    if not (_is_int(depth) and depth >= 1):
        problems.append(f"depth must be an integer >= 1, got {depth!r}")
    if not (isinstance(width_mult, (int, float)) and not isinstance(width_mult, bool)
            and 0 < width_mult <= 8):
        problems.append(f"width_mult must be a number in (0, 8], got {width_mult!r}")
    if not (_is_int(kernel_size) and kernel_size in (3, 5)):
        problems.append(f"kernel_size must be 3 or 5, got {kernel_size!r}")
    if not (_is_int(expand_ratio) and 1 <= expand_ratio <= 16):
        problems.append(f"expand_ratio must be an integer in 1..16, got {expand_ratio!r}")
    return problems


@register_family
class CnnFamily(ModelFamily):
    """Stem conv, ``num_stages`` stages of ``depth`` inverted-residual blocks, 1x1 head, linear.

    The first block of every stage after the first halves the resolution while it is above 2x2
    (8x8 -> 4x4 -> 2x2, then stride 1). Parameters left out of an arch take their defaults from
    :data:`DEFAULT_ARCH`.
    """

    name = "cnn"
    arch_params = frozenset(DEFAULT_ARCH)
    input_shape = (1, 8, 8)
    num_classes = 10

    def validate(self, arch: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(arch) - self.arch_params)
        if unknown:
            raise ValueError(f"cnn: unknown arch parameter(s) {unknown}; "
                             f"allowed: {sorted(self.arch_params)}")
        full = {**DEFAULT_ARCH, **arch}
        problems = _problems(full)
        if problems:
            raise ValueError("cnn: " + "; ".join(problems))
        # Plain Python types, so `width_mult: 1` and `1.0` (or a numpy int) hash to one cache key.
        return {key: float(value) if key == "width_mult" else int(value)
                for key, value in full.items()}

    def build(self, arch: Mapping[str, Any]) -> torch.nn.Module:
        from dse.models._inverted_residual import InvertedResidualNet

        full = self.validate(arch)
        width = full["width_mult"]
        stages = [(scaled_channels(base, width), full["depth"])
                  for base in STAGE_CHANNELS[: full["num_stages"]]]
        return InvertedResidualNet(
            in_channels=self.input_shape[0],
            input_size=self.input_shape[1],
            stem_channels=scaled_channels(STEM_CHANNELS, width),
            stages=stages,
            head_channels=scaled_channels(HEAD_CHANNELS, width),
            kernel_size=full["kernel_size"],
            expand_ratio=full["expand_ratio"],
            num_classes=self.num_classes,
        )
