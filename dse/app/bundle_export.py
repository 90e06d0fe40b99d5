"""``dse export``: one measured trial of a campaign as a deployable bundle.

The trial's exact configuration (its ``Candidate``) is rebuilt from the campaign's caches on a
device of its profile — the very artifact that was measured — and written with its deployment
settings, its measurements, the inputs it can be checked on, a standalone ``run.py`` and a
SHA-256 manifest (:mod:`dse.deploy`). The campaign's study is only read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.core import Candidate, DeviceError, DseError, TrialAttr
from dse.results import device_study, farm_device, measured_trial, original_trial
from dse.spec import Experiment

if TYPE_CHECKING:
    import optuna

    from dse.deploy import RecordedTrial
    from dse.spec import HardwareProfile

# Rebuilding from cold caches (training, conversion): the trial's own timeout, and this more.
_EXPORT_SECONDS = 300.0


@dataclass(frozen=True)
class ExportedBundle:
    """A bundle written by :func:`export`.

    Examples:
        >>> import dataclasses
        >>> from dse import ExportedBundle
        >>> [field.name for field in dataclasses.fields(ExportedBundle)]
        ['folder', 'deployment', 'files']

    Attributes:
        folder: the bundle's folder.
        deployment: what ``deployment.yaml`` holds.
        files: the bundle's files, relative to ``folder``, as the manifest lists them.
    """

    folder: Path
    deployment: dict[str, Any]
    files: list[str]


def export(experiment: Experiment | str | os.PathLike[str], trial: int,
           out: str | os.PathLike[str], *, device: str | None = None,
           address: str | None = None, force: bool = False) -> ExportedBundle:
    """Export one measured trial of a campaign as a bundle a deployment can use and
    :func:`verify` can check later.

    The trial's configuration is rebuilt from the campaign's caches on a device of its profile
    (through the farm: an embedded local Ray without ``address``), so the artifact is the one
    that was measured. The bundle holds the artifact (``model/``: the ONNX file at its
    precision, a ``.tflite`` or ``.pte`` file, or a torch ``state_dict``), ``deployment.yaml``
    (backend, precision, batch size, knobs, runtime settings, input and output, the device and
    its fingerprint, the measurement protocol), ``measurements.json`` (metrics with intervals,
    quality flags, provenance, the latency distribution in percentiles), up to 512 inputs of the
    held-out split with the outputs on them (``data/``), ``device_profile.yaml``, a standalone
    ``run.py`` with ``requirements.txt`` (the runtime only, no dse), a README and
    ``MANIFEST.sha256``. A language model's bundle (``kind: generation``) holds its runtime's
    model folder, the workload's prompts and the greedy tokens recorded on them, and a ``run.py``
    that decodes and times requests (docs/deploying.md, "A language model's bundle").

    Args:
        experiment: A loaded experiment, or the path of its YAML file.
        trial: The trial's number in ``device``'s study (the dashboard's trial column).
        out: The bundle's folder: new, empty, or (with ``force``) a bundle to replace.
        device: The device profile's name; may be left out when the campaign has one device.
        address: The farm's Ray address; else the experiment's ``farm.address``, else an
            embedded local Ray.
        force: Replace a bundle already at ``out``.

    Returns:
        The :class:`ExportedBundle`.

    Raises:
        DseError: One line when the trial cannot be exported (no study, no such trial, a trial
            that failed, was infeasible or was screened out, a replay device, an evaluator's
            campaign), ``out`` holds something else, or the device could not rebuild it.
        SpecError: When ``experiment`` is a path to an invalid experiment.

    Examples:
        A campaign measured by an evaluator has no deployment to export:

        >>> from dse import export
        >>> from dse.core.exceptions import DseError
        >>> try:
        ...     export("experiments/custom-evaluator.yaml", trial=0, out="bundle")
        ... except DseError as exc:
        ...     print(exc)
        experiments/custom-evaluator.yaml: this campaign is measured by an evaluator, ...

        After ``dse run experiments/quickstart.yaml``:

        >>> bundle = export("experiments/quickstart.yaml", trial=3, out="bundle")  # doctest: +SKIP
        >>> bundle.deployment["deployment"]  # doctest: +SKIP
        {'backend': 'onnxruntime', 'precision': 'int8', 'batch_size': 8, ...}
    """
    from dse.app.api import load_experiment
    from dse.deploy import (
        ExportedGenerator,
        ExportedModel,
        bundle_files,
        check_target,
        write_bundle,
        write_generation_bundle,
    )
    from dse.farm import call_device
    from dse.storage import refused_writes_as_errors

    if not isinstance(experiment, Experiment):
        experiment = load_experiment(experiment)
    chosen = farm_device(experiment, device, "export")
    study = device_study(experiment, chosen)
    frozen = measured_trial(experiment, study, chosen, trial, "export", full_only=True)
    try:
        candidate = Candidate.from_dict(dict(frozen.user_attrs[TrialAttr.CANDIDATE]))
    except TypeError as exc:  # recorded by a dse whose candidates had other fields
        raise DseError(f"{experiment.path}: trial {trial} on {chosen.name}: its recorded "
                       f"candidate does not fit this dse ({exc})") from None
    recorded = _recorded(experiment, chosen, study, frozen)
    check_target(Path(out).resolve(), force)
    found = call_device(chosen, experiment.cache_dir, address or experiment.spec.farm.address,
                        "export_candidate", (candidate, experiment.space.training),
                        experiment.spec.budget.trial_timeout_s + _EXPORT_SECONDS)
    if not isinstance(found, ExportedModel | ExportedGenerator):
        raise DeviceError(f"{experiment.path}: trial {trial} on {chosen.name}: {found}")
    target = Path(out)
    with refused_writes_as_errors(target.parent.resolve(), "free space, or --out elsewhere"):
        if isinstance(found, ExportedGenerator):
            folder = write_generation_bundle(target, found, candidate, recorded,
                                             _profile_yaml(chosen), force=force)
        else:
            folder = write_bundle(target, found, candidate, recorded, _profile_yaml(chosen),
                                  force=force)
    import yaml

    from dse.deploy import DEPLOYMENT

    deployment = yaml.safe_load((folder / DEPLOYMENT).read_text())
    return ExportedBundle(folder, deployment, bundle_files(folder))


def _recorded(experiment: Experiment, device: HardwareProfile, study: optuna.Study,
              frozen: optuna.trial.FrozenTrial) -> RecordedTrial:
    """What the study and run folder hold about the trial (a reused result's from the trial
    that measured it)."""
    from dse.deploy import RecordedTrial

    source = original_trial(study, frozen)
    attrs = frozen.user_attrs
    latency, why = _latency_samples(experiment.run_dir, source)
    notes = []
    if source.number != frozen.number:
        notes.append(f"trial {frozen.number} reused the measurement of trial {source.number}")
    return RecordedTrial(
        campaign=experiment.name, experiment=str(experiment.path), device=device.name,
        device_id=str(source.user_attrs.get(TrialAttr.DEVICE_ID, "")), trial=frozen.number,
        metrics=dict(attrs.get(TrialAttr.METRICS) or {}),
        missing=dict(attrs.get(TrialAttr.MISSING) or {}),
        provenance={k: str(v) for k, v
                    in (source.user_attrs.get(TrialAttr.PROVENANCE) or {}).items()},
        quality=str(attrs.get(TrialAttr.MEASUREMENT_QUALITY) or ""),
        objectives=[o.metric for o in experiment.space.objectives],
        constraints=[str(c) for c in experiment.space.constraints],
        measurement=experiment.spec.measurement.model_dump(mode="json"),
        latency_ms=latency, latency_missing=why, notes=notes)


def _latency_samples(run_dir: Path, trial: optuna.trial.FrozenTrial) -> tuple[np.ndarray | None,
                                                                              str]:
    from dse.report import LATENCY_KEY

    name = trial.user_attrs.get(TrialAttr.SAMPLES_FILE)
    if not name:
        return None, "the trial kept no samples file"
    try:
        with np.load(run_dir / str(name)) as samples:
            return np.asarray(samples[LATENCY_KEY], dtype=np.float64), ""
    except (OSError, KeyError, ValueError) as exc:
        return None, f"its samples file {name} is unreadable: {type(exc).__name__}: {exc}"


def _profile_yaml(profile: HardwareProfile) -> str:
    import yaml

    return yaml.safe_dump(profile.model_dump(mode="json", exclude_defaults=True),
                          sort_keys=False)
