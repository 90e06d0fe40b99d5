"""The candidates of one device profile's search as plain parameter dicts, without Optuna: drawn
at random or, for a finite space of modest size, listed in full.

A model-based sampler ranks candidates it has not measured (:mod:`dse.search.samplers.surrogate`);
it needs the space's valid parameter combinations, conditional branches included (a backend's
precision and knobs exist only with that backend). Both come from running
:func:`dse.search.space.suggest_candidate` — the one definition of what a trial may propose —
with a suggester that draws from a random generator or walks every choice in turn.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna.distributions as od

from dse.search.space import device_options, suggest_candidate
from dse.spec import HardwareProfile, SearchSpace

Params = dict[str, Any]

#: Spaces of at most this many combinations are listed: scored in full by the surrogate sampler,
#: counted by :func:`space_counter`.
LISTING_LIMIT = 20_000


def params_key(params: Mapping[str, Any]) -> str:
    """One string per distinct parameter combination (the order of the names does not matter)."""
    return json.dumps(dict(params), sort_keys=True, default=str)


class _Recorder:
    """A Suggester that records what was asked: each parameter's value and distribution."""

    def __init__(self, choose: Callable[[str, od.BaseDistribution], Any]) -> None:
        self.choose = choose
        self.params: Params = {}
        self.distributions: dict[str, od.BaseDistribution] = {}

    def _ask(self, name: str, distribution: od.BaseDistribution) -> Any:
        if name not in self.params:
            self.params[name] = self.choose(name, distribution)
            self.distributions[name] = distribution
        return self.params[name]

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        return self._ask(name, od.CategoricalDistribution(list(choices)))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int:
        return int(self._ask(name, od.IntDistribution(low, high, log=log, step=step)))

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        return float(self._ask(name, od.FloatDistribution(low, high, log=log, step=step)))


def option_count(distribution: od.BaseDistribution) -> int | None:
    """How many values ``distribution`` holds; None for a continuous range."""
    if isinstance(distribution, od.CategoricalDistribution):
        return len(distribution.choices)
    if isinstance(distribution, od.IntDistribution):
        return (distribution.high - distribution.low) // distribution.step + 1
    if isinstance(distribution, od.FloatDistribution) and distribution.step is not None:
        return math.floor((distribution.high - distribution.low) / distribution.step + 1e-9) + 1
    return None


def option(distribution: od.BaseDistribution, index: int) -> Any:
    """The ``index``-th value of a discrete distribution."""
    if isinstance(distribution, od.CategoricalDistribution):
        return distribution.choices[index]
    if isinstance(distribution, od.IntDistribution):
        return distribution.low + index * distribution.step
    assert isinstance(distribution, od.FloatDistribution) and distribution.step is not None
    return distribution.low + index * distribution.step


def draw_value(rng: np.random.Generator, distribution: od.BaseDistribution) -> Any:
    """A value of ``distribution`` drawn uniformly: each of a discrete one's values alike, a
    range uniformly (log-uniformly for a log range, then rounded to its step)."""
    count = option_count(distribution)
    if count is not None and not getattr(distribution, "log", False):  # each value alike
        return option(distribution, int(rng.integers(count)))
    assert isinstance(distribution, od.IntDistribution | od.FloatDistribution)
    low, high = float(distribution.low), float(distribution.high)
    value = (math.exp(rng.uniform(math.log(low), math.log(high))) if distribution.log
             else rng.uniform(low, high))
    if isinstance(distribution, od.IntDistribution):
        step = distribution.step
        return int(min(distribution.high, distribution.low + round((value - low) / step) * step))
    if distribution.step is not None and count is not None:
        return option(distribution, min(count - 1, round((value - low) / distribution.step)))
    return value


def _holds(distribution: od.BaseDistribution, value: Any) -> bool:
    try:
        return bool(distribution._contains(distribution.to_internal_repr(value)))
    except (ValueError, TypeError):
        return False


class _Exhausted(Exception):
    """More combinations than the listing's limit."""


@dataclass
class CandidateSpace:
    """The parameter combinations one device profile's study may propose.

    ``capabilities``: as :func:`dse.search.space.suggest_candidate` takes it (false where an
    evaluator or a replay table measures, which says itself what exists).
    """

    space: SearchSpace
    profile: HardwareProfile
    capabilities: bool = True
    _listing: list[Params] | None = field(default=None, init=False, repr=False)
    _listed: bool = field(default=False, init=False, repr=False)
    _options: dict[str, list[str]] | None = field(default=None, init=False, repr=False)
    distributions: dict[str, od.BaseDistribution] = field(default_factory=dict, init=False,
                                                          repr=False)

    def _run(self, recorder: _Recorder) -> Params:
        if self._options is None:
            self._options = device_options(self.space, self.profile,
                                           capabilities=self.capabilities)
        suggest_candidate(recorder, self.space, self.profile, capabilities=self.capabilities,
                          options=self._options)
        for name, distribution in recorder.distributions.items():
            self.distributions.setdefault(name, distribution)
        return recorder.params

    def draw(self, rng: np.random.Generator) -> Params:
        """One combination, each parameter drawn uniformly (as Optuna's random sampler does)."""
        return self._run(_Recorder(lambda _, distribution: draw_value(rng, distribution)))

    def neighbour(self, base: Mapping[str, Any], rng: np.random.Generator) -> Params:
        """``base`` with one of its parameters drawn anew (another value where it has one);
        parameters that exist only under the new value (a new backend's knobs) are drawn too."""
        target = list(base)[int(rng.integers(len(base)))] if base else ""

        def choose(name: str, distribution: od.BaseDistribution) -> Any:
            if name != target and name in base and _holds(distribution, base[name]):
                return base[name]
            for _ in range(8):  # another value, where the distribution has one
                value = draw_value(rng, distribution)
                if name != target or value != base.get(name):
                    return value
            return value

        return self._run(_Recorder(choose))

    def listing(self, limit: int) -> list[Params] | None:
        """Every combination, once each, when the space is discrete and holds at most ``limit``
        of them; None otherwise. Computed once."""
        if not self._listed:
            self._listed = True
            try:
                self._listing = self._walk(limit)
            except _Exhausted:
                self._listing = None
        return self._listing

    def _walk(self, limit: int) -> list[Params]:
        # Define-by-run spaces are walked like an odometer over the sequence of decisions one
        # run asks: the last decision with another value left advances, later ones restart.
        found: list[Params] = []
        path: list[int] = []
        while True:
            walker = _PathWalker(path)
            found.append(self._run(_Recorder(walker.choose)))
            if len(found) > limit:
                raise _Exhausted
            counts = walker.counts
            taken = path + [0] * (len(counts) - len(path))
            position = next((i for i in reversed(range(len(counts)))
                             if taken[i] + 1 < counts[i]), None)
            if position is None:
                return found
            path = [*taken[:position], taken[position] + 1]


class _PathWalker:
    """Chooses, at the n-th decision of a run, the n-th index of ``path`` (0 past its end), and
    counts the values each decision had."""

    def __init__(self, path: list[int]) -> None:
        self.path = path
        self.counts: list[int] = []

    def choose(self, _: str, distribution: od.BaseDistribution) -> Any:
        count = option_count(distribution)
        if count is None:
            raise _Exhausted  # a continuous range: no listing
        position = len(self.counts)
        self.counts.append(count)
        return option(distribution, self.path[position] if position < len(self.path) else 0)




def space_counter(space: SearchSpace, profile: HardwareProfile, *,
                  capabilities: bool = True) -> Callable[[], int | None]:
    """A function that counts the distinct candidates of ``profile``'s search (None: continuous,
    or more than ``LISTING_LIMIT``); listing costs ~0.2 s for 7,000 candidates, so the search loop
    calls it only once a repeat suggests a small space."""

    def count() -> int | None:
        listing = CandidateSpace(space, profile, capabilities).listing(LISTING_LIMIT)
        return None if listing is None else len(listing)

    return count
