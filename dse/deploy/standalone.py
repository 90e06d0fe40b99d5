"""The standalone part of a bundle: ``run.py`` with its recorded settings, the files it loads
besides the artifact, and ``requirements.txt`` pinned to the runtime versions it was exported
with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dse.backends import BundleExtras
from dse.deploy.layout import INPUTS, MODEL_DIR, REQUIREMENTS, RUN_SCRIPT
from dse.deploy.run_script import render_run_script
from dse.plugins import declaration
from dse.util import atomic_write_text


def write_standalone(folder: Path, *, backend: str, precision: str, batch_size: int,
                     input_shape: tuple[int, ...], knobs: Mapping[str, Any], threads: int,
                     artifact_file: str, extras: BundleExtras,
                     versions: Mapping[str, str]) -> dict[str, Any]:
    """Write ``run.py``, ``requirements.txt`` and the extras' files (under ``model/``) into the
    bundle ``folder``, whose artifact is ``model/<artifact_file>``; the settings ``run.py``
    holds. ``threads`` is the thread count the runner ran with; ``versions`` the installed
    versions of the runtime's distributions on the device that exported it."""
    model = folder / MODEL_DIR
    model.mkdir(parents=True, exist_ok=True)
    for name, data in sorted(extras.files.items()):
        (model / name).write_bytes(data)
    settings: dict[str, Any] = {
        "backend": backend, "precision": precision, "batch_size": batch_size,
        "input_shape": list(input_shape), "knobs": dict(knobs), "threads": threads,
        "model_file": f"{MODEL_DIR}/{extras.model_file or artifact_file}",
        "files": {name: f"{MODEL_DIR}/{name}" for name in sorted(extras.files)},
        "inputs_file": INPUTS, **extras.settings}
    atomic_write_text(folder / RUN_SCRIPT, render_run_script(backend, settings))
    standalone = declaration(backend).standalone
    assert standalone is not None  # render_run_script refused the backend otherwise
    atomic_write_text(folder / REQUIREMENTS, requirements_text(standalone.requirements, versions))
    return settings


# Where pip finds torch's builds for one platform (a local version label: 2.13.0+cpu).
_TORCH_INDEX = "https://download.pytorch.org/whl/"


def requirements_text(names: tuple[str, ...], versions: Mapping[str, str]) -> str:
    """``requirements.txt``: each distribution pinned to the version the bundle was exported
    with. A torch build with a local label (``+cpu``, ``+cu128``) is on PyTorch's own index, not
    PyPI, so that index is named too: PyPI's torch of the same number is another build."""
    lines = []
    for name in names:
        version = versions.get(name)
        if version is None:
            lines.append(name)
            continue
        label = version.partition("+")[2]
        if label and name == "torch":
            lines.insert(0, f"--extra-index-url {_TORCH_INDEX}{label}")
        lines.append(f"{name}=={version}")
    return "\n".join(lines) + "\n"
