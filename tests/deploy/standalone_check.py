"""One check for every backend's standalone ``run.py``: a compiled runner's bundle files written
as ``dse export`` writes them, ``run.py`` run in a fresh environment holding only the runtime
(:mod:`tests.runtime_venv`), its outputs compared with the runner's own."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import numpy as np

from dse.artifacts import Artifact
from dse.backends import Runner, get_backend
from dse.deploy.layout import INPUTS, MODEL_DIR
from dse.deploy.standalone import write_standalone
from tests.runtime_venv import runtime_only_python


def installed(names: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def run_standalone(folder: Path, backend: str, runner: Runner, artifact: Artifact,
                   knobs: dict[str, object], threads: int, images: np.ndarray,
                   *, timeout_s: float = 300) -> tuple[np.ndarray, np.ndarray, str]:
    """Write the bundle's standalone files for ``runner`` into ``folder``, run ``run.py`` in a
    runtime-only environment on ``images``; (run.py's outputs, the runner's outputs, its stdout).
    """
    declared = get_backend(backend).declaration
    assert declared.standalone is not None, f"{backend} has no standalone run.py"
    extras = get_backend(backend).bundle_extras(runner, artifact)
    model = folder / "bundle" / MODEL_DIR
    model.mkdir(parents=True)
    artifact_name = "weights.pt"
    if artifact.path is not None:
        artifact_name = f"model{artifact.path.suffix}"
        shutil.copyfile(artifact.path, model / artifact_name)
    bundle = folder / "bundle"
    (bundle / INPUTS).parent.mkdir(parents=True)
    np.save(bundle / INPUTS, images.astype(np.float32))
    write_standalone(bundle, backend=backend, precision=artifact.precision,
                     batch_size=runner.batch_size, input_shape=artifact.input_shape, knobs=knobs,
                     threads=threads, artifact_file=artifact_name, extras=extras,
                     versions=installed(declared.standalone.requirements))
    python = runtime_only_python(folder / "venv", list(declared.standalone.requirements))
    done = subprocess.run([str(python), "-I", "run.py", "--out", "out.npy", "--repeat", "3"],
                          cwd=bundle, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-3000:]
    step = runner.batch_size
    expected = np.concatenate([runner.run(np.resize(images[i:i + step], (step, *images.shape[1:])))
                               [: len(images[i:i + step])] for i in range(0, len(images), step)])
    return np.load(bundle / "out.npy"), expected, done.stdout
