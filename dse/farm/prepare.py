"""Candidate -> a compiled runner plus the metrics known before timing (accuracy, size, build cost).

The device worker calls :func:`prepare_candidate` for each trial, then times the runner. Everything
that can rule a candidate out is checked first, cheapest first: capability table, device profile,
knobs, arch; only then are weights trained (or loaded) and the artifact built.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dse.backends import Runner, get_backend, supports_device
from dse.build import ArtifactCache, build_artifact, build_file_artifact
from dse.build.artifact import fp32_onnx
from dse.exceptions import BuildError
from dse.measure.footprint import rss_bytes, trim_heap
from dse.metrics import is_measured
from dse.models.sources import FACTORY_PREFIX, is_onnx_source, load_function, model_source, source_dataset
from dse.quality import (
    PROXIES,
    fidelity_metrics,
    initial_module,
    predict_batches,
    proxy_scores,
    reference_logits,
    train_or_load,
)
from dse.quality.datasets import load_split, synthetic_inputs
from dse.quality.fidelity import non_finite
from dse.quality.proxies import LOWEST_SCORE_MEANING
from dse.quality.user_evaluator import DeployedModel, run_user_evaluator

if TYPE_CHECKING:
    from dse.backends import Backend
    from dse.build import Artifact
    from dse.candidate import Candidate
    from dse.models.sources import ModelSource
    from dse.spec import HardwareProfile, TrainingSpec

CALIBRATION_IMAGES = 256
# As the proxies' benchmark scored them (benchmarks/proxy_correlation.py).
PROXY_SAMPLES = 64


@dataclass
class PreparedCandidate:
    """A candidate ready to be timed.

    ``example`` is one input batch of the candidate's batch size, drawn from the evaluation
    inputs. ``metrics`` holds ``accuracy`` (of the deployed runner itself, on the held-out split:
    an int8 candidate reports what int8 computes), fidelity against fp32, ``params_m``,
    ``model_size_mb``, ``build_seconds``, ``train_seconds`` and what the user's evaluator returned;
    ``missing`` says why a metric the pipeline would give is absent (no dataset). ``provenance`` is
    the runner's description plus where its parts came from.
    """

    runner: Runner
    example: np.ndarray
    metrics: dict[str, float]
    provenance: dict[str, str]
    missing: dict[str, str] = field(default_factory=dict)
    rss_before_runner: int | None = None
    """The process's resident bytes just before the runner was built (freed heap handed back
    first), for ``memory_model_mb``."""


@dataclass
class _Model:
    """The candidate's model before deployment, and the inputs it is scored on.

    ``eval_x`` is the held-out split (``eval_y`` its labels) or, without a dataset, stand-in
    inputs (``eval_y`` None); ``reference`` holds the fp32 outputs on it, all finite.
    """

    artifact: Artifact
    build_seconds: float
    eval_x: np.ndarray
    eval_y: np.ndarray | None
    reference: np.ndarray
    fixed_batch: int | None
    graph: Path | None  # the ONNX graph its statistics are read from
    metrics: dict[str, float]
    provenance: dict[str, str]
    missing: dict[str, str] = field(default_factory=dict)


def prepare_candidate(candidate: Candidate, training: TrainingSpec, profile: HardwareProfile,
                      cache_dir: Path) -> PreparedCandidate:
    """Train or load, build, compile and score ``candidate`` for the device ``profile``.

    Weights are cached under ``cache_dir / "trained"``, artifacts under
    ``cache_dir / "artifacts"``. Raises BuildError, with the reason, for any candidate that
    cannot exist on this device or fails to build; the caller records it as infeasible. So is a
    model whose outputs on the evaluation inputs hold NaN or Inf, in its fp32 reference or as
    deployed: every metric scored from them would be meaningless.
    """
    backend = _check(candidate, profile)
    cache = ArtifactCache(cache_dir / "artifacts")
    if is_onnx_source(candidate.family):
        model = _file_model(candidate, training, cache)
    else:
        model = _torch_model(candidate, training, cache_dir, cache)
    backend.start_runtime(profile)
    # The baseline of the model's footprint: what the process holds before the runner exists.
    trim_heap()
    rss_before = rss_bytes()
    runner = backend.compile(model.artifact, candidate.knobs, profile, candidate.batch_size)
    run = runner.run if model.fixed_batch is None else _padded(runner.run, model.fixed_batch)
    try:
        # The runner's very first call (lazy initialisation, allocation), timed before anything
        # else touches it; a compile inside Backend.compile is compile_seconds, not this.
        start = time.perf_counter()
        runner.run(_example_batch(model.eval_x, candidate.batch_size))
        first_call_ms = (time.perf_counter() - start) * 1e3
        deployed = predict_batches(run, model.eval_x, candidate.batch_size)
    # The runner was built and loaded, yet fails on real inputs: the runtime rejects the model at
    # run time, which makes the candidate as infeasible as a failed build.
    except Exception as exc:
        runner.close()
        raise BuildError(f"the compiled {candidate.backend} runner failed on the test split: "
                         f"{type(exc).__name__}: {_one_line(exc)}") from exc
    problem = non_finite(deployed)
    if problem is not None:
        runner.close()
        # The fp32 reference was finite (checked before the build): this lowering's doing.
        raise BuildError(f"{_label(candidate)}: the model's outputs contain {problem} on the "
                         f"validation batch at {candidate.precision} while its fp32 reference is "
                         f"finite: {candidate.precision} on {candidate.backend} overflows or breaks "
                         f"this model")
    metrics = {
        **model.metrics,
        **fidelity_metrics(model.reference, deployed),
        "model_size_mb": model.artifact.size_bytes / 1e6,
        "build_seconds": model.build_seconds,
        "first_call_ms": first_call_ms,
    }
    missing = dict(model.missing)
    provenance = runner.describe()
    metrics.update(_graph_metrics(model, candidate.batch_size, missing, provenance))
    if model.eval_y is not None:
        metrics["accuracy"] = float(np.mean(deployed.argmax(axis=1) == model.eval_y))
    else:
        missing["accuracy"] = ("the model has no dataset (model.dataset) to score it on; "
                               "fidelity is measured on standard-normal stand-in inputs")
    if runner.compile_seconds is not None:
        metrics["compile_seconds"] = runner.compile_seconds
    evaluator = candidate.model.get("evaluator")
    if evaluator is not None:
        try:
            metrics.update(run_user_evaluator(
                load_function(evaluator), evaluator,
                DeployedModel(run, candidate.batch_size, model.artifact.input_shape,
                              candidate.to_dict())))
        except ValueError as exc:
            runner.close()
            raise BuildError(str(exc)) from exc
        missing = {k: v for k, v in missing.items() if k not in metrics}
    provenance.update(model.provenance)
    provenance.update({"arch_id": candidate.arch_id, "artifact_format": model.artifact.format,
                       "artifact_path": str(model.artifact.path or "")})
    return PreparedCandidate(runner, _example_batch(model.eval_x, candidate.batch_size), metrics,
                             provenance, missing, rss_before)


def _torch_model(candidate: Candidate, training: TrainingSpec, cache_dir: Path,
                 cache: ArtifactCache) -> _Model:
    """A family's or factory's module: trained on its dataset (or as built, without one)."""
    dataset = source_dataset(candidate.family, candidate.model)
    # A user's factory may fail in any way, in building or in training (a forward that does not
    # fit the data): each is that candidate's failure. A built-in family's bugs are not caught.
    expected = (KeyError, ValueError, RuntimeError, TypeError) if candidate.family.startswith(
        FACTORY_PREFIX) else (KeyError, ValueError)
    try:
        source = model_source(candidate.family, candidate.model)
        proxies, proxy_missing = _proxies(source, candidate, dataset, training.seed)
        trained = train_or_load(source, candidate.arch, training, cache_dir / "trained", dataset)
    except expected as exc:
        raise BuildError(f"cannot build {candidate.family!r} arch {candidate.arch}: "
                         f"{exc.args[0] if exc.args else exc}") from exc
    if dataset is None:
        eval_x = synthetic_inputs(trained.input_shape, training.seed)
        calibration, eval_y = eval_x, None
    else:
        split = load_split(dataset, training.seed, trained.input_shape)
        eval_x, eval_y, calibration = split.x_test, split.y_test, split.x_train
    calibration = calibration[:CALIBRATION_IMAGES]
    # Before building: a backend may cast or rewrite the module it is handed, and a model that is
    # already non-finite in fp32 is not worth lowering (int8 calibration would fail obscurely).
    reference = _finite_reference(candidate, reference_logits(trained.module, eval_x))
    artifact, build_seconds = build_artifact(candidate, trained, cache, calibration)
    # A torch artifact has no graph of its own: its statistics come from the fp32 export (cached,
    # shared with the ONNX backends, and not charged to this candidate's build time).
    graph = artifact.path if artifact.path is not None else fp32_onnx(trained, cache)[0]
    return _Model(
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
            raise BuildError(f"screened out before training: {metric_name} is missing "
                             f"({missing.get(metric_name, 'not computed')}) and a constraint "
                             f"needs it")
        if (score < bound) if op == ">=" else (score > bound):
            why = LOWEST_SCORE_MEANING.get(metric_name.removeprefix("proxy_"), "")
            shown = f"{score:.4g}" + (f" ({why})" if why and score == -np.inf else "")
            raise BuildError(f"screened out before training: {metric_name} = {shown} "
                             f"violates the constraint {metric_name} {op} {bound:g}")
    return scores, missing


def _file_model(candidate: Candidate, training: TrainingSpec, cache: ArtifactCache) -> _Model:
    """The user's ONNX file, deployed as it is: no training, and its fp32 outputs from ONNX
    Runtime's CPU provider are the reference."""
    from dse.models.onnx_file import onnx_input

    path = Path(str(candidate.model.get("onnx", "")))
    try:
        info = onnx_input(path)
    except ValueError as exc:
        raise BuildError(str(exc)) from exc
    if info.fixed_batch is not None and candidate.batch_size != info.fixed_batch:
        raise BuildError(f"{path.name} fixes the batch at {info.fixed_batch}; batch size "
                         f"{candidate.batch_size} cannot run (input {info.name!r}, axis 0)")
    dataset = source_dataset(candidate.family, candidate.model)
    if dataset is None:
        eval_x: np.ndarray = synthetic_inputs(info.sample_shape, training.seed)
        calibration, eval_y = eval_x, None
    else:
        try:
            split = load_split(dataset, training.seed, info.sample_shape)
        except ValueError as exc:
            raise BuildError(str(exc)) from exc
        eval_x, eval_y, calibration = split.x_test, split.y_test, split.x_train
    calibration = calibration[:CALIBRATION_IMAGES]
    reference = _finite_reference(candidate, _file_reference(
        path, eval_x, info.fixed_batch or candidate.batch_size, info.fixed_batch is not None,
        training.threads))
    artifact, build_seconds = build_file_artifact(
        candidate, path, str(candidate.model.get("sha256", "")), info.sample_shape, cache,
        calibration)
    return _Model(
        artifact, build_seconds, eval_x, eval_y, reference, info.fixed_batch, artifact.path,
        {"train_seconds": 0.0},
        {"onnx_file": str(path), "onnx_sha256": str(candidate.model.get("sha256", "")),
         "dataset": dataset or "none", "calibration_images": str(len(calibration))},
        {f"proxy_{name}": "zero-cost proxies score a torch module; an ONNX file has none"
         for name in PROXIES})


def _file_reference(path: Path, x: np.ndarray, batch: int, fixed: bool,
                    threads: int) -> np.ndarray:
    """The fp32 file's outputs on ``x`` from ONNX Runtime's CPU provider, fed ``batch`` rows at a
    time (the candidate's batch size, so a file whose graph only runs at some batch sizes fails
    as the candidate would); ``fixed``: the file fixes the batch, so a short last one is padded.

    Raises BuildError with ORT's message when it cannot load the file (an operator it has no
    kernel for) or run it (a shape its graph rejects).
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 4  # ORT's errors come back in the BuildError, not on stderr too
    where = f"the fp32 reference (onnxruntime, CPU) of {path.name}"
    # ORT's own exception types (Fail, InvalidGraph, NotImplemented...) share no base class
    # below Exception.
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise BuildError(f"{where} could not load: {type(exc).__name__}: {_one_line(exc)}") from exc
    name = session.get_inputs()[0].name

    def run(rows: np.ndarray) -> np.ndarray:
        return np.asarray(session.run(None, {name: rows})[0])

    try:
        return predict_batches(_padded(run, batch) if fixed else run, x, batch)
    except Exception as exc:
        raise BuildError(f"{where} failed at batch size {batch}: {type(exc).__name__}: "
                         f"{_one_line(exc)}") from exc


def _finite_reference(candidate: Candidate, reference: np.ndarray) -> np.ndarray:
    """``reference`` when all of it is finite; else BuildError: the model itself makes NaN or Inf
    in fp32, whatever the backend or precision (weights that are NaN, a forward that overflows)."""
    problem = non_finite(reference)
    if problem is not None:
        raise BuildError(f"{_label(candidate)}: the model's outputs contain {problem} on the "
                         f"validation batch in its own fp32 reference: the model produces them, "
                         f"whatever the backend or precision")
    return reference


def _label(candidate: Candidate) -> str:
    return f"{candidate.backend} {candidate.precision}"


def _one_line(exc: BaseException) -> str:
    """A runtime's message on one line (ORT's may span several)."""
    return " ".join(str(exc).split())


def _graph_metrics(model: _Model, batch_size: int, missing: dict[str, str],
                   provenance: dict[str, str]) -> dict[str, float]:
    """MACs, FLOPs and bytes of the model's ONNX graph at the candidate's batch size (per sample
    where that is what compares across batch sizes); missing, with why, when the graph has none.
    ``params_m`` of an ONNX file comes from here too (a family's is its torch module's)."""
    from dse.models.graph_stats import graph_stats

    names = ("macs_m", "flops_m", "weight_mb", "activation_mb", "arithmetic_intensity")
    if model.graph is None:
        missing.update(dict.fromkeys(names, "the artifact has no ONNX graph to count"))
        return {}
    try:
        stats = graph_stats(model.graph, model.fixed_batch or batch_size)
    except ValueError as exc:
        missing.update(dict.fromkeys(names, f"graph statistics failed: {exc}"))
        return {}
    if stats.unknown_ops:
        # Their work is not in the FLOP count: say so beside it rather than guess.
        provenance["flops_uncounted_ops"] = ",".join(stats.unknown_ops)
    metrics = {"macs_m": stats.macs / stats.batch_size / 1e6,
               "flops_m": stats.flops / stats.batch_size / 1e6,
               "weight_mb": stats.weight_bytes / 1e6,
               "activation_mb": stats.activation_bytes / 1e6,
               "arithmetic_intensity": stats.arithmetic_intensity}
    if "params_m" not in model.metrics:
        metrics["params_m"] = stats.params / 1e6
    return metrics


def _padded(run: Callable[[np.ndarray], np.ndarray],
            batch: int) -> Callable[[np.ndarray], np.ndarray]:
    """``run`` for a model whose file fixes the batch: a shorter last batch is padded with its
    first row, and only the real rows' outputs are returned."""
    def padded(x: np.ndarray) -> np.ndarray:
        if len(x) == batch:
            return run(x)
        filler = np.repeat(x[:1], batch - len(x), axis=0)
        return run(np.concatenate([x, filler]))[: len(x)]

    return padded


def _check(candidate: Candidate, profile: HardwareProfile) -> Backend:
    """Everything that rules the candidate out without heavy work; the backend when none does."""
    ok, reason = supports_device(candidate.backend, candidate.precision, profile.kind,
                                 profile.compute_capability)
    if not ok:
        raise BuildError(reason)
    if candidate.backend not in profile.backends:
        raise BuildError(f"device {profile.name!r} has no backend {candidate.backend!r} "
                         f"(it has {profile.backends})")
    if candidate.precision not in profile.precisions:
        raise BuildError(f"device {profile.name!r} does not support precision "
                         f"{candidate.precision!r} (it supports {profile.precisions})")
    try:
        backend = get_backend(candidate.backend)
        if not is_onnx_source(candidate.family):
            model_source(candidate.family, candidate.model).validate(candidate.arch)
    except (KeyError, ValueError) as exc:
        # str() of a KeyError is the repr of its message; the message itself reads better.
        raise BuildError(str(exc.args[0]) if exc.args else repr(exc)) from exc
    backend.check_knobs(candidate.knobs)
    return backend


def _example_batch(images: np.ndarray, batch_size: int) -> np.ndarray:
    """The first ``batch_size`` test images, cycling when the split is smaller than a batch."""
    return np.ascontiguousarray(np.take(images, np.arange(batch_size) % len(images), axis=0))
