"""``dse.calibrate``: measure the run-to-run variation of an experiment's devices, once, so that
every later interval on them holds it (see :mod:`dse.measure.run_to_run`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.core import DeviceError
from dse.spec import Experiment

if TYPE_CHECKING:
    from dse.measure import RunToRun

# Ten runs 10 s apart: about three minutes per device, so what drifts over minutes is in it.
DEFAULT_RUNS = 10
DEFAULT_GAP_S = 10.0
TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class DeviceCalibration:
    """One device's calibration: its figures and the file later campaigns read, or the error.

    Attributes:
        profile: The device profile's name.
        device_id: The device's id on the farm (empty when unknown).
        calibration: The measured run-to-run variation; None when it failed.
        path: The file later campaigns read; None when it failed.
        error: Why the calibration failed; empty when it did not.

    Examples:
        >>> from dse import DeviceCalibration
        >>> failed = DeviceCalibration(profile="local-cpu", device_id="cpu-0", calibration=None,
        ...                            path=None, error="TimeoutError: took too long")
        >>> failed.calibration is None, bool(failed.error)
        (True, True)
    """

    profile: str
    device_id: str
    calibration: RunToRun | None
    path: Path | None
    error: str = ""


def _result(raw: dict[str, Any]) -> DeviceCalibration:
    from dse.measure import RunToRun

    found = raw.get("calibration")
    return DeviceCalibration(
        profile=str(raw.get("profile", "")), device_id=str(raw.get("device_id", "")),
        calibration=RunToRun(**found) if found else None,
        path=Path(raw["path"]) if raw.get("path") else None, error=str(raw.get("error", "")))


def calibrate(experiment: Experiment | str | os.PathLike[str], *, runs: int = DEFAULT_RUNS,
              gap_s: float = DEFAULT_GAP_S, address: str | None = None) -> list[DeviceCalibration]:
    """On every device of the experiment's farm (an embedded local Ray without ``address``, else
    the farm at it), measure reference workloads in ``runs`` fresh processes ``gap_s`` seconds
    apart with the experiment's measurement protocol, and save the device's run-to-run variation
    in the experiment's cache. Later campaigns with ``measurement.run_to_run: auto`` floor every
    interval on that device with it. Replay devices and evaluators have nothing to calibrate.

    Args:
        experiment: A loaded experiment, or the path of its YAML file.
        runs: Fresh processes to measure in, at least 2.
        gap_s: Seconds between runs, finite and >= 0.
        address: The farm's Ray address; else the experiment's ``farm.address``, else an
            embedded local Ray.

    Returns:
        One :class:`DeviceCalibration` per device of the farm, with ``error`` set where that
        device failed or ran out of time.

    Raises:
        SpecError: When ``experiment`` is a path to an invalid experiment.
        ValueError: When ``runs`` < 2, or ``gap_s`` is negative or not finite.
        DeviceError: When no device of the experiment is measured by the farm (only replay
            devices, or an evaluator).

    Examples:
        A campaign measured by an evaluator has nothing to calibrate:

        >>> from dse import calibrate
        >>> from dse.core.exceptions import DeviceError
        >>> try:
        ...     calibrate("experiments/custom-evaluator.yaml")
        ... except DeviceError as exc:
        ...     print(exc)
        experiments/custom-evaluator.yaml: no device of this campaign is measured by the farm ...

        On a real device it takes about three minutes per device and starts Ray:

        >>> results = calibrate("experiments/quickstart.yaml")  # doctest: +SKIP
        >>> [(r.profile, r.path is not None) for r in results]  # doctest: +SKIP
        [('local-cpu', True)]
    """
    from dse.app.api import load_experiment
    from dse.farm import Dispatcher, connect, start_embedded

    if not isinstance(experiment, Experiment):
        experiment = load_experiment(experiment)
    if runs < 2:
        raise ValueError(f"runs must be at least 2 (a spread needs two runs), got {runs}")
    if not 0 <= gap_s < float("inf"):
        raise ValueError(f"gap_s must be a finite number of seconds >= 0, got {gap_s}")
    on_farm = [p for p in experiment.devices if p.kind != "replay"]
    if not on_farm or experiment.evaluator is not None:
        raise DeviceError(f"{experiment.path}: no device of this campaign is measured by the farm "
                          f"(replay tables and evaluators have no run-to-run variation to calibrate)")
    address = address or experiment.spec.farm.address
    if address:
        connect(address)
    else:
        start_embedded(on_farm)
    space = experiment.space
    measure = experiment.spec.measurement.for_metrics(
        [o.metric for o in space.objectives] + [c.metric for c in space.constraints])
    farm = Dispatcher(on_farm, experiment.cache_dir)
    try:
        return [_result(raw) for raw in farm.calibrate(measure, runs, gap_s, TIMEOUT_S)]
    finally:
        farm.cancel()
