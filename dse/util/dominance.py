"""Pareto dominance and hypervolume on plain arrays in which smaller is better in every column:
the maths under the search's fronts (:mod:`dse.search.pareto`, which turns metric directions into
this form), the results tables and the device-side screening verdict (:mod:`dse.trial.screening`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
#: Verdicts that replace the comparison of two rows on some columns (a paired duel's order):
#: ``(i, j)`` -> per column -1 (row ``i`` is better), +1 (row ``j`` is), 0 (neither: equal
#: there) or NaN (compare the rows' values as usual).
Overrides = dict[tuple[int, int], FloatArray]


def dominates(point: Sequence[float], other: Sequence[float]) -> bool:
    """``point`` at least as small as ``other`` in every column and smaller in one."""
    pairs = list(zip(point, other, strict=True))
    return all(a <= b for a, b in pairs) and any(a < b for a, b in pairs)


def undominated(points: FloatArray, pessimistic: FloatArray, optimistic: FloatArray,
                overrides: Mapping[tuple[int, int], FloatArray] | None = None
                ) -> npt.NDArray[np.bool_]:
    """Rows of ``points`` (minimised) that no row dominates, comparing the dominating row's
    ``pessimistic`` ends with the dominated row's ``optimistic`` ends; NaN rows are never kept.
    ``overrides`` decide some pairs of rows on some columns instead of their ends (see
    :data:`Overrides` and :func:`_overridden`)."""
    mask = np.zeros(len(points), dtype=bool)
    candidates = np.flatnonzero(~np.isnan(points).any(axis=1))
    if not len(candidates):
        return mask
    if overrides:
        mask = undominated(points, pessimistic, optimistic)
        return _overridden(mask, pessimistic, optimistic, _one_way(overrides), candidates)
    # Whatever a row's pessimistic ends dominate, the non-dominated set of those ends dominates
    # too (dominance is transitive, strictness included), and that set is small: compare every
    # row with it alone. Row by row against every row took 6.6 s for 10,000 trials.
    dominators = nondominated(pessimistic[candidates])
    block = max(1, _BLOCK_CELLS // max(1, dominators.size))
    for first in range(0, len(candidates), block):
        rows = candidates[first:first + block]
        targets = optimistic[rows][:, np.newaxis, :]
        dominated = (np.all(dominators <= targets, axis=2)
                     & np.any(dominators < targets, axis=2)).any(axis=1)
        mask[rows] = ~dominated
    return mask


# Cells of the comparison arrays per block (~8 MB of booleans).
_BLOCK_CELLS = 8_000_000


def _one_way(overrides: Mapping[tuple[int, int], FloatArray]) -> dict[int, dict[int, FloatArray]]:
    """Per row ``t``, per other row ``a``: the override of ``a`` against ``t`` from ``a``'s side
    (-1: ``a`` better), from whichever of ``(a, t)`` and ``(t, a)`` gives it."""
    out: dict[int, dict[int, FloatArray]] = {}
    for (i, j), signs in overrides.items():
        for mine, other, view in ((i, j, signs), (j, i, -np.asarray(signs, dtype=np.float64))):
            held = out.setdefault(other, {}).get(mine)
            out[other][mine] = view if held is None else np.where(np.isnan(held), view, held)
    return out


def _overridden(mask: npt.NDArray[np.bool_], pessimistic: FloatArray, optimistic: FloatArray,
                against: dict[int, dict[int, FloatArray]],
                valid: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
    """``mask`` (the rows no row dominates as their ends compare) corrected for the overrides.

    Only the dominators of a row in an overridden pair change, so only those rows and the rows
    that dominate them, over and over (``rows``, all dominators of each inside it), can change.
    Verdicts that contradict the values can close a circle of dominance (a duel finds A faster
    than B, whose value lies below C's, which lies below A's); every row of such a circle that
    only rows of its own circle dominate stays on the front: nothing outside it beats it."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    usable = np.zeros(len(mask), dtype=bool)
    usable[valid] = True
    dominators: dict[int, npt.NDArray[np.intp]] = {}
    todo = [t for t in against if usable[t]]
    while todo:
        row = todo.pop()
        if row in dominators:
            continue
        at_most = pessimistic <= optimistic[row]
        below = pessimistic < optimistic[row]
        for other, signs in against.get(row, {}).items():
            decided = ~np.isnan(signs)
            at_most[other, decided] = signs[decided] <= 0
            below[other, decided] = signs[decided] < 0
        found = at_most.all(axis=1) & below.any(axis=1) & usable
        found[row] = False
        dominators[row] = np.flatnonzero(found)
        todo.extend(int(a) for a in dominators[row] if int(a) not in dominators)
    rows = sorted(dominators)
    where = {row: k for k, row in enumerate(rows)}
    edges = [(where[int(a)], where[t]) for t in rows for a in dominators[t]]
    graph = csr_matrix((np.ones(len(edges)), ([e[0] for e in edges], [e[1] for e in edges])),
                       shape=(len(rows), len(rows)))
    _, circle = connected_components(graph, directed=True, connection="strong")
    out = mask.copy()
    for t in rows:
        out[t] = all(circle[where[int(a)]] == circle[where[t]] for a in dominators[t])
    return out


def nondominated(points: FloatArray) -> FloatArray:
    """The distinct non-dominated rows of NaN-free minimised ``points``."""
    distinct = np.unique(points, axis=0)
    front = np.empty_like(distinct)
    size = 0
    # In lexicographic order (np.unique's), whatever dominates a point comes before it, so one
    # pass that skips covered points leaves exactly the front.
    for point in distinct:
        if not np.any(np.all(front[:size] <= point, axis=1)):
            front[size] = point
            size += 1
    return front[:size]


def insert_nondominated(front: FloatArray, point: FloatArray) -> FloatArray:
    """``front`` with ``point`` added and the rows it dominates dropped (point not covered)."""
    kept = front[~np.all(point <= front, axis=1)]
    return np.vstack([kept, point])


def volume(front: FloatArray, reference: FloatArray) -> float:
    """Exact hypervolume of minimised points that all lie strictly inside ``reference``; from 3
    objectives on they must be mutually non-dominated (the 2-D sweep skips dominated ones)."""
    count, dims = front.shape
    if count == 0:
        return 0.0
    if dims == 1:
        return float(reference[0] - front[:, 0].min())
    if dims == 2:
        return _sweep_2d(front, reference)
    # Slice along the last objective: between two consecutive values of it, the dominated
    # region's cross-section is the (d-1)-dimensional volume of the points passed so far.
    front = front[np.argsort(front[:, -1], kind="stable")]
    tops = np.append(front[1:, -1], reference[-1])
    section = np.empty((0, dims - 1))
    total = 0.0
    for point, top in zip(front, tops, strict=True):
        if not np.any(np.all(section <= point[:-1], axis=1)):
            section = insert_nondominated(section, point[:-1])
        depth = top - point[-1]
        if depth > 0:
            total += depth * volume(section, reference[:-1])
    return total


def exclusive_volume(point: FloatArray, front: FloatArray, reference: FloatArray) -> float:
    """What ``point`` adds to ``front``'s volume: its box less the part already covered, which is
    the volume of the front clipped to the box (each row raised to at least ``point``)."""
    covered = nondominated(np.maximum(front, point)) if len(front) else front
    return float(np.prod(reference - point)) - volume(covered, reference)


def _sweep_2d(front: FloatArray, reference: FloatArray) -> float:
    """Area under the staircase: sorted by the first objective, each point adds the strip between
    its second value and the lowest second value seen before it."""
    order = np.lexsort((front[:, 1], front[:, 0]))
    first, second = front[order, 0], front[order, 1]
    lowest = np.minimum.accumulate(second)
    previous = np.concatenate(([reference[1]], lowest[:-1]))
    return float(np.sum((reference[0] - first) * (previous - lowest)))
