"""The datasets accuracy is trained and evaluated on, by name (:data:`DATASETS`), each declared
once by its own module (:class:`DatasetDeclaration`, registered with :func:`register_dataset`):
dse's own in ``dse/accuracy/``, others from ``$DSE_PLUGINS``. The YAML enum of dataset names and
the model-to-dataset shape check are derived from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dse.plugins.registry import Registry


@dataclass(frozen=True)
class DatasetDeclaration:
    """A dataset of labelled samples for short training and accuracy.

    Attributes:
        name: the name search spaces use (``model.dataset``) and families declare.
        problem: ``sample_shape -> why the dataset cannot feed samples of that shape`` (None
            when it can); cheap, no data loaded.
        load: ``(seed, sample_shape) -> split`` with ``x_train``, ``y_train``, ``x_test``,
            ``y_test`` (float32 samples, int64 classes); the same seed gives the same split.
        summary: one line for listings.
        classes: how many classes its labels hold (a model's logits: one per class); None when
            not declared, and then counted from the labels of a loaded split.
        sample_shape: the one shape of sample it holds, when it holds one (digits: 1x8x8): a
            factory that returns a bare module, with no ``model.input_shape``, is fed that. None
            when it holds several (sequences of any length).
    """

    name: str
    problem: Callable[[tuple[int, ...]], str | None]
    load: Callable[[int, tuple[int, ...]], Any]
    summary: str = ""
    classes: int | None = None
    sample_shape: tuple[int, ...] | None = None


DATASETS: Registry[DatasetDeclaration] = Registry(
    "dataset", ("dse.accuracy",), lambda declared: f"the declaration of {declared.name!r}")


def register_dataset(declaration: DatasetDeclaration) -> DatasetDeclaration:
    """Register a dataset under its name (a name given twice is refused)."""
    return DATASETS.register(declaration.name, declaration)


def dataset_problem(name: str, sample_shape: tuple[int, ...]) -> str | None:
    """Why dataset ``name`` cannot feed samples of ``sample_shape`` (an unknown name included);
    None when it can."""
    declared = DATASETS.get(name)
    if declared is None:
        return f"unknown dataset {name!r}; known: {', '.join(DATASETS.names())}"
    return declared.problem(tuple(sample_shape))


def dataset_sample_shape(name: str | None) -> tuple[int, ...] | None:
    """The one sample shape dataset ``name`` holds (:attr:`DatasetDeclaration.sample_shape`);
    None without a dataset, for an unknown one, or for one that holds several shapes."""
    declared = None if name is None else DATASETS.get(name)
    return None if declared is None else declared.sample_shape


def dataset_names() -> tuple[str, ...]:
    """Every registered dataset's name, sorted."""
    return DATASETS.names()
