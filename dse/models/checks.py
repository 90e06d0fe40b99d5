"""Checks of a search space's ``model:`` section that need the model registries or the model file:
arch parameter names and values, the factory's import, the ONNX file's input, the dataset's fit,
backends that can run the source, and metrics that need a dataset. One line per problem, naming
the file and field."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

from dse.plugins import backends_loading, dataset_problem
from dse.spec import ModelSpec, checked_values

# Metrics only a labelled dataset (or the user's evaluator) can give.
DATASET_METRICS = frozenset({"accuracy"})


def model_problems(path: Path, model: ModelSpec, *, backends: Collection[str],
                   batch_sizes: Sequence[int], metrics: Collection[str]) -> list[str]:
    """Every problem of ``model`` (from the space file ``path``) given the space's backends,
    batch sizes and the metrics its objectives and constraints name."""
    if model.family is not None:
        problems = _family_problems(path, model)
    elif model.factory is not None:
        problems = _factory_problems(path, model, tuple(batch_sizes))
    elif model.llm is not None:
        problems = _llm_problems(path, model, backends)
    else:
        problems = _onnx_problems(path, model, backends, batch_sizes)
    needs = sorted(DATASET_METRICS & set(metrics))
    if needs and model.evaluator is None and _dataset(model) is None:
        problems.append(f"{path}: model: objectives/constraints name {', '.join(needs)}, which "
                        f"needs a dataset (model.dataset: digits | sequences) or your evaluator "
                        f"(model.evaluator: module:function)")
    return problems


def _llm_problems(path: Path, model: ModelSpec, backends: Collection[str]) -> list[str]:
    """A config model's arch values, each checked alone and with the base config (torch-free);
    a backend that runs no generative model."""
    from dse.models.llm import checked_arch
    from dse.plugins import BACKEND_DECLARATIONS

    assert model.llm is not None
    problems = [f"{path}: deployment.backends.{name}: runs no generative language model; those "
                f"that do: {', '.join(n for n, d in BACKEND_DECLARATIONS.items() if d.generation)}"
                for name in backends
                if name in BACKEND_DECLARATIONS and BACKEND_DECLARATIONS[name].generation is None]
    settings = {"kind": model.llm.kind, "base": dict(model.llm.base)}
    for key, spec in model.arch.items():
        for value in checked_values(spec):
            try:
                checked_arch(settings, {key: value})
            except ValueError as exc:
                problems.append(f"{path}: model.arch.{key}: {exc}")
                break
    return problems


def _dataset(model: ModelSpec) -> str | None:
    if model.dataset is not None or model.family is None:
        return model.dataset
    from dse.models import get_family

    return get_family(model.family).dataset


def _family_problems(path: Path, model: ModelSpec) -> list[str]:
    from dse.models import get_family

    assert model.family is not None
    family = get_family(model.family)
    problems = []
    if model.dataset is not None and model.dataset != family.dataset:
        problems.append(f"{path}: model.dataset: family {family.name!r} trains on "
                        f"{family.dataset!r}, not {model.dataset!r}")
    for key, spec in model.arch.items():
        where = f"{path}: model.arch.{key}"
        if key not in family.arch_params:
            problems.append(f"{where}: unknown parameter of family {family.name!r}; allowed: "
                            f"{', '.join(sorted(family.arch_params))}")
            continue
        for value in checked_values(spec):
            try:
                family.validate({key: value})
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
    return problems


def _factory_problems(path: Path, model: ModelSpec, batch_sizes: tuple[int, ...]) -> list[str]:
    from dse.models.output_check import known_to_fit, quiet_libraries
    from dse.models.sources import load_function

    assert model.factory is not None
    try:
        # A factory whose model passed the output check with these very sources resolved then;
        # importing it again would import torch (seconds) for nothing.
        if not known_to_fit(path, model, batch_sizes):
            with quiet_libraries():  # what its libraries log on import is not the spec's problem
                load_function(model.factory)
    except ValueError as exc:
        return [f"{path}: model.factory: {exc}"]
    if model.dataset is not None and model.input_shape is not None:
        return _fit(path, model.dataset, tuple(model.input_shape))
    return []


def _onnx_problems(path: Path, model: ModelSpec, backends: Collection[str],
                   batch_sizes: Sequence[int]) -> list[str]:
    from dse.models.onnx_file import onnx_input

    assert model.onnx is not None
    # Backends that deploy an ONNX file; the torch backends need the module itself.
    onnx_backends = backends_loading("onnx")
    problems = [f"{path}: deployment.backends.{name}: an ONNX model runs on the ONNX backends "
                f"only ({', '.join(sorted(onnx_backends))})"
                for name in backends if name not in onnx_backends]
    try:
        info = onnx_input(Path(model.onnx))
    except ValueError as exc:
        return [*problems, f"{path}: model.onnx: {exc}"]
    if info.fixed_batch is not None:
        wrong = [b for b in batch_sizes if b != info.fixed_batch]
        if wrong:
            problems.append(f"{path}: deployment.batch_sizes: the ONNX file fixes the batch at "
                            f"{info.fixed_batch}; {wrong} cannot run ({model.onnx}: input "
                            f"{info.name!r} axis 0 is {info.fixed_batch}; export it with a "
                            f"dynamic batch axis to search batch sizes)")
    if model.dataset is not None:
        problems.extend(_fit(path, model.dataset, info.sample_shape))
    return problems


def _fit(path: Path, dataset: str, sample_shape: tuple[int, ...]) -> list[str]:
    problem = dataset_problem(dataset, sample_shape)
    return [] if problem is None else [f"{path}: model.dataset: {problem}"]
