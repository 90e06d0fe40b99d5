"""``dse calibrate``: measure a device's run-to-run variation on the device itself.

Reference workloads (a sub-millisecond ONNX Runtime CNN on CPU devices, a small and a larger
torch CNN of milliseconds a call, on the device's own processor) are built once, then
measured in ``runs`` fresh processes (:mod:`dse.trial.calibration_run`) ``gap_s`` apart, with the
campaign's measurement protocol. The spread of their percentiles is the device's
:class:`~dse.measure.run_to_run.RunToRun`, saved in the campaign's cache where the device's worker
reads it (see that module for how it is used).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dse.core import MeasurementError
from dse.measure import RunToRun, estimate
from dse.spec import HardwareProfile, MeasureSpec

#: The workloads: (runtime, CNN architecture, batch). Chosen apart from the benchmark's artifacts
#: (``benchmarks/measure_calibration.py`` checks the floor on workloads it was not measured on).
REFERENCES: dict[str, tuple[str, dict[str, Any], int]] = {
    "onnxruntime-cnn": ("onnxruntime", {"num_stages": 2, "depth": 1, "width_mult": 0.75,
                                        "kernel_size": 3, "expand_ratio": 3}, 16),
    "torch-cnn": ("torch", {"num_stages": 2, "depth": 2, "width_mult": 1.5,
                            "kernel_size": 5, "expand_ratio": 4}, 16),
    "torch-cnn-large": ("torch", {"num_stages": 3, "depth": 2, "width_mult": 2.0,
                                  "kernel_size": 5, "expand_ratio": 4}, 32),
}
RUN_TIMEOUT_S = 600.0


def device_key(host: dict[str, str]) -> str:
    """The physical device a worker measures: its host, and its GPU where it has one."""
    gpus = host.get("cuda_visible_devices")
    return host.get("host", "unknown") + (f"-gpu{gpus}" if gpus else "")


def _workloads(profile: HardwareProfile, folder: Path) -> dict[str, tuple[str, str, list[int]]]:
    """Build the reference workloads this device runs: name -> (runtime, file, input shape)."""
    import torch

    from dse.artifacts import export_onnx
    from dse.models import get_family

    family = get_family("cnn")
    built: dict[str, tuple[str, str, list[int]]] = {}
    for name, (kind, arch, batch) in REFERENCES.items():
        if kind == "onnxruntime" and (profile.kind != "cpu"
                                      or importlib.util.find_spec("onnxruntime") is None):
            continue  # ONNX Runtime's CPU provider says nothing about a GPU's variation
        torch.manual_seed(0)
        model = family.build(arch).eval()
        shape = [batch, *family.input_shape_for(arch)]
        path = folder / f"{name}.{'onnx' if kind == 'onnxruntime' else 'pt'}"
        if kind == "onnxruntime":
            export_onnx(model, tuple(shape[1:]), path)
        else:
            torch.save(model, path)
        built[name] = (kind, str(path), shape)
    return built


def _one_run(request: dict[str, Any]) -> dict[str, dict[str, float]]:
    try:
        done = subprocess.run([sys.executable, "-m", "dse.trial.calibration_run", json.dumps(request)],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise MeasurementError(f"a calibration run took over {RUN_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise MeasurementError(f"a calibration run failed (exit {done.returncode}): {last}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def calibrate_device(profile: HardwareProfile, measure: MeasureSpec, *, device: str, runs: int,
                     gap_s: float,
                     on_run: Callable[[int, dict[str, dict[str, float]]], object] | None = None
                     ) -> RunToRun:
    """Measure the reference workloads in ``runs`` fresh processes ``gap_s`` apart on this device
    (``device`` names it in the result); MeasurementError when a run fails."""
    if runs < 2:
        raise ValueError(f"runs must be at least 2 (a spread needs two runs), got {runs}")
    measured: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="dse-calibrate-") as folder:
        workloads = _workloads(profile, Path(folder))
        request = {"workloads": workloads, "measure": measure.model_dump(mode="json"),
                   "device": "cuda" if profile.kind in ("cuda", "jetson") else "cpu"}
        for run in range(runs):
            if run:
                time.sleep(gap_s)  # spread in time: what drifts over minutes belongs in it
            result = _one_run(request)
            for name, percentiles in result.items():
                measured.setdefault(name, []).append(percentiles)
            if on_run is not None:
                on_run(run, result)
    return estimate(measured, device=device)
