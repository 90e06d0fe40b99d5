"""What crosses between the driver and a device worker for ``dse export`` and ``dse verify``:
plain, picklable data. A farm device's disk is not the driver's, so files travel as bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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
        max_abs_diff: the largest difference between the outputs now and as exported.
        decisions_agree: the share of inputs whose top output is the one recorded.
        fingerprint: the verifying device's fingerprint.
    """

    measurement: Measurement
    max_abs_diff: float
    decisions_agree: float
    fingerprint: dict[str, str]
