"""torch module -> a single, self-contained ONNX file with a dynamic batch axis."""

from __future__ import annotations

import contextlib
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from dse.artifacts.dynamo_export import dynamo_export
from dse.core import BuildError

if TYPE_CHECKING:
    import torch

INPUT_NAME = "input"
OUTPUT_NAME = "logits"
BATCH_AXIS = "batch"
# The example batch used for tracing. Not 1: the exporter specialises a size-1 dimension to a
# constant, which would break the dynamic batch axis.
_TRACE_BATCH = 2
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def export_onnx(module: torch.nn.Module, input_shape: tuple[int, ...], path: Path) -> None:
    """Export ``module`` (in eval mode) to ``path`` with torch's dynamo exporter.

    Batch norms that follow a conv are folded into it first (on a copy; ``module`` is untouched).

    The graph has one input ``input`` of shape (batch, *input_shape) and one output ``logits``; the
    weights are stored inside the file (no external data), so the file alone is the artifact.
    Raises BuildError with the exporter's message on failure.
    """
    import torch

    module.eval()
    exported = _fold_batchnorms(module)
    example = torch.zeros((_TRACE_BATCH, *input_shape), dtype=torch.float32)
    batch = torch.export.Dim(BATCH_AXIS, min=1)
    try:
        with warnings.catch_warnings():
            # torch's exporter trips over its own deprecation of LeafSpec; it is not ours to act
            # on, and under `-W error` it would fail every export.
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            dynamo_export(exported, (example,), path, input_names=[INPUT_NAME],
                          output_names=[OUTPUT_NAME], dynamic_shapes=({0: batch},))
    # The exporter fails in many library-specific ways (dynamo, torch.export, onnxscript); every
    # one of them means the same thing here: this module has no ONNX artifact.
    except Exception as exc:
        raise BuildError(f"ONNX export failed: {_root_cause(exc)}") from exc
    if not path.is_file():
        raise BuildError(f"ONNX export wrote no file at {path}")


def warm_up_exporter() -> None:
    """Export a two-layer module once, into a temporary folder, and forget it.

    The first export in a process imports the dynamo exporter and onnxscript and traces its
    machinery: seconds more than any later one (docs/benchmarks.md, "Backends"). A device worker
    calls this while starting, so that one-off cost is not charged to the first candidate's
    ``trial_timeout_s``, where on a busy machine it would time out candidates that build in a
    second. Never raises: a module this process cannot export says so when a candidate is built.
    """
    import tempfile

    import torch

    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
    with (tempfile.TemporaryDirectory(prefix="dse-export-warm-up-") as folder,
          contextlib.suppress(BuildError)):
        export_onnx(module, (4,), Path(folder) / "warm-up.onnx")


def _fold_batchnorms(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module`` with every Conv2d -> BatchNorm2d pair of a Sequential folded into one
    conv.

    ONNX Runtime and its quantization pre-processing fold these anyway, so the artifact computes the
    same; folding first cuts the exporter's time (it decomposes every node) by about a quarter.
    """
    import copy

    import torch
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    folded = copy.deepcopy(module)
    for seq in folded.modules():
        if not isinstance(seq, torch.nn.Sequential):
            continue
        for i in range(len(seq) - 1):
            conv, norm = seq[i], seq[i + 1]
            if isinstance(conv, torch.nn.Conv2d) and isinstance(norm, torch.nn.BatchNorm2d):
                seq[i] = fuse_conv_bn_eval(conv, norm)
                seq[i + 1] = torch.nn.Identity()
    return folded


def _root_cause(exc: BaseException) -> str:
    """The innermost exception of the chain, on one line: the exporter wraps the real reason
    (say, an operator with no ONNX function) in pages of generic advice and terminal colours."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = _ANSI.sub("", str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
