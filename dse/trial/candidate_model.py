"""A candidate's model before deployment (:class:`CandidateModel`) and what its two sources (a
torch module, a user's ONNX file) share: the finite fp32 reference it is scored against, the
failure that is the architecture's (:class:`ArchFailure`), padding for a file that fixes the
batch, and runtime messages on one line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dse.accuracy import non_finite
from dse.core import BuildError

if TYPE_CHECKING:
    from dse.artifacts import Artifact
    from dse.core import Candidate

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


class ArchFailure(BuildError):
    """The model itself failed, before any backend touched it: building, scoring or training the
    architecture, or its fp32 reference. Such a failure is the architecture's, the same for every
    backend, precision and batch size of it, so the search records it once per architecture and
    answers the architecture's other candidates from that record (``failure_scope: arch``)."""


def finite_reference(reference: np.ndarray) -> np.ndarray:
    """``reference`` when all of it is finite; else ArchFailure: the model itself makes NaN or
    Inf in fp32, whatever the backend or precision (weights that are NaN, a forward that
    overflows)."""
    problem = non_finite(reference)
    if problem is not None:
        raise ArchFailure(f"the model's outputs contain {problem} on the validation batch in its "
                          f"own fp32 reference: the model produces them, whatever the backend or "
                          f"precision")
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
