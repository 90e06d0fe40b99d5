"""A family's or factory's torch module as a candidate's model: its zero-cost proxies scored on
the untrained network and the space's proxy constraints checked first, then trained (or loaded)
on its dataset and built into the candidate's artifact."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dse.accuracy import (
    PROXIES,
    initial_module,
    load_split,
    proxy_scores,
    reference_logits,
    synthetic_inputs,
    train_or_load,
)
from dse.artifacts import ArtifactCache, build_artifact, fp32_onnx
from dse.core import is_measured
from dse.models import FACTORY_PREFIX, model_source, source_dataset
from dse.trial.candidate_model import (
    CALIBRATION_IMAGES,
    ArchFailure,
    CandidateModel,
    finite_reference,
)

if TYPE_CHECKING:
    from dse.core import Candidate
    from dse.models import ModelSource
    from dse.spec import TrainingSpec

# As the proxies' benchmark scored them (benchmarks/proxy_correlation.py).
PROXY_SAMPLES = 64


def torch_model(candidate: Candidate, training: TrainingSpec, cache_dir: Path,
                 cache: ArtifactCache) -> CandidateModel:
    """A family's or factory's module: trained on its dataset (or as built, without one)."""
    dataset = source_dataset(candidate.family, candidate.model)
    # A user's factory may fail in any way, in building or in training (a forward that does not
    # fit the data): each is that candidate's failure. A built-in family's bugs are not caught.
    expected = (KeyError, ValueError, RuntimeError, TypeError) if candidate.family.startswith(
        FACTORY_PREFIX) else (KeyError, ValueError)
    # Each is the architecture's failure (ArchFailure): no backend has touched the model yet. The
    # reason leaves the arch out (the trial's parameters hold it), so one cause reads alike
    # across architectures.
    try:
        source = model_source(candidate.family, candidate.model)
        proxies, proxy_missing = _proxies(source, candidate, dataset, training.seed)
        trained = train_or_load(source, candidate.arch, training, cache_dir / "trained", dataset)
    except expected as exc:
        cause = " ".join(str(exc.args[0] if exc.args else exc).split())
        raise ArchFailure(f"cannot build {candidate.family!r}: {cause}") from exc
    if dataset is None:
        eval_x = synthetic_inputs(trained.input_shape, training.seed)
        calibration, eval_y = eval_x, None
    else:
        split = load_split(dataset, training.seed, trained.input_shape)
        eval_x, eval_y, calibration = split.x_test, split.y_test, split.x_train
    calibration = calibration[:CALIBRATION_IMAGES]
    # Before building: a backend may cast or rewrite the module it is handed, and a model that is
    # already non-finite in fp32 is not worth lowering (int8 calibration would fail obscurely).
    reference = finite_reference(reference_logits(trained.module, eval_x))
    artifact, build_seconds = build_artifact(candidate, trained, cache, calibration)
    # A torch artifact has no ONNX graph of its own (a converted one has its own format): its
    # statistics come from the fp32 export (cached, shared with the ONNX backends, and not
    # charged to this candidate's build time).
    graph = artifact.path if artifact.format == "onnx" else fp32_onnx(trained, cache)[0]
    return CandidateModel(
        artifact, build_seconds, eval_x, eval_y, reference, None, graph,
        {"params_m": sum(p.numel() for p in trained.module.parameters()) / 1e6,
         "train_seconds": trained.train_seconds, **proxies},
        {"weights_key": trained.key, "weights_cached": str(trained.cached),
         "fp32_accuracy": f"{trained.fp32_accuracy:.6f}", "dataset": dataset or "none",
         "calibration_images": str(len(calibration))}, proxy_missing)


def _proxies(source: ModelSource, candidate: Candidate, dataset: str | None,
             seed: int) -> tuple[dict[str, float], dict[str, str]]:
    """Zero-cost proxies of the untrained network (the very one training starts from), each as
    ``proxy_<name>``; then the space's constraints on them, checked before any training: a
    candidate that fails one is infeasible at the cost of the proxy alone."""
    names = [f"proxy_{name}" for name in PROXIES]
    if dataset is None:
        return {}, dict.fromkeys(names, "zero-cost proxies score on the dataset's training "
                                        "samples; the model has no dataset")
    arch = source.validate(candidate.arch)
    split = load_split(dataset, seed, source.input_shape_for(arch))
    module = initial_module(source, arch, seed)
    scores: dict[str, float] = {}
    missing: dict[str, str] = {}
    for name in PROXIES:
        try:
            value = proxy_scores(module, split.x_train[:PROXY_SAMPLES],
                                 split.y_train[:PROXY_SAMPLES], names=[name], seed=seed)[name]
        except ValueError as exc:  # e.g. NASWOT on a network without activation modules
            missing[f"proxy_{name}"] = str(exc)
            continue
        # -inf is synflow's and NASWOT's defined lowest score (no flow; a batch the network
        # cannot separate): a value that constraints and objectives judge like any other.
        if is_measured(f"proxy_{name}", value):
            scores[f"proxy_{name}"] = value
        else:
            missing[f"proxy_{name}"] = (f"{name} is {value} for this network (overflow or NaN "
                                        f"in its arithmetic)")
    for metric_name, op, bound in candidate.model.get("proxy_filter", []):
        score = scores.get(metric_name)
        if score is None:
            raise ArchFailure(f"screened out before training: {metric_name} is missing "
                             f"({missing.get(metric_name, 'not computed')}) and a constraint "
                             f"needs it")
        if (score < bound) if op == ">=" else (score > bound):
            proxy = PROXIES.get(metric_name.removeprefix("proxy_"))
            why = proxy.lowest_meaning if proxy is not None else ""
            shown = f"{score:.4g}" + (f" ({why})" if why and score == -np.inf else "")
            raise ArchFailure(f"screened out before training: {metric_name} = {shown} "
                             f"violates the constraint {metric_name} {op} {bound:g}")
    return scores, missing
