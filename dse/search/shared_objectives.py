"""Objectives whose value is already known before a candidate is measured.

A model's accuracy does not depend on how it is deployed: every batch size, backend and knob
setting of one architecture at one precision gives the same accuracy, and a deterministic
accuracy is the same on every device. The surrogate sampler (:mod:`dse.search.surrogate_sampler`)
uses such values as they are instead of predicting them.

Nothing is assumed from a metric's name: another device's value of an objective is used here when
the measurements show it shared — the *model groups* (the same parameters once the deployment's are
set aside: backend, batch size, knobs) both devices measured gave equal values (at least
``MIN_OVERLAP`` of them, none differing), and within each device no group measured more than once
gave two values. One differing value and the objective is predicted like any other.

Within one device the same rule would let a model group's first measurement fix its value for the
group's other deployments. It is not used: on the recorded tables (with a random start of 5) it
saved candidates on one (the transformer cut, median 29 -> 26 to 99 %) but on another it took
away the doubt that led the search to an outlier worth more than 1 % of the hypervolume (a
batch-8 throughput twice the next best, in a low-accuracy group), and 30 % of the seeds then
missed 99 % within the budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from dse.dominance import FloatArray
from dse.search.candidate_space import Params, params_key

#: Model groups two devices must share, with equal values, before one device's values serve the
#: other's.
MIN_OVERLAP = 2
#: Relative tolerance of "the same value" (a table stores what was measured; floats round-trip).
RTOL = 1e-9

_DEPLOYMENT = ("backend", "batch_size")


def model_group(params: Params, backends: Iterable[str]) -> str:
    """The key of the parameters that decide the model: architecture, precision and free
    parameters; the backend, batch size and each backend's knobs (``<backend>.<knob>``) left
    out. ``precision.<backend>`` counts as one precision whatever the backend."""
    prefixes = set(backends)
    kept = {("precision" if name.startswith("precision.") else name): value
            for name, value in params.items()
            if name not in _DEPLOYMENT and name.split(".", 1)[0] not in prefixes}
    return params_key(kept)


@dataclass(frozen=True)
class _Groups:
    """One device's measured values per model group, and which objectives never took two values
    within a group."""

    values: dict[str, FloatArray]  # model group -> objective values (its first measurement)
    constant: np.ndarray  # per objective: never two values within a group


def _groups(keys: Sequence[str], values: FloatArray) -> _Groups:
    first: dict[str, FloatArray] = {}
    constant = np.ones(values.shape[1], dtype=bool)
    for key, row in zip(keys, values, strict=True):
        if key in first:
            constant &= np.isclose(first[key], row, rtol=RTOL, atol=0.0)
        else:
            first[key] = row
    return _Groups(first, constant)


def known_values(pool: Sequence[str], own: tuple[Sequence[str], FloatArray],
                 siblings: Sequence[tuple[Sequence[str], FloatArray]] = ()
                 ) -> tuple[FloatArray, np.ndarray]:
    """Per candidate of ``pool`` (model group keys) and objective: the value already known, and
    whether it is known (a boolean mask of the same shape).

    ``own``: this device's measured candidates (model group keys, objective values);
    ``siblings``: the same for other devices (same objectives, same directions)."""
    mine = _groups(*own)
    width = own[1].shape[1]
    known = np.zeros((len(pool), width), dtype=bool)
    values = np.zeros((len(pool), width))
    sources: list[tuple[dict[str, FloatArray], np.ndarray]] = []
    for keys, theirs in siblings:
        other = _groups(keys, theirs)
        overlap = [key for key in other.values if key in mine.values]
        if len(overlap) < MIN_OVERLAP:
            continue
        equal = np.all([np.isclose(mine.values[k], other.values[k], rtol=RTOL, atol=0.0)
                        for k in overlap], axis=0)
        shared = equal & mine.constant & other.constant
        if shared.any():
            sources.append((other.values, shared))
    for source, shared in sources:
        for row, key in enumerate(pool):
            found = source.get(key)
            if found is not None:
                fill = shared & ~known[row]
                values[row, fill] = found[fill]
                known[row] |= fill
    return values, known
