"""The device side of ``dse export`` and ``dse verify`` for a language model: the deployed
runner's model folder, the workload's prompts and the greedy tokens on them, taken apart into a
bundle's parts; and a bundle's model folder deployed again, its tokens compared with those
recorded."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dse.artifacts import device_fingerprint
from dse.backends import get_backend
from dse.core import BuildError, Candidate
from dse.deploy import (
    ExportedGenerator,
    GenerationVerifyRequest,
    folder_files,
    write_folder_files,
)
from dse.models import load_language_model
from dse.trial.bundle_jobs import plain_strings, versions_of
from dse.trial.llm_model import PreparedGenerator, candidate_workload

if TYPE_CHECKING:
    from dse.measure import RunToRun
    from dse.spec import HardwareProfile

# What each runtime's model folder is, for the bundle's README and deployment.yaml.
_FORMATS = {"torch": "a Hugging Face folder of the loaded weights at the compute precision "
                     "(run.py quantizes them as the knobs say)",
            "openvino": "OpenVINO's stateful IR (openvino_model.xml and .bin), weights as "
                        "compressed",
            "onnxruntime_genai": "ONNX Runtime GenAI's model-builder folder (genai_config.json, "
                                 "model.onnx and its weights, tokenizer)"}


def export_generator(candidate: Candidate, prepared: PreparedGenerator,
                     run_to_run: RunToRun | None) -> ExportedGenerator:
    """The bundle's parts of a prepared (deployed and scored) language model: its runtime's
    model folder, the workload's prompts with the greedy tokens the runner gives on them now,
    and the device's run-to-run calibration. BuildError when the backend cannot export one."""
    backend = get_backend(candidate.backend)
    runner, workload = prepared.runner, prepared.workload
    # The model as the trial loaded it (kept in this process: no second load).
    model = load_language_model(candidate.model.get("llm", {}), candidate.arch)
    with tempfile.TemporaryDirectory(prefix="dse-export-llm-") as work:
        folder = Path(work)
        settings = backend.generation_bundle(runner, model, folder)
        files = folder_files(folder)
    tokens = runner.generate(prepared.prompts, workload.output_tokens)
    declared = backend.declaration
    wanted = declared.libraries + (declared.generation_standalone.requirements
                                   if declared.generation_standalone is not None else ())
    described = plain_strings(runner.describe())
    return ExportedGenerator(
        model_files=files, model_format=_FORMATS.get(candidate.backend, "the runtime's model"),
        settings=settings, prompts=np.asarray(prepared.prompts, dtype=np.int64),
        tokens=np.asarray(tokens, dtype=np.int64), output_tokens=workload.output_tokens,
        threads=int(described.get("threads", "1")), runtime=described,
        fingerprint=plain_strings(device_fingerprint()), versions=versions_of(wanted),
        run_to_run=run_to_run)


def verify_prepared_generator(request: GenerationVerifyRequest, profile: HardwareProfile,
                              scratch_root: Path) -> tuple[PreparedGenerator, Path]:
    """The bundle's language model deployed on this device: its model folder written under
    ``scratch_root`` (the folder returned, for the caller to remove), compiled with the
    candidate's knobs and the settings recorded at export, bound to the bundle's prompts.
    BuildError when it cannot be."""
    candidate = request.candidate
    backend = get_backend(candidate.backend)
    scratch_root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="verify-llm-", dir=scratch_root))
    try:
        write_folder_files(folder, request.model_files)
        runner = backend.bundled_generator(folder, request.settings, candidate.precision,
                                           candidate.knobs, profile, candidate.batch_size)
        return PreparedGenerator(runner, candidate_workload(candidate),
                                 np.asarray(request.prompts, dtype=np.int64), {}, {}), folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def token_agreement(request: GenerationVerifyRequest, prepared: PreparedGenerator) -> float:
    """The share of the greedy tokens the deployed model gives now on the bundle's prompts that
    are the ones recorded at export; BuildError when their shapes differ."""
    tokens = prepared.runner.generate(prepared.prompts, prepared.workload.output_tokens)
    if tokens.shape != request.tokens.shape:
        raise BuildError(f"the deployed model gives tokens of shape {tokens.shape}; the bundle "
                         f"recorded {request.tokens.shape}")
    return float(np.mean(tokens == request.tokens))
