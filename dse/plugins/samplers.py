"""What every part of dse may ask about a sampler, declared once by the module that builds it
(:class:`SamplerDeclaration`, registered with :func:`register_sampler`): how to build it from the
experiment's ``sampler:`` settings, which of those settings it reads, and whether it needs a
discrete space. The YAML enum of ``sampler.name``, the options check and the grid check are
derived from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dse.plugins.registry import Registry


class SamplerSettings(Protocol):
    """The experiment's ``sampler:`` block as a sampler's builder reads it."""

    @property
    def name(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def startup_trials(self) -> int | None: ...
    @property
    def population_size(self) -> int | None: ...


@dataclass(frozen=True)
class SamplerDeclaration:
    """A sampler of candidates.

    Attributes:
        name: the value of ``sampler.name`` that chooses it.
        build: ``(settings, seed) -> optuna.samplers.BaseSampler`` (with ``uses_context``,
            ``(settings, seed, context)``); imports Optuna itself.
        summary: one line for the schema and listings.
        needs_steps: it enumerates the space, so every continuous range needs a ``step``.
        uses_context: ``build`` takes a third argument, the study's
            :class:`dse.search.samplers.surrogate.SamplerContext` (its device's candidate space),
            or None where the study was opened without it.
        options: the settings of the experiment's ``sampler:`` it reads beside ``name`` and
            ``seed``: any of ``startup_trials`` and ``population_size``. Setting another is an
            error at validate time, and so is a value above ``budget.trials``.
    """

    name: str
    build: Callable[..., Any]
    summary: str
    needs_steps: bool = False
    uses_context: bool = False
    options: frozenset[str] = frozenset()


SAMPLERS: Registry[SamplerDeclaration] = Registry(
    "sampler", ("dse.search.samplers.registered",), lambda declared: f"the declaration of {declared.name!r}")


def register_sampler(declaration: SamplerDeclaration) -> SamplerDeclaration:
    """Register a sampler under its name (a name given twice is refused)."""
    return SAMPLERS.register(declaration.name, declaration)


def sampler_names() -> tuple[str, ...]:
    """Every registered sampler's name, sorted."""
    return SAMPLERS.names()
