"""Where a candidate's model comes from: a built-in family, the user's torch factory, an ONNX file.

A candidate names its source in ``Candidate.family`` and carries the source's settings in
``Candidate.model`` (both plain data, so a candidate stays picklable and hashable):

========================  =========================================================
``family``                ``model`` settings
========================  =========================================================
``cnn``, ``transformer``  ``dataset`` (only when not the family's own), ``evaluator``
``factory:<mod:func>``    ``factory``, ``input_shape``, ``dataset``, ``evaluator``
``onnx:<file name>``      ``onnx`` (absolute path), ``sha256``, ``dataset``, ``evaluator``
``llm:<name>``            ``llm`` (the source), ``workload`` (:mod:`dse.models.llm`)
========================  =========================================================

:func:`candidate_source` turns a validated ``ModelSpec`` into that pair; :func:`model_source`
turns a candidate's pair back into something that builds modules (a :class:`ModelSource`), on
whichever machine measures it. The factory's module must be importable there, and the ONNX file
readable at the same path with the same content (its hash is checked).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dse.core import stable_hash
from dse.models.family import get_family
from dse.models.file_hash import file_sha256
from dse.models.llm import LLM_PREFIX, llm_candidate_source
from dse.plugins import dataset_sample_shape

if TYPE_CHECKING:
    import torch

    from dse.spec import ModelSpec

FACTORY_PREFIX = "factory:"
ONNX_PREFIX = "onnx:"


class ModelSource(Protocol):
    """What the pipeline needs of a source of torch modules (a family or a factory)."""

    @property
    def name(self) -> str: ...

    def validate(self, arch: Mapping[str, Any]) -> dict[str, Any]: ...

    def build(self, arch: Mapping[str, Any]) -> torch.nn.Module: ...

    def input_shape_for(self, arch: Mapping[str, Any]) -> tuple[int, ...]: ...


def candidate_source(model: ModelSpec, space_dir: Path | None = None) -> tuple[str, dict[str, Any]]:
    """``(Candidate.family, Candidate.model)`` for a search space's ``model:`` section; a relative
    ONNX path is taken from ``space_dir`` (a loaded space's path is already absolute).

    Raises ValueError when the ONNX file cannot be read.
    """
    settings: dict[str, Any] = {}
    if model.evaluator is not None:
        settings["evaluator"] = model.evaluator
    if model.family is not None:
        family = get_family(model.family)
        if model.dataset is not None and model.dataset != family.dataset:
            settings["dataset"] = model.dataset
        return model.family, settings
    if model.dataset is not None:
        settings["dataset"] = model.dataset
    if model.factory is not None:
        settings["factory"] = model.factory
        if model.input_shape is not None:
            settings["input_shape"] = list(model.input_shape)
        return FACTORY_PREFIX + model.factory, settings
    if model.llm is not None:  # its workload is the space's: the search adds it
        name, llm = llm_candidate_source(model.llm)
        return name, {"llm": llm}
    assert model.onnx is not None  # ModelSpec holds exactly one source
    path = ((space_dir or Path.cwd()) / model.onnx).resolve()
    settings.update(onnx=str(path), sha256=file_sha256(path))
    return ONNX_PREFIX + path.name, settings


def is_onnx_source(family: str) -> bool:
    return family.startswith(ONNX_PREFIX)


def model_source(family: str, settings: Mapping[str, Any]) -> ModelSource:
    """The builder of a candidate's modules. Raises KeyError for an unknown family and
    ValueError for a factory that cannot be imported; an ONNX source has no builder."""
    if family.startswith(FACTORY_PREFIX):
        shape = settings.get("input_shape")
        dataset = settings.get("dataset")
        return FactorySource(str(settings.get("factory", family[len(FACTORY_PREFIX):])),
                             None if shape is None else tuple(int(d) for d in shape),
                             dataset_sample_shape(None if dataset is None else str(dataset)))
    if is_onnx_source(family):
        raise ValueError(f"{family}: an ONNX model is a file, not built from torch")
    if family.startswith(LLM_PREFIX):
        raise ValueError(f"{family}: a language model is loaded by dse.models.llm, not built "
                         f"as a family")
    return get_family(family)


def source_dataset(family: str, settings: Mapping[str, Any]) -> str | None:
    """The dataset a candidate's accuracy comes from: the one set in the space, else a family's
    own; None for a factory or ONNX file without one."""
    if "dataset" in settings:
        return str(settings["dataset"])
    if family.startswith((FACTORY_PREFIX, ONNX_PREFIX, LLM_PREFIX)):
        return None
    return get_family(family).dataset


def _plain(value: object) -> object:
    # Plain Python types, so `width: 1` and a numpy int hash to one cache key.
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise ValueError(f"arch values must be numbers, strings or booleans, got {value!r}")


@dataclass(frozen=True)
class FactorySource:
    """The user's ``module:function``: called with the arch parameters as a dict, it returns a
    ``torch.nn.Module``, or ``(module, example)`` where ``example`` is an input batch (a tensor or
    array whose first axis is the batch) or one sample's shape (a tuple of ints). A bare module
    takes ``input_shape`` (the space's ``model.input_shape``), else ``dataset_shape`` (the one
    shape its dataset holds, :func:`dse.plugins.datasets.dataset_sample_shape`)."""

    factory: str
    input_shape: tuple[int, ...] | None = None
    dataset_shape: tuple[int, ...] | None = None

    @property
    def name(self) -> str:
        return FACTORY_PREFIX + self.factory

    def validate(self, arch: Mapping[str, Any]) -> dict[str, Any]:
        return {str(key): _plain(value) for key, value in arch.items()}

    def build(self, arch: Mapping[str, Any]) -> torch.nn.Module:
        module, _ = self.call(arch)
        return module

    def input_shape_for(self, arch: Mapping[str, Any]) -> tuple[int, ...]:
        if self.input_shape is not None:
            return self.input_shape
        # The dataset's shape is in the key: the same factory on another dataset may differ.
        key = stable_hash({"factory": self.factory, "arch": self.validate(arch),
                           "dataset_shape": None if self.dataset_shape is None
                           else list(self.dataset_shape)})
        if key not in _FACTORY_SHAPES:
            _, shape = self.call(arch)
            if shape is None:
                raise ValueError(f"factory {self.factory} returned only a module and its "
                                 f"dataset does not fix the sample shape: return (module, "
                                 f"example input) or set model.input_shape")
            _FACTORY_SHAPES[key] = shape
        return _FACTORY_SHAPES[key]

    def call(self, arch: Mapping[str, Any]) -> tuple[torch.nn.Module, tuple[int, ...] | None]:
        """The factory's module for ``arch`` and one sample's shape: its example input's, else
        ``input_shape`` (None when neither is given). ValueError, in one line, when the factory
        raises or returns something else than the contract says."""
        import torch

        function = load_function(self.factory)
        try:
            result = function(self.validate(arch))
        except Exception as exc:  # the user's code: its failure is this candidate's, in one line
            raise ValueError(f"factory {self.factory} failed: {type(exc).__name__}: {exc}") from exc
        module, example = result if isinstance(result, tuple) else (result, None)
        if not isinstance(module, torch.nn.Module):
            raise ValueError(f"factory {self.factory} returned {type(module).__name__}, "
                             f"not a torch.nn.Module")
        if example is None:
            return module, self.input_shape or self.dataset_shape
        if isinstance(example, (tuple, list)) and all(isinstance(d, int) for d in example):
            return module, tuple(example)
        shape = tuple(int(d) for d in getattr(example, "shape", ()))
        if len(shape) < 2:
            raise ValueError(f"factory {self.factory}: the example input must be a batch "
                             f"(batch axis first) or a sample shape tuple, got shape {shape}")
        return module, shape[1:]


# Sample shapes of factory architectures already built once in this process.
_FACTORY_SHAPES: dict[str, tuple[int, ...]] = {}


def load_function(ref: str) -> Callable[..., Any]:
    """The function ``module:function`` names; ValueError saying what is wrong."""
    from dse.core import SpecError
    from dse.spec import resolve_evaluator

    try:
        return resolve_evaluator(ref, ref)
    except SpecError as exc:
        raise ValueError("; ".join(exc.problems)) from None
