"""``dse.calibrate``: measure the run-to-run variation of an experiment's devices, once, so that
every later interval on them holds it (see :mod:`dse.measure.run_to_run`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.exceptions import DeviceError
from dse.spec import Experiment

if TYPE_CHECKING:
    from dse.measure.run_to_run import RunToRun

# Ten runs 10 s apart: about three minutes per device, so what drifts over minutes is in it.
DEFAULT_RUNS = 10
DEFAULT_GAP_S = 10.0
TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class DeviceCalibration:
    """One device's calibration: its figures and the file later campaigns read, or the error."""

    profile: str
    device_id: str
    calibration: RunToRun | None
    path: Path | None
    error: str = ""


def _result(raw: dict[str, Any]) -> DeviceCalibration:
    from dse.measure.run_to_run import RunToRun

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
    DeviceError when no device of the experiment is measured by the farm."""
    from dse.api import load_experiment
    from dse.farm.cluster import connect, start_embedded
    from dse.farm.dispatcher import Dispatcher

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
