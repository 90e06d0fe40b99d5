"""A language model's bundle (``dse export`` of a generative trial): the runtime's model folder,
the workload's prompts with the greedy tokens recorded on them, ``deployment.yaml`` (``kind:
generation``), ``measurements.json``, the device profile, a standalone ``run.py`` that decodes and
times requests with only the runtime installed, a README and the manifest. Written like a
fixed-shape bundle: into a fresh folder beside the target, renamed into place whole."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from dse.core import Candidate, DseError, __version__
from dse.deploy import layout
from dse.deploy.bundle_write import RecordedTrial, device_section, write_staged
from dse.deploy.exported import ExportedGenerator, write_folder_files
from dse.deploy.run_script import render_generation_run_script
from dse.deploy.standalone import requirements_text
from dse.plugins import declaration
from dse.util import atomic_write_text

# deployment.yaml's kind for a language model (a fixed-shape model's bundle has none).
GENERATION_KIND = "generation"
PROMPTS = f"{layout.DATA_DIR}/prompts.npy"
TOKENS = f"{layout.DATA_DIR}/tokens.npy"


def write_generation_bundle(out: Path, exported: ExportedGenerator, candidate: Candidate,
                            trial: RecordedTrial, profile_yaml: str, *,
                            force: bool = False) -> Path:
    """Write the bundle at ``out``; DseError when ``out`` holds something else (a non-empty
    folder that is not a bundle, or a bundle without ``force``)."""
    return write_staged(out, force,
                        lambda staging: _write(staging, exported, candidate, trial, profile_yaml))


def _write(folder: Path, exported: ExportedGenerator, candidate: Candidate,
           trial: RecordedTrial, profile_yaml: str) -> None:
    write_folder_files(folder / layout.MODEL_DIR, exported.model_files)
    (folder / layout.DATA_DIR).mkdir()
    np.save(folder / PROMPTS, exported.prompts)
    np.save(folder / TOKENS, exported.tokens)
    settings: dict[str, Any] = {
        "backend": candidate.backend, "precision": candidate.precision,
        "batch_size": candidate.batch_size, "knobs": dict(candidate.knobs),
        "threads": exported.threads, "model_dir": layout.MODEL_DIR, "prompts_file": PROMPTS,
        "tokens_file": TOKENS, "output_tokens": exported.output_tokens, **exported.settings}
    standalone = declaration(candidate.backend).generation_standalone
    has_script = False
    try:
        atomic_write_text(folder / layout.RUN_SCRIPT,
                          render_generation_run_script(candidate.backend, settings))
        assert standalone is not None  # the render refused the backend otherwise
        atomic_write_text(folder / layout.REQUIREMENTS,
                          requirements_text(standalone.requirements, exported.versions))
        has_script = True
    except DseError as exc:  # a backend without a standalone runner: the bundle says so
        trial.notes.append(f"no run.py: {exc}")
    atomic_write_text(folder / layout.DEVICE_PROFILE, profile_yaml)
    if exported.run_to_run is not None:
        from dse.measure import save

        save(exported.run_to_run, folder / layout.RUN_TO_RUN)
    size = sum(len(data) for data in exported.model_files.values())
    deployment = {
        "format": layout.FORMAT,
        "kind": GENERATION_KIND,
        "dse_version": __version__,
        "exported_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "campaign": trial.campaign, "experiment": trial.experiment, "trial": trial.trial,
        "candidate_id": candidate.candidate_id, "candidate": candidate.to_dict(),
        "deployment": {"backend": candidate.backend, "precision": candidate.precision,
                       "batch_size": candidate.batch_size, "knobs": dict(candidate.knobs),
                       "threads": exported.threads},
        "runtime": dict(sorted(exported.runtime.items())),
        "workload": {"prompts_file": PROMPTS, "prompt_tokens": int(exported.prompts.shape[1]),
                     "output_tokens": exported.output_tokens, "tokens_file": TOKENS,
                     "decoding": "greedy, exactly output_tokens per request"},
        "model": {"folder": layout.MODEL_DIR, "format": exported.model_format,
                  "files": len(exported.model_files), "bytes": size,
                  "settings": dict(exported.settings)},
        "standalone": {"script": layout.RUN_SCRIPT, "requirements": layout.REQUIREMENTS,
                       "settings": settings} if has_script else None,
        "device": device_section(trial, exported.fingerprint, exported.run_to_run,
                                 exported.versions),
        "measurement": trial.measurement,
        "notes": list(trial.notes),
    }
    atomic_write_text(folder / layout.DEPLOYMENT,
                      yaml.safe_dump(deployment, sort_keys=False, width=100))
    atomic_write_text(folder / layout.MEASUREMENTS,
                      json.dumps(_measurements(trial), indent=1, allow_nan=False) + "\n")
    atomic_write_text(folder / layout.README, _readme(candidate, trial, exported, has_script))


def _measurements(trial: RecordedTrial) -> dict[str, Any]:
    finite = {key: float(value) for key, value in sorted(trial.metrics.items())
              if isinstance(value, int | float) and math.isfinite(value)}
    return {"campaign": trial.campaign, "device": trial.device, "trial": trial.trial,
            "objectives": trial.objectives, "constraints": trial.constraints,
            "metrics": finite, "missing": dict(sorted(trial.missing.items())),
            "measurement_quality": trial.quality
            or trial.provenance.get("measurement_quality", ""),
            "provenance": dict(sorted(trial.provenance.items()))}


def _readme(candidate: Candidate, trial: RecordedTrial, exported: ExportedGenerator,
            has_script: bool) -> str:
    metrics = trial.metrics
    measured = ", ".join(f"{name} {metrics[name]:.4g}" for name in (
        "ttft_p50_ms", "tpot_p50_ms", "decode_tokens_per_s", "perplexity_ratio")
        if isinstance(metrics.get(name), int | float))
    run = ("pip install -r requirements.txt   # the runtime only; no dse needed\n"
           "python run.py --repeat 10         # greedy tokens on the bundle's prompts, then 10 "
           "timed requests\n" if has_script else "(no run.py: see deployment.yaml's notes)\n")
    return (f"# {trial.campaign}: trial {trial.trial} on {trial.device}\n\n"
            f"A language model: {candidate.backend} {candidate.precision}, batch "
            f"{candidate.batch_size}, knobs {dict(candidate.knobs)}; model {candidate.family} "
            f"{candidate.arch}. `model/` is {exported.model_format}.\n\n"
            f"Measured on {trial.device}: {measured or 'see measurements.json'}.\n\n"
            f"Exported by `dse export` (dse {__version__}). `deployment.yaml` says how it is "
            f"deployed and what its workload is (`data/prompts.npy`, and the greedy tokens "
            f"recorded on them, `data/tokens.npy`), `measurements.json` what was measured, "
            f"`{layout.MANIFEST}` hashes every file (`sha256sum -c {layout.MANIFEST}`).\n\n"
            f"Run it:\n\n```\n{run}```\n")
