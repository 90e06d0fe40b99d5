"""Numerical fidelity of a deployed artifact against the fp32 torch reference.

Accuracy says whether a lowered model (int8, fp16, a compiler's rewrites) still classifies well;
fidelity says how far its numbers moved. Both come from one pass over the same fixed inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def predict_batches(predict: Callable[[np.ndarray], np.ndarray], x: np.ndarray,
                    batch_size: int) -> np.ndarray:
    """Outputs of ``predict`` over ``x``, fed ``batch_size`` rows at a time (the last batch holds
    the remainder), concatenated as float64."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if len(x) == 0:
        raise ValueError("no inputs to predict")
    outputs = []
    for first in range(0, len(x), batch_size):
        rows = np.asarray(predict(x[first:first + batch_size]), dtype=np.float64)
        expected = min(batch_size, len(x) - first)
        if rows.shape[0] != expected:
            raise ValueError(f"predict returned {rows.shape[0]} rows for a batch of {expected}")
        outputs.append(rows)
    return np.concatenate(outputs)


def reference_logits(module: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    """The fp32 eager torch outputs: what every lowering is compared against."""
    import torch

    with torch.inference_mode():
        outputs = module(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
    logits: np.ndarray = outputs.double().numpy()
    return logits


def non_finite(outputs: np.ndarray) -> str | None:
    """What is non-finite in ``outputs``, as a reason reads it: ``"NaN (12 of 3600 values
    non-finite)"`` (``Inf``, or ``NaN and Inf``, likewise); None when every value is finite."""
    finite = np.isfinite(outputs)
    bad = int(outputs.size - np.count_nonzero(finite))
    if bad == 0:
        return None
    nans = int(np.count_nonzero(np.isnan(outputs)))
    kinds = "NaN and Inf" if 0 < nans < bad else ("NaN" if nans else "Inf")
    return f"{kinds} ({bad} of {outputs.size} values non-finite)"


def fidelity_metrics(reference: np.ndarray, deployed: np.ndarray) -> dict[str, float]:
    """``max_abs_error``, ``rel_l2_error`` and ``top1_agreement`` of ``deployed`` outputs.

    Raises ValueError when the shapes differ or either side holds NaN or Inf: the metrics would
    be NaN, and a NaN metric must never reach the search (check with :func:`non_finite` first
    to say whose outputs they are).
    """
    if reference.shape != deployed.shape:
        raise ValueError(f"outputs differ in shape: reference {reference.shape}, "
                         f"deployed {deployed.shape}")
    for side, outputs in (("reference", reference), ("deployed", deployed)):
        problem = non_finite(outputs)
        if problem is not None:
            raise ValueError(f"the {side} outputs contain {problem}; fidelity is undefined")
    difference = deployed - reference
    norm = float(np.linalg.norm(reference))
    return {
        "max_abs_error": float(np.max(np.abs(difference))),
        "rel_l2_error": float(np.linalg.norm(difference)) / norm if norm > 0 else float("inf"),
        "top1_agreement": float(np.mean(deployed.argmax(axis=1) == reference.argmax(axis=1))),
    }
