"""A user's ONNX file as a candidate's model, deployed as it is: no training, its batch checked
against the file's, and its fp32 reference computed by ONNX Runtime's CPU provider."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dse.accuracy import PROXIES, load_split, predict_batches, synthetic_inputs
from dse.artifacts import ArtifactCache, build_file_artifact
from dse.core import BuildError
from dse.models import source_dataset
from dse.trial.candidate_model import (
    CALIBRATION_IMAGES,
    ArchFailure,
    CandidateModel,
    finite_reference,
    one_line,
    padded,
)

if TYPE_CHECKING:
    from dse.core import Candidate
    from dse.spec import TrainingSpec


def onnx_file_model(candidate: Candidate, training: TrainingSpec, cache: ArtifactCache) -> CandidateModel:
    """The user's ONNX file, deployed as it is: no training, and its fp32 outputs from ONNX
    Runtime's CPU provider are the reference."""
    from dse.models import onnx_input

    path = Path(str(candidate.model.get("onnx", "")))
    # The file's own failures (unreadable, not loadable, no dataset fit, non-finite outputs) are
    # its architecture's: ArchFailure, the same for every backend, precision and batch size.
    try:
        info = onnx_input(path)
    except ValueError as exc:
        raise ArchFailure(str(exc)) from exc
    if info.fixed_batch is not None and candidate.batch_size != info.fixed_batch:
        raise BuildError(f"{path.name} fixes the batch at {info.fixed_batch}; batch size "
                         f"{candidate.batch_size} cannot run (input {info.name!r}, axis 0)")
    dataset = source_dataset(candidate.family, candidate.model)
    if dataset is None:
        eval_x: np.ndarray = synthetic_inputs(info.sample_shape, training.seed)
        calibration, eval_y = eval_x, None
    else:
        try:
            split = load_split(dataset, training.seed, info.sample_shape)
        except ValueError as exc:
            raise ArchFailure(str(exc)) from exc
        eval_x, eval_y, calibration = split.x_test, split.y_test, split.x_train
    calibration = calibration[:CALIBRATION_IMAGES]
    reference = finite_reference(_file_reference(
        path, eval_x, info.fixed_batch or candidate.batch_size, info.fixed_batch is not None,
        training.threads))
    artifact, build_seconds = build_file_artifact(
        candidate, path, str(candidate.model.get("sha256", "")), info.sample_shape, cache,
        calibration)
    return CandidateModel(
        artifact, build_seconds, eval_x, eval_y, reference, info.fixed_batch, artifact.path,
        {"train_seconds": 0.0},
        {"onnx_file": str(path), "onnx_sha256": str(candidate.model.get("sha256", "")),
         "dataset": dataset or "none", "calibration_images": str(len(calibration))},
        {f"proxy_{name}": "zero-cost proxies score a torch module; an ONNX file has none"
         for name in PROXIES})


def _file_reference(path: Path, x: np.ndarray, batch: int, fixed: bool,
                    threads: int) -> np.ndarray:
    """The fp32 file's outputs on ``x`` from ONNX Runtime's CPU provider, fed ``batch`` rows at a
    time (the candidate's batch size, so a file whose graph only runs at some batch sizes fails
    as the candidate would); ``fixed``: the file fixes the batch, so a short last one is padded.

    Raises ArchFailure with ORT's message when it cannot load the file (an operator it has no
    kernel for), BuildError when it cannot run it at this batch size (a shape its graph rejects).
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 4  # ORT's errors come back in the BuildError, not on stderr too
    where = f"the fp32 reference (onnxruntime, CPU) of {path.name}"
    # ORT's own exception types (Fail, InvalidGraph, NotImplemented...) share no base class
    # below Exception.
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ArchFailure(f"{where} could not load: {type(exc).__name__}: {one_line(exc)}") from exc
    name = session.get_inputs()[0].name

    def run(rows: np.ndarray) -> np.ndarray:
        return np.asarray(session.run(None, {name: rows})[0])

    try:
        return predict_batches(padded(run, batch) if fixed else run, x, batch)
    except Exception as exc:
        raise BuildError(f"{where} failed at batch size {batch}: {type(exc).__name__}: "
                         f"{one_line(exc)}") from exc
