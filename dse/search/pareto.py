"""Pareto fronts over named metrics. Pure numpy: the report builds on it without torch or ray."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dse.metrics import Direction, metric


def _as_minimization(values: npt.ArrayLike, objectives: Sequence[str]) -> npt.NDArray[np.float64]:
    """Flip maximised columns so that smaller is better everywhere."""
    array = np.asarray(values, dtype=np.float64).reshape(-1, len(objectives))
    signs = np.array([-1.0 if metric(name).direction is Direction.MAXIMIZE else 1.0
                      for name in objectives])
    flipped: npt.NDArray[np.float64] = array * signs
    return flipped


def pareto_mask(values: npt.ArrayLike, objectives: Sequence[str]) -> npt.NDArray[np.bool_]:
    """True for each row not dominated by another row.

    ``values`` has one row per candidate and one column per objective, in the order of
    ``objectives``; directions come from the metrics table. Rows with a NaN are never on the front.
    Duplicates of a front point are all kept (neither dominates the other).
    """
    points = _as_minimization(values, objectives)
    valid = ~np.isnan(points).any(axis=1)
    mask = np.zeros(len(points), dtype=bool)
    candidates = np.flatnonzero(valid)
    for i in candidates:
        others = points[candidates]
        dominated = np.any(np.all(others <= points[i], axis=1) & np.any(others < points[i], axis=1))
        mask[i] = not dominated
    return mask
