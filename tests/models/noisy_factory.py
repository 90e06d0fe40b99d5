"""A factory module that makes noise as it is imported, as one importing a large library at its
top does (torchao's "Failed to load" lines, torch's and transformers' warnings)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

NOISE = "Failed to load an optional kernel of some library"
logging.getLogger("some_library").warning(NOISE)
warnings.warn(f"{NOISE} (a warning)", UserWarning, stacklevel=1)


def mlp(arch: Mapping[str, Any]) -> torch.nn.Module:
    import torch

    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
