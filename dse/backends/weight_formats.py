"""How a generative model's weights are stored, as the knobs of the runtimes that run one: at the
compute precision (``same``), or weight-only ``int8`` / ``int4`` (int4 in groups of
``weight_group_size`` along each layer's input). Each runtime says how it makes them (torch:
torchao; ONNX Runtime GenAI: its model builder); the names and checks are one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dse.core import BuildError

#: The ``weights`` knob's values.
WEIGHT_FORMATS = ("same", "int8", "int4")
GROUP_SIZES = (16, 32, 64, 128, 256)


def weight_knobs(knobs: Mapping[str, Any]) -> tuple[str, int]:
    """The ``weights`` and ``weight_group_size`` knobs, checked; BuildError naming what is
    allowed. The group size shapes int4 only: with another format it is checked, then unused
    (the two are searched as independent knobs, so a search may pair them either way)."""
    weights = knobs.get("weights", "same")
    if weights not in WEIGHT_FORMATS:
        raise BuildError(f"knob 'weights' must be one of {list(WEIGHT_FORMATS)}, got {weights!r}")
    group = knobs.get("weight_group_size", 32)
    if isinstance(group, bool) or group not in GROUP_SIZES:
        raise BuildError(f"knob 'weight_group_size' must be one of {list(GROUP_SIZES)}, got "
                         f"{group!r}")
    return str(weights), int(group)
