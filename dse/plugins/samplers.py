"""What every part of dse may ask about a sampler, declared once by the module that builds it
(:class:`SamplerDeclaration`, registered with :func:`register_sampler`): how to build it from the
experiment's ``sampler:`` settings, the settings of its own it takes (a pydantic model, as a
telemetry probe's ``settings_model``), and whether it needs a discrete space. The YAML enum of
``sampler.name``, the check of the ``sampler:`` block's other keys, the schema's completion of them
and the grid check are derived from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dse.plugins.registry import Registry

# The keys of an experiment's ``sampler:`` block that every sampler takes; a settings model must
# not declare them again.
_COMMON_SETTINGS = ("name", "seed")


class SamplerSettings(Protocol):
    """The experiment's ``sampler:`` block as a sampler's builder reads it."""

    @property
    def name(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def options(self) -> Any:
        """The sampler's own settings: an instance of its declaration's ``settings_model``,
        validated from the block's other keys; None for a sampler that takes none."""


@dataclass(frozen=True)
class SamplerDeclaration:
    """A sampler of candidates.

    Attributes:
        name: the value of ``sampler.name`` that chooses it.
        build: ``(settings, seed) -> optuna.samplers.BaseSampler`` (with ``uses_context``,
            ``(settings, seed, context)``); imports Optuna itself. ``settings.options`` holds
            its validated settings (see :class:`SamplerSettings`).
        summary: one line for the schema and listings.
        needs_steps: it enumerates the space, so every continuous range needs a ``step``.
        uses_context: ``build`` takes a third argument, the study's
            :class:`dse.search.samplers.surrogate.SamplerContext` (its device's candidate space),
            or None where the study was opened without it.
        settings_model: a pydantic model class (``extra="forbid"``, frozen; every field with a
            default and a ``description``, an optional ``title`` of a few words naming what it
            counts) of the settings it takes beside ``name`` and ``seed``, written as further
            keys of the experiment's ``sampler:`` block; None: it takes none. A key it does not
            declare, or a value it refuses, is an error at validate time naming the field.
        counts_trials: the settings (fields of ``settings_model``) that count trials the sampler
            spends before its search begins (a random start, a first generation): a value above
            ``budget.trials`` is refused.
    """

    name: str
    build: Callable[..., Any]
    summary: str
    needs_steps: bool = False
    uses_context: bool = False
    # A pydantic model class; typed loosely, as pydantic lives above this layer.
    settings_model: type[Any] | None = None
    counts_trials: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # Caught when the plugin registers, not when an experiment first names the sampler.
        fields = self.setting_names()
        if self.settings_model is not None and not hasattr(self.settings_model, "model_validate"):
            raise TypeError(f"sampler {self.name!r}: settings_model must be a pydantic model "
                            f"class, got {self.settings_model!r}")
        taken = sorted(set(_COMMON_SETTINGS) & set(fields))
        if taken:
            raise ValueError(f"sampler {self.name!r}: its settings_model declares "
                             f"{', '.join(taken)}, which every sampler's block already has")
        uncounted = sorted(self.counts_trials - set(fields))
        if uncounted:
            raise ValueError(f"sampler {self.name!r}: counts_trials names {', '.join(uncounted)}, "
                             f"which its settings_model does not declare")

    def setting_names(self) -> tuple[str, ...]:
        """The keys of its own settings, in the model's order (empty when it takes none)."""
        if self.settings_model is None:
            return ()
        return tuple(getattr(self.settings_model, "model_fields", {}))


SAMPLERS: Registry[SamplerDeclaration] = Registry(
    "sampler", ("dse.search.samplers.registered",), lambda declared: f"the declaration of {declared.name!r}")


def register_sampler(declaration: SamplerDeclaration) -> SamplerDeclaration:
    """Register a sampler under its name (a name given twice is refused)."""
    return SAMPLERS.register(declaration.name, declaration)


def sampler_names() -> tuple[str, ...]:
    """Every registered sampler's name, sorted."""
    return SAMPLERS.names()
