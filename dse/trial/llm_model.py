"""A generative candidate, ready to be timed: its language model loaded, deployed by its backend at
its precision, its workload's prompts, and the metrics known before timing — quality against the
fp32 reference, the greedy tokens' agreement with the reference's, weights, build cost.

The reference is the same loaded model in eager torch at fp32 on the same device: its next-token
logits on dse's held-out text and its greedy tokens for the workload's prompts, computed once per
model and workload in a worker process. A GGUF model's reference is its dequantized weights (a
4-bit Q4_1 file dequantized is what fp32 means for it).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.accuracy import heldout_ids, language_quality, prompt_ids
from dse.backends import GenerationRunner, get_backend
from dse.core import BuildError, stable_hash
from dse.measure import rss_bytes, trim_heap
from dse.models import load_language_model
from dse.spec import WorkloadSpec
from dse.trial.candidate_model import ArchFailure, one_line
from dse.trial.prepare import check_deployable

if TYPE_CHECKING:
    from dse.core import Candidate
    from dse.models import LanguageModel
    from dse.spec import HardwareProfile

#: The backend and precision the quality of every format is measured against.
REFERENCE = ("torch", "fp32")
# Characters of the first sequence's greedy answer kept in provenance.
_ANSWER_CHARS = 200


@dataclass
class PreparedGenerator:
    """A generative candidate ready to be timed: the runner, the workload and its prompts, the
    metrics known before timing (``missing``: why a metric is absent) and provenance;
    ``rss_before_runner`` is the process's resident bytes just before the runner was built."""

    runner: GenerationRunner
    workload: WorkloadSpec
    prompts: np.ndarray
    metrics: dict[str, float]
    provenance: dict[str, str]
    missing: dict[str, str] = field(default_factory=dict)
    rss_before_runner: int | None = None


def candidate_workload(candidate: Candidate) -> WorkloadSpec:
    """The workload the candidate carries (the defaults where it carries none)."""
    return WorkloadSpec.model_validate(candidate.model.get("workload", {}))


def prepare_generator(candidate: Candidate, profile: HardwareProfile,
                      cache_dir: Path | None = None) -> PreparedGenerator:
    """Load, deploy and score the generative ``candidate`` on the device ``profile``.

    ``cache_dir``: where a runtime that converts the model keeps what it made (the campaign's
    build cache). Raises BuildError (the candidate is infeasible) for what the capability table, the profile
    or the backend refuses, and for a runner that fails on its prompts or gives non-finite
    logits; :class:`ArchFailure` when the model itself cannot be loaded or built.
    """
    backend = check_deployable(candidate, profile)
    workload = candidate_workload(candidate)
    settings = candidate.model.get("llm", {})
    try:
        model = load_language_model(settings, candidate.arch)
    except ValueError as exc:
        raise ArchFailure(f"cannot build {candidate.family!r}: {exc}") from exc
    batch = candidate.batch_size
    try:
        prompts = prompt_ids(model.tokenizer, model.vocab_size, workload.prompts, batch,
                             workload.prompt_tokens, int(settings.get("seed", 0)))
    except ValueError as exc:
        raise BuildError(str(exc)) from exc
    scored = heldout_ids(model.tokenizer, model.vocab_size, workload.quality_tokens,
                         int(settings.get("seed", 0)))
    reference = _reference(model, candidate, profile, prompts, scored, workload.output_tokens)

    backend.start_runtime(profile)
    trim_heap()
    rss_before = rss_bytes()
    start = time.perf_counter()
    runner = backend.compile_generator(model, candidate.precision, candidate.knobs, profile,
                                       batch, cache_dir=cache_dir)
    deploy_seconds = time.perf_counter() - start
    try:
        start = time.perf_counter()
        tokens = runner.generate(prompts, workload.output_tokens)
        first_request_ms = (time.perf_counter() - start) * 1e3
        quality = language_quality(runner.logits(scored), reference.logits, scored)
    except ValueError as exc:  # logits that are not finite
        runner.close()
        raise BuildError(f"{candidate.backend} {candidate.precision}: {exc} on dse's held-out "
                         f"text while the fp32 reference's are finite: this format breaks the "
                         f"model") from exc
    except Exception as exc:  # the runtime refuses the model at run time
        runner.close()
        raise BuildError(f"the {candidate.backend} generator failed on the workload's prompts: "
                         f"{type(exc).__name__}: {one_line(exc)}") from exc
    metrics: dict[str, float] = {
        **quality,
        "greedy_match": float(np.mean(tokens == reference.tokens)),
        "params_m": model.parameters / 1e6,
        "build_seconds": model.load_seconds + deploy_seconds,
        "first_call_ms": first_request_ms,
    }
    missing = {"model_size_mb": "a language model is deployed from its loaded weights, not "
                                "from a file of its own (weight_mb is their size as deployed)"}
    if runner.weights_bytes is not None:
        metrics["weight_mb"] = runner.weights_bytes / 1e6
    else:
        missing["weight_mb"] = f"{candidate.backend} does not say the size of its weights"
    if runner.compile_seconds is not None:
        metrics["compile_seconds"] = runner.compile_seconds
    provenance = runner.describe()
    provenance.update({
        "arch_id": candidate.arch_id, "llm_source": model.source, "weights_key": model.key,
        "weights_loaded_seconds": f"{model.load_seconds:.3f}",
        "prompts": workload.prompts, "prompt_tokens": str(workload.prompt_tokens),
        "output_tokens": str(workload.output_tokens),
        "quality_tokens": str(scored.shape[1]),
        "quality_reference": f"{REFERENCE[0]} {REFERENCE[1]} on {profile.kind} "
                             f"(the loaded weights: {model.source})"})
    if model.tokenizer is not None:
        answer = model.tokenizer.decode(tokens[0].tolist(), skip_special_tokens=True)
        provenance["greedy_answer"] = " ".join(answer.split())[:_ANSWER_CHARS]
    return PreparedGenerator(runner, workload, prompts, metrics, provenance, missing, rss_before)


@dataclass(frozen=True)
class _Reference:
    logits: np.ndarray
    tokens: np.ndarray


def _reference(model: LanguageModel, candidate: Candidate, profile: HardwareProfile,
               prompts: np.ndarray, scored: np.ndarray, output_tokens: int) -> _Reference:
    """The fp32 reference's logits on ``scored`` and greedy tokens for ``prompts`` (kept for the
    next candidates of the same model and workload)."""
    key = stable_hash({"weights": model.key, "device": profile.kind,
                       "prompts": prompts.tolist(), "scored": scored.tolist(),
                       "output_tokens": output_tokens})
    kept = _REFERENCES.get(key)
    if kept is not None:
        return kept
    threads: dict[str, Any] = {}
    if "num_threads" in candidate.knobs and candidate.backend == REFERENCE[0]:
        threads["num_threads"] = candidate.knobs["num_threads"]
    try:
        with get_backend(REFERENCE[0]).compile_generator(
                model, REFERENCE[1], threads, profile, len(prompts)) as runner:
            reference = _Reference(runner.logits(scored),
                                   runner.generate(prompts, output_tokens))
    except Exception as exc:  # the model itself fails in fp32: its failure, whatever the format
        raise ArchFailure(f"the fp32 reference of {candidate.family!r} failed: "
                          f"{type(exc).__name__}: {one_line(exc)}") from exc
    if not np.isfinite(reference.logits).all():
        raise ArchFailure("the model's own fp32 logits are not finite on dse's held-out text")
    _REFERENCES[key] = reference
    while len(_REFERENCES) > 2:
        _REFERENCES.popitem(last=False)
    return reference


_REFERENCES: OrderedDict[str, _Reference] = OrderedDict()
