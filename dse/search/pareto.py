"""Pareto fronts, hypervolume and noise-aware dominance over named metrics.

Pure numpy and pandas: ``dse.results`` and ``dse.report`` build on this module without torch, ray
or onnxruntime. Every function takes values in metric units and reads each objective's direction
from :data:`dse.metrics.METRICS`; inside, everything is flipped to "smaller is better".

Which trials compete for a front is one rule, shared with :func:`dse.results.front_frame`: state
COMPLETE, status ok, feasible, and not a repeat of an earlier trial's measurement.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from dse.columns import competing_mask, metric_column
from dse.metrics import Direction, metric

FloatArray = npt.NDArray[np.float64]

# The confidence-interval bounds measured for an objective, as metric names (their table columns
# are ``metric_column(name)``). An objective without an entry is treated as exact.
CI_COLUMNS: dict[str, tuple[str, str]] = {
    "latency_p50_ms": ("latency_p50_ci_low_ms", "latency_p50_ci_high_ms"),
    "latency_p99_ms": ("latency_p99_ci_low_ms", "latency_p99_ci_high_ms"),
}

# default_reference pushes the worst value out by this share of the observed range.
REFERENCE_MARGIN = 0.1


def pareto_mask(values: npt.ArrayLike, objectives: Sequence[str]) -> npt.NDArray[np.bool_]:
    """True for each row not dominated by another row.

    ``values`` has one row per candidate and one column per objective, in the order of
    ``objectives``; directions come from the metrics table. Rows with a NaN are never on the front.
    Duplicates of a front point are all kept (neither dominates the other).
    """
    points = _as_minimization(values, objectives)
    return _undominated(points, points, points)


def noise_aware_mask(values: npt.ArrayLike, lows: npt.ArrayLike, highs: npt.ArrayLike,
                     objectives: Sequence[str]) -> npt.NDArray[np.bool_]:
    """True for each row that no other row dominates beyond the measurements' noise.

    ``lows`` and ``highs`` have the shape of ``values``: each point's confidence-interval bounds
    per objective, NaN where an objective has none (its value is then taken as exact). Row A
    dominates row B only when A's pessimistic end (its bound on the bad side) is at least as good
    as B's optimistic end in every objective and better in one. Such an A also dominates B
    strictly, so this front always holds the strict front of :func:`pareto_mask`. A bound on the
    wrong side of its value is read as the value (the interval is widened to hold it).
    """
    points = _as_minimization(values, objectives)
    bounds = [_as_minimization(b, objectives) for b in (lows, highs)]
    for name, bound in zip(("lows", "highs"), bounds, strict=True):
        if bound.shape != points.shape:
            raise ValueError(f"{name} must have the shape of values {points.shape}, "
                             f"but got {bound.shape}")
    # After the flip, the bad end is the larger one whichever bound it came from; fmax/fmin
    # skip NaN, so a missing bound leaves the value itself.
    pessimistic = np.fmax(points, np.fmax(*bounds))
    optimistic = np.fmin(points, np.fmin(*bounds))
    return _undominated(points, pessimistic, optimistic)


def hypervolume(points: npt.ArrayLike, objectives: Sequence[str],
                reference: npt.ArrayLike) -> float:
    """The volume of objective space that ``points`` dominate, bounded by ``reference``.

    ``points``: one row per design, one column per objective, metric units; ``reference``: one
    value per objective, in the same units. A point contributes only where it is strictly better
    than the reference in every objective; rows with a NaN contribute nothing. Exact for any
    number of objectives: a sweep in 2-D, slicing along the last objective above that (cost grows
    as n^(d-1), fine for the fronts of 2 to 4 objectives a campaign produces).
    """
    minimized = _as_minimization(points, objectives)
    bound = _reference_as_minimization(reference, objectives)
    inside = minimized[np.all(minimized < bound, axis=1)]  # NaN compares False: left out too
    # The 2-D sweep skips dominated points by itself; slicing wants them gone first.
    return _volume(inside if len(objectives) <= 2 else _nondominated(inside), bound)


def default_reference(trials: pd.DataFrame | npt.ArrayLike,
                      objectives: Sequence[str]) -> list[float]:
    """A reference point for a campaign that declares none, in metric units.

    Rule: over the competing trials of ``trials`` (state COMPLETE, status ok, feasible, not a
    reuse) that measured every objective — or every NaN-free row of an array — take each
    objective's worst finite value and push it further out on the bad side by 10% of that
    objective's range (worst - best). Where the range is 0 the push is 10% of the worst value's
    magnitude, and 1.0 where that is 0 too, so every competing point with finite values lies
    strictly inside and contributes. A point at a metric's infinitely bad value (a proxy's
    ``-inf``) lies outside any reference and adds no volume.

    A multi-device frame gives one reference for all devices, which keeps their hypervolumes
    comparable; pass one device's rows for a reference of its own.
    """
    if isinstance(trials, pd.DataFrame):
        values = _frame_values(trials[_competing(trials)], objectives)
    else:
        values = np.asarray(trials, dtype=np.float64)
    points = _as_minimization(values, objectives)
    points = points[~np.isnan(points).any(axis=1)]
    finite = np.where(np.isfinite(points), points, np.nan)
    if len(points) == 0 or np.isnan(finite).all(axis=0).any():
        raise ValueError(f"no feasible, completed trial measured a finite value of each of "
                         f"{list(objectives)}; declare a reference point")
    worst, best = np.nanmax(finite, axis=0), np.nanmin(finite, axis=0)
    margin = REFERENCE_MARGIN * (worst - best)
    margin = np.where(margin > 0, margin, REFERENCE_MARGIN * np.abs(worst))
    margin = np.where(margin > 0, margin, 1.0)
    return [float(v) for v in (worst + margin) * _signs(objectives)]


def hypervolume_history(trials: pd.DataFrame | npt.ArrayLike, objectives: Sequence[str],
                        reference: npt.ArrayLike) -> list[float]:
    """The hypervolume of the feasible front after each trial, one device's trials in order.

    A frame (:func:`dse.results.trials_frame` rows of a single device) gives one value per row,
    rows taken in ``trial`` order; only competing trials (state COMPLETE, status ok, feasible, not
    a reuse) can grow the front, every other row repeats the value before it. An array gives one
    value per row, every NaN-free row competing. The list never decreases.
    """
    if isinstance(trials, pd.DataFrame):
        _check_one_device(trials)
        ordered = trials.sort_values("trial", kind="mergesort")
        values = _frame_values(ordered, objectives)
        competing = _competing(ordered).to_numpy()
    else:
        values = np.asarray(trials, dtype=np.float64)
        competing = np.ones(len(_as_minimization(values, objectives)), dtype=bool)
    points = _as_minimization(values, objectives)
    bound = _reference_as_minimization(reference, objectives)

    front = np.empty((0, len(objectives)))
    current = 0.0
    history: list[float] = []
    for point, competes in zip(points, competing, strict=True):
        # Only a point inside the reference and not already covered changes the volume.
        if competes and np.all(point < bound) and not np.any(np.all(front <= point, axis=1)):
            current += _exclusive_volume(point, front, bound)
            front = _insert_nondominated(front, point)
        history.append(current)
    return history


def pareto_front(trials: pd.DataFrame, objectives: Sequence[str], *,
                 noise_aware: bool = False) -> pd.DataFrame:
    """The Pareto-optimal rows of ``trials`` over ``objectives``, each device's front on its own,
    sorted by the first objective (ascending, ties by the next objectives then trial number).

    Only competing trials (state COMPLETE, status ok, feasible, not a reuse) are on a front or
    dominate; rows missing an objective value are left out, and an objective no trial measured
    gives an empty front. ``noise_aware=True`` uses :func:`noise_aware_mask` with the bounds of
    :data:`CI_COLUMNS` (an absent bound column counts as exact), a superset of the strict front.
    """
    columns = [_column(name) for name in objectives]
    if any(column not in trials.columns for column in columns):
        return trials.iloc[0:0].reset_index(drop=True)
    competing = trials[_competing(trials)]
    fronts = []
    for _, rows in competing.groupby(competing["device"].astype("string").fillna(""), sort=True):
        values = rows[columns].astype("float64").to_numpy()
        if noise_aware:
            lows, highs = _ci_bounds(rows, objectives)
            mask = noise_aware_mask(values, lows, highs, objectives)
        else:
            mask = pareto_mask(values, objectives)
        fronts.append(rows[mask])
    if not fronts:
        return trials.iloc[0:0].reset_index(drop=True)
    front = pd.concat(fronts)
    return front.sort_values([*columns, "trial"], kind="mergesort").reset_index(drop=True)


def _signs(objectives: Sequence[str]) -> FloatArray:
    if not objectives:
        raise ValueError("objectives must name at least one metric")
    return np.array([-1.0 if metric(name).direction is Direction.MAXIMIZE else 1.0
                     for name in objectives])


def _as_minimization(values: npt.ArrayLike, objectives: Sequence[str]) -> FloatArray:
    """Flip maximised columns so that smaller is better everywhere."""
    signs = _signs(objectives)
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        array = array.reshape(0, len(objectives))
    if array.ndim != 2 or array.shape[1] != len(objectives):
        raise ValueError(f"values must have one row per point and one column per objective "
                         f"({', '.join(objectives)}), but got shape {array.shape}")
    flipped: FloatArray = array * signs
    return flipped


def _reference_as_minimization(reference: npt.ArrayLike,
                               objectives: Sequence[str]) -> FloatArray:
    bound = np.asarray(reference, dtype=np.float64)
    if bound.shape != (len(objectives),) or not np.all(np.isfinite(bound)):
        raise ValueError(f"reference must hold one finite value per objective "
                         f"({', '.join(objectives)}), but got {np.ravel(reference).tolist()}")
    flipped: FloatArray = bound * _signs(objectives)
    return flipped


def _undominated(points: FloatArray, pessimistic: FloatArray,
                 optimistic: FloatArray) -> npt.NDArray[np.bool_]:
    """Rows of ``points`` (minimised) that no row dominates, comparing the dominating row's
    ``pessimistic`` ends with the dominated row's ``optimistic`` ends; NaN rows are never kept."""
    mask = np.zeros(len(points), dtype=bool)
    candidates = np.flatnonzero(~np.isnan(points).any(axis=1))
    if not len(candidates):
        return mask
    # Whatever a row's pessimistic ends dominate, the non-dominated set of those ends dominates
    # too (dominance is transitive, strictness included), and that set is small: compare every
    # row with it alone. Row by row against every row took 6.6 s for 10,000 trials.
    dominators = _nondominated(pessimistic[candidates])
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


def _nondominated(points: FloatArray) -> FloatArray:
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


def _insert_nondominated(front: FloatArray, point: FloatArray) -> FloatArray:
    """``front`` with ``point`` added and the rows it dominates dropped (point not covered)."""
    kept = front[~np.all(point <= front, axis=1)]
    return np.vstack([kept, point])


def _volume(front: FloatArray, reference: FloatArray) -> float:
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
            section = _insert_nondominated(section, point[:-1])
        depth = top - point[-1]
        if depth > 0:
            total += depth * _volume(section, reference[:-1])
    return total


def _exclusive_volume(point: FloatArray, front: FloatArray, reference: FloatArray) -> float:
    """What ``point`` adds to ``front``'s volume: its box less the part already covered, which is
    the volume of the front clipped to the box (each row raised to at least ``point``)."""
    covered = _nondominated(np.maximum(front, point)) if len(front) else front
    return float(np.prod(reference - point)) - _volume(covered, reference)


def _sweep_2d(front: FloatArray, reference: FloatArray) -> float:
    """Area under the staircase: sorted by the first objective, each point adds the strip between
    its second value and the lowest second value seen before it."""
    order = np.lexsort((front[:, 1], front[:, 0]))
    first, second = front[order, 0], front[order, 1]
    lowest = np.minimum.accumulate(second)
    previous = np.concatenate(([reference[1]], lowest[:-1]))
    return float(np.sum((reference[0] - first) * (previous - lowest)))


def _column(name: str) -> str:
    """The trials-table column of metric ``name``: the results table's own rule."""
    return metric_column(name)


def _competing(trials: pd.DataFrame) -> pd.Series:
    """The rows allowed on a front: :func:`dse.results.competing_mask`, less reuses (a repeat
    carries an earlier trial's measurement, and that earlier trial competes)."""
    mask = competing_mask(trials)
    if "reused_from" in trials.columns:
        mask = mask & trials["reused_from"].isna()
    return mask


def _frame_values(trials: pd.DataFrame, objectives: Sequence[str]) -> FloatArray:
    """The objective columns as floats; an objective no trial measured is all NaN."""
    return _columns_or_nan(trials, [_column(name) for name in objectives])


def _ci_bounds(trials: pd.DataFrame, objectives: Sequence[str]) -> tuple[FloatArray, FloatArray]:
    """Low and high CI bounds per objective, NaN where the objective has no CI column."""
    pairs = [CI_COLUMNS.get(name) for name in objectives]
    lows = [_column(pair[0]) if pair else None for pair in pairs]
    highs = [_column(pair[1]) if pair else None for pair in pairs]
    return _columns_or_nan(trials, lows), _columns_or_nan(trials, highs)


def _columns_or_nan(trials: pd.DataFrame, columns: Sequence[str | None]) -> FloatArray:
    """The ``columns`` as floats, NaN for a column that is None or absent from ``trials``."""
    out = np.full((len(trials), len(columns)), np.nan)
    for j, column in enumerate(columns):
        if column is not None and column in trials.columns:
            out[:, j] = trials[column].astype("float64").to_numpy()
    return out


def _check_one_device(trials: pd.DataFrame) -> None:
    if "device" not in trials.columns:
        return
    devices = sorted(trials["device"].dropna().astype(str).unique())
    if len(devices) > 1:
        raise ValueError(f"hypervolume_history follows one device's front, but the trials hold "
                         f"{devices}; pass trials[trials['device'] == name]")
