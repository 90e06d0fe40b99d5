"""What crosses between the driver and a device worker for ``dse export`` and ``dse verify``:
plain, picklable data. A farm device's disk is not the driver's, so files travel as bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends import BundleExtras

if TYPE_CHECKING:
    from dse.core import Candidate, Measurement
    from dse.measure import RunToRun


@dataclass(frozen=True)
class CarriedData:
    """The inputs a bundle carries, with what the model gave on them.

    Attributes:
        inputs: up to ``layout.MAX_SAMPLES`` samples of the held-out split (stand-in inputs
            without a dataset), float32.
        labels: their labels, or None without a dataset.
        reference: the fp32 model's outputs on them (what fidelity is measured against).
        outputs: the deployed runner's outputs on them, as exported.
    """

    inputs: np.ndarray
    labels: np.ndarray | None
    reference: np.ndarray
    outputs: np.ndarray


@dataclass(frozen=True)
class ExportedModel:
    """A trial's deployed model as rebuilt on its device for ``dse export``.

    Attributes:
        artifact_format: the artifact's format (``onnx``, ``tflite``, ``pte``, ``torch``).
        artifact_file: its file name in the bundle's ``model/`` folder.
        artifact: the file's bytes (a torch artifact: the fp32 ``state_dict``, saved with
            ``torch.save``; the backend applies the precision when it compiles).
        cache_file: the cache entry the artifact came from ("" for torch), compared with the
            trial's recorded ``artifact_path`` to show the bundle holds what was measured.
        extras: the backend's additions for ``run.py``.
        threads: the thread count the runner ran with.
        runtime: the runner's ``describe()``.
        input_shape: one sample's shape.
        fixed_batch: the batch size a user's ONNX file fixes, or None.
        data: the inputs carried and the outputs on them.
        fingerprint: the device's fingerprint (``dse.artifacts.fingerprint``).
        versions: installed versions of the backend's libraries and ``run.py``'s requirements.
        output_dtype: the dtype of the runner's outputs.
        run_to_run: the device's calibrated run-to-run variation (``dse calibrate``), or None.
    """

    artifact_format: str
    artifact_file: str
    artifact: bytes
    cache_file: str
    extras: BundleExtras
    threads: int
    runtime: dict[str, str]
    input_shape: tuple[int, ...]
    fixed_batch: int | None
    data: CarriedData
    fingerprint: dict[str, str]
    versions: dict[str, str] = field(default_factory=dict)
    output_dtype: str = "float32"
    run_to_run: RunToRun | None = None


@dataclass(frozen=True)
class VerifyRequest:
    """A bundle's model to deploy and measure on a device (``dse verify``).

    ``candidate`` is the trial's configuration, its ``device_profile`` the verifying device's;
    ``artifact`` the bundle's file (for torch, the fp32 ``state_dict``), ``data`` the bundle's
    inputs and the outputs recorded on them; ``run_to_run`` the exporting device's calibration,
    the floor of the intervals where the verifying device has none of its own."""

    candidate: Candidate
    artifact_format: str
    artifact_file: str
    artifact: bytes
    input_shape: tuple[int, ...]
    fixed_batch: int | None
    data: CarriedData
    run_to_run: RunToRun | None = None


@dataclass(frozen=True)
class VerifiedModel:
    """What a device measured of a bundle's model.

    Attributes:
        measurement: the measurement, by the bundle's protocol (accuracy and fidelity on the
            carried inputs).
        max_abs_diff: the largest difference between the outputs now and as exported (None for
            a language model, whose outputs are tokens).
        decisions_agree: the share of inputs whose top output is the one recorded (a language
            model: the share of its greedy tokens on the bundle's prompts that are the ones
            recorded).
        fingerprint: the verifying device's fingerprint.
    """

    measurement: Measurement
    max_abs_diff: float | None
    decisions_agree: float
    fingerprint: dict[str, str]


@dataclass(frozen=True)
class ExportedGenerator:
    """A language-model trial's deployment as rebuilt on its device for ``dse export``.

    Attributes:
        model_files: the runtime's model folder, file by file (relative path -> bytes): a
            stateful IR (OpenVINO), a model builder's folder (ONNX Runtime GenAI), a Hugging Face
            folder of the loaded weights (torch).
        model_format: what that folder is, in words.
        settings: the runtime's settings ``run.py`` needs besides the knobs (the backend's
            ``generation_bundle``).
        prompts: the workload's prompt token ids, (batch, prompt tokens) int64.
        tokens: the deployed model's greedy tokens on them as exported, (batch, output tokens).
        output_tokens: the workload's output tokens per request.
        threads: the thread count the runner ran with.
        runtime: the runner's ``describe()``.
        fingerprint: the device's fingerprint.
        versions: installed versions of the backend's libraries and ``run.py``'s requirements.
        run_to_run: the device's calibrated run-to-run variation, or None.
    """

    model_files: dict[str, bytes]
    model_format: str
    settings: dict[str, Any]
    prompts: np.ndarray
    tokens: np.ndarray
    output_tokens: int
    threads: int
    runtime: dict[str, str]
    fingerprint: dict[str, str]
    versions: dict[str, str] = field(default_factory=dict)
    run_to_run: RunToRun | None = None


@dataclass(frozen=True)
class GenerationVerifyRequest:
    """A language model's bundle to deploy and measure on a device (``dse verify``).

    ``candidate`` is the trial's configuration (its workload with it), its ``device_profile``
    the verifying device's; ``model_files`` the bundle's model folder file by file,
    ``settings`` the runtime's settings recorded at export, ``prompts`` and ``tokens`` the
    workload's prompts and the greedy tokens recorded on them; ``run_to_run`` the exporting
    device's calibration."""

    candidate: Candidate
    model_files: dict[str, bytes]
    settings: dict[str, Any]
    prompts: np.ndarray
    tokens: np.ndarray
    run_to_run: RunToRun | None = None


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its path relative to it: a model folder as it crosses
    between a device and the driver (``dse export``, ``dse verify``)."""
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def write_folder_files(folder: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` (relative path -> bytes, as :func:`folder_files` gives) under ``folder``."""
    for name, data in sorted(files.items()):
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
