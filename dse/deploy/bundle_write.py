"""A bundle written from a trial's exported model (``dse export``): the artifact, the carried
data, ``deployment.yaml``, ``measurements.json``, the device profile, the standalone ``run.py``,
a short README and the manifest. Written into a fresh folder beside the target, then renamed
into place, so a bundle is either whole or absent."""

from __future__ import annotations

import datetime
import json
import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from dse.core import Candidate, DseError, __version__
from dse.deploy import layout
from dse.deploy.exported import CarriedData, ExportedModel
from dse.deploy.manifest import file_sha256, write_manifest
from dse.deploy.standalone import write_standalone
from dse.util import atomic_write_text

if TYPE_CHECKING:
    from dse.measure import RunToRun

# The compact latency distribution: every percentile, and the far tail.
_QUANTILES = [*range(101), 99.9]


@dataclass(frozen=True)
class RecordedTrial:
    """What a campaign's study and run folder hold about the exported trial.

    Attributes:
        campaign: the campaign's name; ``experiment`` its YAML file.
        device: the device profile's name; ``device_id`` the device that measured it.
        trial: the trial's number in the device's study.
        metrics, missing, provenance: as recorded on the trial.
        quality: its measurement-quality label ("" when none).
        objectives: the campaign's objective metrics; ``constraints`` its constraints as text.
        latency_ms: the trial's timed latencies (its samples file), or None, with
            ``latency_missing`` saying why.
        measurement: the campaign's measurement protocol (``measurement:``), as plain data.
    """

    campaign: str
    experiment: str
    device: str
    device_id: str
    trial: int
    metrics: dict[str, float]
    missing: dict[str, str]
    provenance: dict[str, str]
    quality: str
    objectives: list[str]
    constraints: list[str]
    measurement: dict[str, Any]
    latency_ms: np.ndarray | None = None
    latency_missing: str = ""
    notes: list[str] = field(default_factory=list)


def write_bundle(out: Path, exported: ExportedModel, candidate: Candidate, trial: RecordedTrial,
                 profile_yaml: str, *, force: bool = False) -> Path:
    """Write the bundle at ``out``; DseError when ``out`` holds something else (a non-empty
    folder that is not a bundle, or a bundle without ``force``)."""
    return write_staged(out, force,
                        lambda staging: _write(staging, exported, candidate, trial, profile_yaml))


def write_staged(out: Path, force: bool, write: Callable[[Path], None]) -> Path:
    """A bundle at ``out``, whole or absent: ``write`` fills a fresh folder beside it, the
    manifest is added, and the folder is renamed into place (replacing a bundle there with
    ``force``; DseError when ``out`` holds something else)."""
    out = out.resolve()
    check_target(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write(staging)
        write_manifest(staging)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def check_target(out: Path, force: bool) -> None:
    """DseError when a bundle may not be written at ``out``: checked again just before writing,
    and first of all, before the device rebuilds anything."""
    if out.exists() and not out.is_dir():
        raise DseError(f"--out {out}: a file is there; give a folder for the bundle")
    if out.is_dir() and any(out.iterdir()):
        if not (out / layout.MANIFEST).is_file():
            raise DseError(f"--out {out}: the folder is not empty and is not a bundle; give a "
                           f"new or empty folder")
        if not force:
            raise DseError(f"--out {out}: a bundle is already there; --force replaces it")


def _write(folder: Path, exported: ExportedModel, candidate: Candidate, trial: RecordedTrial,
           profile_yaml: str) -> None:
    model = folder / layout.MODEL_DIR
    model.mkdir()
    artifact = model / exported.artifact_file
    artifact.write_bytes(exported.artifact)
    (folder / layout.DATA_DIR).mkdir()
    data = exported.data
    np.save(folder / layout.INPUTS, data.inputs)
    np.save(folder / layout.REFERENCE, data.reference)
    np.save(folder / layout.OUTPUTS, data.outputs)
    if data.labels is not None:
        np.save(folder / layout.LABELS, data.labels)
    standalone: dict[str, Any] | None = None
    try:
        standalone = write_standalone(
            folder, backend=candidate.backend, precision=candidate.precision,
            batch_size=candidate.batch_size, input_shape=exported.input_shape,
            knobs=candidate.knobs, threads=exported.threads,
            artifact_file=exported.artifact_file, extras=exported.extras,
            versions=exported.versions)
    except DseError as exc:  # a backend without a standalone runner: the bundle says so
        trial.notes.append(f"no run.py: {exc}")
    atomic_write_text(folder / layout.DEVICE_PROFILE, profile_yaml)
    if exported.run_to_run is not None:
        from dse.measure import save

        save(exported.run_to_run, folder / layout.RUN_TO_RUN)
    deployment = _deployment(exported, candidate, trial, artifact, standalone)
    atomic_write_text(folder / layout.DEPLOYMENT, yaml.safe_dump(deployment, sort_keys=False,
                                                                 width=100))
    atomic_write_text(folder / layout.MEASUREMENTS,
                      json.dumps(_measurements(trial, data), indent=1, allow_nan=False,
                                 default=str) + "\n")
    atomic_write_text(folder / layout.README, _readme(candidate, trial, standalone is not None))


def _deployment(exported: ExportedModel, candidate: Candidate, trial: RecordedTrial,
                artifact: Path, standalone: dict[str, Any] | None) -> dict[str, Any]:
    recorded_path = trial.provenance.get("artifact_path", "")
    as_measured = (not exported.cache_file or not recorded_path
                   or Path(recorded_path).name == exported.cache_file)
    batch = exported.fixed_batch or candidate.batch_size
    return {
        "format": layout.FORMAT,
        "dse_version": __version__,
        "exported_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "campaign": trial.campaign,
        "experiment": trial.experiment,
        "trial": trial.trial,
        "candidate_id": candidate.candidate_id,
        "candidate": candidate.to_dict(),
        "deployment": {"backend": candidate.backend, "precision": candidate.precision,
                       "batch_size": candidate.batch_size, "knobs": dict(candidate.knobs),
                       "threads": exported.threads},
        "runtime": dict(sorted(exported.runtime.items())),
        "input": {"shape": [batch, *exported.input_shape], "dtype": "float32",
                  "fixed_batch": exported.fixed_batch},
        "output": {"shape": [batch, *exported.data.outputs.shape[1:]],
                   "dtype": exported.output_dtype},
        "artifact": {"file": f"{layout.MODEL_DIR}/{exported.artifact_file}",
                     "format": exported.artifact_format, "bytes": artifact.stat().st_size,
                     "sha256": file_sha256(artifact), "cache_file": exported.cache_file,
                     "as_measured": as_measured,
                     **({"weights": "fp32 state_dict; the backend casts to the precision"}
                        if exported.artifact_format == "torch" else {})},
        "standalone": None if standalone is None else {
            "script": layout.RUN_SCRIPT, "requirements": layout.REQUIREMENTS,
            "model_file": standalone["model_file"]},
        "device": device_section(trial, exported.fingerprint, exported.run_to_run,
                                 exported.versions),
        "measurement": trial.measurement,
        "notes": list(trial.notes),
    }


def device_section(trial: RecordedTrial, fingerprint: dict[str, str],
                   run_to_run: RunToRun | None, versions: dict[str, str]) -> dict[str, Any]:
    """``deployment.yaml``'s ``device``: the profile and device measured on, the device's
    fingerprint and calibration, the runtime libraries' versions (either kind of bundle)."""
    return {"profile": trial.device, "device_id": trial.device_id,
            "profile_file": layout.DEVICE_PROFILE,
            "fingerprint": dict(sorted(fingerprint.items())),
            "run_to_run": run_to_run.describe() if run_to_run else "not calibrated",
            "libraries": dict(sorted(versions.items()))}


def _measurements(trial: RecordedTrial, data: CarriedData) -> dict[str, Any]:
    from dse.accuracy import fidelity_metrics

    def finite(values: dict[str, float]) -> dict[str, float]:
        return {k: float(v) for k, v in sorted(values.items())
                if isinstance(v, int | float) and math.isfinite(v)}

    carried: dict[str, Any] = {"samples": len(data.inputs),
                               **fidelity_metrics(data.reference, data.outputs)}
    if data.labels is not None:
        carried["accuracy"] = float(np.mean(data.outputs.argmax(axis=1) == data.labels))
    distribution: dict[str, Any]
    if trial.latency_ms is not None and len(trial.latency_ms):
        samples = np.asarray(trial.latency_ms, dtype=np.float64)
        distribution = {"unit": "ms", "n": len(samples), "mean": float(samples.mean()),
                        "quantiles": {f"{q:g}": float(np.percentile(samples, q))
                                      for q in _QUANTILES}}
    else:
        distribution = {"missing": trial.latency_missing or "no samples were kept"}
    provenance = trial.provenance
    return {
        "campaign": trial.campaign, "device": trial.device, "trial": trial.trial,
        "objectives": trial.objectives, "constraints": trial.constraints,
        "metrics": finite(trial.metrics), "missing": dict(sorted(trial.missing.items())),
        "measurement_quality": trial.quality or provenance.get("measurement_quality", ""),
        "quality": {key: provenance[key] for key in sorted(provenance) if key in _QUALITY_KEYS},
        "latency_distribution": distribution,
        "carried_data": carried,
        "provenance": dict(sorted(provenance.items())),
    }


# The provenance entries that say how far a measurement can be trusted.
_QUALITY_KEYS = frozenset({"measurement_quality", "disturbed", "disturbance", "remeasures",
                           "remeasured_because", "stationary", "target_met", "underpowered",
                           "run_to_run", "timer", "blocks", "between_run_cv"})


def _readme(candidate: Candidate, trial: RecordedTrial, has_run_script: bool) -> str:
    run = ("pip install -r requirements.txt   # the runtime only; no dse needed\n"
           "python run.py --repeat 100        # the bundle's inputs, then 100 timed calls\n"
           if has_run_script else "(no run.py: see deployment.yaml's notes)\n")
    return (f"# {trial.campaign}: trial {trial.trial} on {trial.device}\n\n"
            f"{candidate.backend} {candidate.precision}, batch {candidate.batch_size}, knobs "
            f"{dict(candidate.knobs)}; model {candidate.family} {candidate.arch}.\n\n"
            f"Exported by `dse export` (dse {__version__}). `deployment.yaml` says how it is "
            f"deployed, `measurements.json` what was measured, `{layout.MANIFEST}` hashes every "
            f"file (`sha256sum -c {layout.MANIFEST}`).\n\n"
            f"Run it:\n\n```\n{run}```\n\n"
            f"Check it still performs as measured, on a device of its profile:\n\n"
            f"```\ndse verify .                       # exit 0 pass/improved, 1 regressed\n```\n")
