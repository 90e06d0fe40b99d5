"""Model families: the :class:`ModelFamily` interface, and :func:`register_family`, which puts a
family into the registry of :mod:`dse.plugins.families` (read by the YAML checks below this layer)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from dse.plugins import FAMILIES as FAMILIES

if TYPE_CHECKING:
    import torch


class ModelFamily(ABC):
    """An architecture family: turns a mapping of arch parameters into a ``torch.nn.Module``.

    Life cycle: a subclass is registered once, at import, with :func:`register_family`, which keeps
    one instance in :data:`FAMILIES`. :meth:`validate` is cheap and imports no torch, so a bad
    architecture is rejected before any heavy work; :meth:`build` then returns a fresh, randomly
    initialised module (seed the torch RNG first for a reproducible one) in training mode.

    Class attributes:
        name: the name search spaces use (``model.family``).
        arch_params: the arch parameter names a search space may use.
        input_shape: one sample's shape at the default architecture: (channels, height, width)
            for images, (sequence length, features) for sequences. :meth:`input_shape_for` gives
            it for a given architecture, where an arch parameter sets it.
        num_classes: length of the logits vector.
        dataset: the name of the dataset (in :mod:`dse.accuracy.datasets`) its accuracy is trained
            and evaluated on.
    """

    name: ClassVar[str]
    arch_params: ClassVar[frozenset[str]]
    input_shape: ClassVar[tuple[int, ...]]
    num_classes: ClassVar[int]
    dataset: ClassVar[str] = "digits"

    def input_shape_for(self, arch: Mapping[str, Any]) -> tuple[int, ...]:
        """One sample's shape for ``arch`` (the sequence family's ``seq_len`` sets it)."""
        return self.input_shape

    @abstractmethod
    def validate(self, arch: Mapping[str, Any]) -> dict[str, Any]:
        """The full architecture: defaults filled in, values as plain Python types (so equal
        architectures hash alike). Raises ValueError naming each bad value."""

    @abstractmethod
    def build(self, arch: Mapping[str, Any]) -> torch.nn.Module:
        """A new module for ``arch``; raises ValueError when :meth:`validate` would."""

    def device_problem(self, arch: Mapping[str, Any], device_kind: str) -> str | None:
        """Why ``arch`` (valid) cannot run on a ``device_kind`` device (a kernel that device has
        none of), in one line; None when it can. Cheap and torch-free: ``dse validate`` asks it
        for each arch value and device of an experiment, and the worker before any training."""
        return None


_F = TypeVar("_F", bound=type[ModelFamily])


def register_family(cls: _F) -> _F:
    """Class decorator: register one instance of ``cls`` under ``cls.name`` (a name given twice
    is refused)."""
    FAMILIES.register(cls.name, cls())
    return cls


def get_family(name: str) -> ModelFamily:
    """The registered family ``name``; raises KeyError listing the known families."""
    family: ModelFamily = FAMILIES[name]
    return family
