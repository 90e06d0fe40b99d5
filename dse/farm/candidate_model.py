"""A candidate's model before deployment (:class:`CandidateModel`) and what its two sources (a
torch module, a user's ONNX file) share: the finite fp32 reference it is scored against, padding
for a file that fixes the batch, and runtime messages on one line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dse.exceptions import BuildError
from dse.quality.fidelity import non_finite

if TYPE_CHECKING:
    from dse.build import Artifact
    from dse.candidate import Candidate

# The most inputs a build calibrates on (int8 ranges, say): the first of the training split, or of
# the stand-in inputs when the model has no dataset.
CALIBRATION_IMAGES = 256


@dataclass
class CandidateModel:
    """The candidate's model before deployment, and the inputs it is scored on.

    ``eval_x`` is the held-out split (``eval_y`` its labels) or, without a dataset, stand-in
    inputs (``eval_y`` None); ``reference`` holds the fp32 outputs on it, all finite.
    """

    artifact: Artifact
    build_seconds: float
    eval_x: np.ndarray
    eval_y: np.ndarray | None
    reference: np.ndarray
    fixed_batch: int | None
    graph: Path | None  # the ONNX graph its statistics are read from
    metrics: dict[str, float]
    provenance: dict[str, str]
    missing: dict[str, str] = field(default_factory=dict)


def finite_reference(candidate: Candidate, reference: np.ndarray) -> np.ndarray:
    """``reference`` when all of it is finite; else BuildError: the model itself makes NaN or Inf
    in fp32, whatever the backend or precision (weights that are NaN, a forward that overflows)."""
    problem = non_finite(reference)
    if problem is not None:
        raise BuildError(f"{precision_label(candidate)}: the model's outputs contain {problem} on the "
                         f"validation batch in its own fp32 reference: the model produces them, "
                         f"whatever the backend or precision")
    return reference


def precision_label(candidate: Candidate) -> str:
    return f"{candidate.backend} {candidate.precision}"


def one_line(exc: BaseException) -> str:
    """A runtime's message on one line (ORT's may span several)."""
    return " ".join(str(exc).split())


def padded(run: Callable[[np.ndarray], np.ndarray],
            batch: int) -> Callable[[np.ndarray], np.ndarray]:
    """``run`` for a model whose file fixes the batch: a shorter last batch is padded with its
    first row, and only the real rows' outputs are returned."""
    def padded(x: np.ndarray) -> np.ndarray:
        if len(x) == batch:
            return run(x)
        filler = np.repeat(x[:1], batch - len(x), axis=0)
        return run(np.concatenate([x, filler]))[: len(x)]

    return padded
