"""A bundle read back for ``dse verify``: its manifest checked first, then its deployment,
measurements, artifact and data; a one-line DseError naming the bundle and what is wrong."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from dse.core import DseError
from dse.deploy import layout
from dse.deploy.exported import CarriedData, folder_files
from dse.deploy.manifest import manifest_problems
from dse.measure import RunToRun, load


@dataclass(frozen=True)
class Bundle:
    """An exported bundle whose files match its manifest."""

    folder: Path
    deployment: dict[str, Any]
    measurements: dict[str, Any]
    artifact: bytes
    data: CarriedData | None
    run_to_run: RunToRun | None = None
    generation: GenerationData | None = None
    """A language model's bundle (``deployment.yaml``'s ``kind: generation``): its model folder,
    prompts and recorded tokens; None for a fixed-shape model's."""

    @property
    def artifact_file(self) -> str:
        return Path(str(self.deployment["artifact"]["file"])).name


@dataclass(frozen=True)
class GenerationData:
    """What a language model's bundle carries besides its deployment and measurements."""

    model_files: dict[str, bytes]
    prompts: np.ndarray
    tokens: np.ndarray


def read_bundle(folder: Path) -> Bundle:
    """The bundle at ``folder``; DseError when it is not one, does not match its manifest or
    has a file dse cannot read."""
    if not folder.is_dir():
        raise DseError(f"{folder}: no such bundle folder")
    problems = manifest_problems(folder)
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more"
                                           if len(problems) > 3 else "")
        raise DseError(f"{folder}: the bundle does not match its manifest: {shown}")
    deployment = _yaml(folder, layout.DEPLOYMENT)
    if deployment.get("format") != layout.FORMAT:
        raise DseError(f"{folder / layout.DEPLOYMENT}: format {deployment.get('format')!r}; this "
                       f"dse reads bundle format {layout.FORMAT}")
    if deployment.get("kind") == "generation":
        return _generation_bundle(folder, deployment)
    with _readable(folder):
        measurements = json.loads((folder / layout.MEASUREMENTS).read_text())
        artifact_file = folder / str(deployment["artifact"]["file"])
        artifact = artifact_file.read_bytes()
        labels = folder / layout.LABELS
        data = CarriedData(np.load(folder / layout.INPUTS),
                           np.load(labels) if labels.is_file() else None,
                           np.load(folder / layout.REFERENCE), np.load(folder / layout.OUTPUTS))
        _mappings(deployment, ("candidate", "deployment", "input", "measurement", "device"))
    return Bundle(folder, deployment, measurements, artifact, data, _run_to_run(folder))


def _generation_bundle(folder: Path, deployment: dict[str, Any]) -> Bundle:
    """A language model's bundle: its model folder's files, prompts and recorded tokens."""
    with _readable(folder):
        measurements = json.loads((folder / layout.MEASUREMENTS).read_text())
        workload = deployment["workload"]
        model = folder / str(deployment["model"]["folder"])
        files = folder_files(model)
        if not files:
            raise ValueError(f"{model.name}/ holds no file")
        data = GenerationData(files, np.load(folder / str(workload["prompts_file"])),
                              np.load(folder / str(workload["tokens_file"])))
        _mappings(deployment, ("candidate", "deployment", "measurement", "device", "model"))
    return Bundle(folder, deployment, measurements, b"", None, _run_to_run(folder), data)


@contextlib.contextmanager
def _readable(folder: Path) -> Iterator[None]:
    """What goes wrong reading the bundle's files, as one DseError naming the bundle."""
    try:
        yield
    except (OSError, ValueError, KeyError, TypeError) as exc:
        what = f"field {exc.args[0]!r} is missing" if isinstance(exc, KeyError) else \
            f"{type(exc).__name__}: {exc}"
        raise DseError(f"{folder}: not a readable bundle: {what}") from None


def _mappings(deployment: dict[str, Any], keys: tuple[str, ...]) -> None:
    """KeyError naming the first of ``keys`` that is not a mapping in ``deployment.yaml``."""
    for key in keys:
        if not isinstance(deployment.get(key), dict):
            raise KeyError(key)


def _run_to_run(folder: Path) -> RunToRun | None:
    if not (folder / layout.RUN_TO_RUN).is_file():
        return None
    run_to_run, why = load(folder / layout.RUN_TO_RUN)
    if run_to_run is None:
        raise DseError(f"{folder}: {why}")
    return run_to_run


def _yaml(folder: Path, name: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load((folder / name).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise DseError(f"{folder / name}: unreadable: {type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    if not isinstance(data, dict):
        raise DseError(f"{folder / name}: expected a mapping")
    return data
