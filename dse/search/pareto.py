"""Pareto fronts, hypervolume and noise-aware dominance over named metrics.

Pure numpy and pandas: ``dse.results`` and ``dse.report`` build on this module without torch, ray
or onnxruntime. Every function takes values in metric units and reads each objective's direction
from :data:`dse.core.metrics.METRICS`; inside, everything is flipped to "smaller is better".

Which trials compete for a front is one rule, shared with :func:`dse.results.front_frame`: state
COMPLETE, status ok, feasible, and not a repeat of an earlier trial's measurement.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from dse.core import DUEL_COLUMN, Direction, TrialAttr, competing_mask, metric, metric_column
from dse.search.duel_records import table_overrides
from dse.util import Overrides, exclusive_volume, insert_nondominated, nondominated, undominated, volume

FloatArray = npt.NDArray[np.float64]

# The confidence-interval bounds measured for an objective, as metric names (their table columns
# are ``metric_column(name)``). An objective without an entry is treated as exact.
CI_COLUMNS: dict[str, tuple[str, str]] = {
    f"{timed}_{p}_ms": (f"{timed}_{p}_ci_low_ms", f"{timed}_{p}_ci_high_ms")
    for timed in ("latency", "ttft", "tpot", "e2e") for p in ("p50", "p99")
}

# default_reference pushes the worst value out by this share of the observed range.
REFERENCE_MARGIN = 0.1


def pareto_mask(values: npt.ArrayLike, objectives: Sequence[str], *,
                overrides: Overrides | None = None) -> npt.NDArray[np.bool_]:
    """True for each row not dominated by another row.

    ``values`` has one row per candidate and one column per objective, in the order of
    ``objectives``; directions come from the metrics table. Rows with a NaN are never on the front.
    Duplicates of a front point are all kept (neither dominates the other).

    Args:
        values: One row per candidate, one column per objective, in metric units.
        objectives: The metric names of the columns (built-in or declared).
        overrides: Pairs of rows whose order a duel decided on some objectives, which that
            order decides instead of their values (:data:`dse.util.dominance.Overrides`).

    Returns:
        One boolean per row: True where no other row dominates it.

    Raises:
        ValueError: When ``objectives`` is empty or ``values`` is not one row per point with one
            column per objective.
        KeyError: When an objective is no known metric.

    Examples:
        >>> import numpy as np
        >>> from dse import pareto_mask
        >>> values = np.array([[0.9, 2.0],   # accuracy, p50 latency in ms
        ...                    [0.8, 1.0],
        ...                    [0.7, 3.0],   # worse than both others in both
        ...                    [0.8, np.nan]])
        >>> pareto_mask(values, ["accuracy", "latency_p50_ms"]).tolist()
        [True, True, False, False]
    """
    points = _as_minimization(values, objectives)
    return undominated(points, points, points, overrides)


def noise_aware_mask(values: npt.ArrayLike, lows: npt.ArrayLike, highs: npt.ArrayLike,
                     objectives: Sequence[str], *,
                     overrides: Overrides | None = None) -> npt.NDArray[np.bool_]:
    """True for each row that no other row dominates beyond the measurements' noise.

    ``lows`` and ``highs`` have the shape of ``values``: each point's confidence-interval bounds
    per objective, NaN where an objective has none (its value is then taken as exact). Row A
    dominates row B only when A's pessimistic end (its bound on the bad side) is at least as good
    as B's optimistic end in every objective and better in one. Such an A also dominates B
    strictly, so this front always holds the strict front of :func:`pareto_mask`. A bound on the
    wrong side of its value is read as the value (the interval is widened to hold it).

    Args:
        values: One row per candidate, one column per objective, in metric units.
        lows: The lower CI bound of each value (NaN: none).
        highs: The upper CI bound of each value (NaN: none).
        objectives: The metric names of the columns (built-in or declared).
        overrides: Pairs of rows whose order a duel decided on some objectives, which that
            order decides instead of their intervals (:data:`dse.util.dominance.Overrides`).

    Returns:
        One boolean per row: True where no other row dominates it beyond the noise.

    Raises:
        ValueError: When ``objectives`` is empty, ``values`` is not one row per point with one
            column per objective, or ``lows`` or ``highs`` has another shape.
        KeyError: When an objective is no known metric.

    Examples:
        >>> import numpy as np
        >>> from dse import noise_aware_mask, pareto_mask
        >>> objectives = ["latency_p50_ms", "accuracy"]
        >>> values = np.array([[1.0, 0.9], [1.05, 0.9]])  # 5% slower, equally accurate
        >>> lows = np.array([[0.9, np.nan], [1.0, np.nan]])  # accuracy has no interval
        >>> highs = np.array([[1.1, np.nan], [1.1, np.nan]])
        >>> pareto_mask(values, objectives).tolist()
        [True, False]
        >>> noise_aware_mask(values, lows, highs, objectives).tolist()  # within the noise
        [True, True]
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
    return undominated(points, pessimistic, optimistic, overrides)


def hypervolume(points: npt.ArrayLike, objectives: Sequence[str],
                reference: npt.ArrayLike) -> float:
    """The volume of objective space that ``points`` dominate, bounded by ``reference``.

    ``points``: one row per design, one column per objective, metric units; ``reference``: one
    value per objective, in the same units. A point contributes only where it is strictly better
    than the reference in every objective; rows with a NaN contribute nothing. Exact for any
    number of objectives: a sweep in 2-D, slicing along the last objective above that (cost grows
    as n^(d-1), fine for the fronts of 2 to 4 objectives a campaign produces).

    Args:
        points: One row per design, one column per objective, in metric units.
        objectives: The metric names of the columns (built-in or declared).
        reference: One finite value per objective, in metric units.

    Returns:
        The dominated volume, in the product of the objectives' units (0.0 when no point lies
        inside the reference).

    Raises:
        ValueError: When ``objectives`` is empty, ``points`` is not one row per point with one
            column per objective, or ``reference`` is not one finite value per objective.
        KeyError: When an objective is no known metric.

    Examples:
        >>> from dse import hypervolume
        >>> points = [[1.0, 0.9], [2.0, 0.95]]  # p50 latency in ms, accuracy
        >>> round(hypervolume(points, ["latency_p50_ms", "accuracy"], reference=[3.0, 0.5]), 6)
        0.85
    """
    minimized = _as_minimization(points, objectives)
    bound = _reference_as_minimization(reference, objectives)
    inside = minimized[np.all(minimized < bound, axis=1)]  # NaN compares False: left out too
    # The 2-D sweep skips dominated points by itself; slicing wants them gone first.
    return volume(inside if len(objectives) <= 2 else nondominated(inside), bound)


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

    Args:
        trials: A trials table (:func:`dse.results.trials_frame`), or an array of one row per
            point and one column per objective, in metric units.
        objectives: The metric names of the objectives (built-in or declared).

    Returns:
        One value per objective, in metric units.

    Raises:
        ValueError: When no competing trial (no NaN-free row) has a finite value of each
            objective, or the array's shape does not fit ``objectives``.
        KeyError: When an objective is no known metric.
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

    Args:
        trials: One device's trials table, or an array of one row per point and one column per
            objective, in metric units.
        objectives: The metric names of the objectives (built-in or declared).
        reference: One finite value per objective, in metric units.

    Returns:
        The hypervolume after each row (each trial, in ``trial`` order for a table).

    Raises:
        ValueError: When the table holds several devices' trials, the values' shape does not
            fit ``objectives``, or ``reference`` is not one finite value per objective.
        KeyError: When an objective is no known metric.

    Examples:
        >>> from dse import hypervolume_history
        >>> points = [[2.0, 0.95], [2.5, 0.6], [1.0, 0.9]]  # the second adds nothing
        >>> history = hypervolume_history(points, ["latency_p50_ms", "accuracy"], [3.0, 0.5])
        >>> [round(v, 6) for v in history]
        [0.45, 0.45, 0.85]
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
            current += exclusive_volume(point, front, bound)
            front = insert_nondominated(front, point)
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
    Where a duel ordered two rows on an objective (the table's ``duels`` column), its verdict
    decides them there (:func:`front_mask`).

    Args:
        trials: A trials table (:func:`dse.results.trials_frame`): ``trial``, ``device``,
            ``state``, ``status``, ``feasible`` and one column per metric (``name [unit]``).
        objectives: The metric names of the objectives (built-in or declared).
        noise_aware: Keep the rows no other row dominates beyond their CIs.

    Returns:
        The front's rows, with a fresh index; no rows when an objective has no column.

    Raises:
        KeyError: When ``trials`` has every objective's column but lacks the ``state``,
            ``status``, ``feasible``, ``device`` or ``trial`` column, or an objective with a
            column is no known metric.

    Examples:
        >>> import pandas as pd
        >>> from dse import pareto_front
        >>> trials = pd.DataFrame({
        ...     "trial": [0, 1, 2, 3], "device": "local-cpu", "state": "COMPLETE",
        ...     "status": ["ok", "ok", "ok", "failed"], "feasible": [True, True, True, False],
        ...     "accuracy [fraction]": [0.9, 0.8, 0.7, None],
        ...     "latency_p50_ms [ms]": [2.0, 1.0, 3.0, None]})
        >>> pareto_front(trials, ["latency_p50_ms", "accuracy"])["trial"].tolist()
        [1, 0]
    """
    columns = [_column(name) for name in objectives]
    if any(column not in trials.columns for column in columns):
        return trials.iloc[0:0].reset_index(drop=True)
    competing = trials[_competing(trials)]
    fronts = []
    for _, rows in competing.groupby(competing["device"].astype("string").fillna(""), sort=True):
        fronts.append(rows[front_mask(rows, objectives, noise_aware=noise_aware)])
    if not fronts:
        return trials.iloc[0:0].reset_index(drop=True)
    front = pd.concat(fronts)
    return front.sort_values([*columns, "trial"], kind="mergesort").reset_index(drop=True)


def front_mask(rows: pd.DataFrame, objectives: Sequence[str], *,
               noise_aware: bool = False) -> npt.NDArray[np.bool_]:
    """The front of one device's competing ``rows`` (a trials table's), strict or noise-aware,
    with the verdicts of the duels between them (the table's ``duels`` column, where it has
    one) deciding their order on the objectives each decided."""
    values = rows[[_column(name) for name in objectives]].astype("float64").to_numpy()
    overrides = (table_overrides(rows["trial"].tolist(), rows[DUEL_COLUMN].tolist(), objectives)
                 if DUEL_COLUMN in rows.columns and "trial" in rows.columns else None)
    if not noise_aware:
        return pareto_mask(values, objectives, overrides=overrides)
    lows, highs = _ci_bounds(rows, objectives)
    return noise_aware_mask(values, lows, highs, objectives, overrides=overrides)


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


def _column(name: str) -> str:
    """The trials-table column of metric ``name``: the results table's own rule."""
    return metric_column(name)


def _competing(trials: pd.DataFrame) -> pd.Series:
    """The rows allowed on a front: :func:`dse.results.competing_mask`, less reuses (a repeat
    carries an earlier trial's measurement, and that earlier trial competes)."""
    mask = competing_mask(trials)
    if TrialAttr.REUSED_FROM in trials.columns:
        mask = mask & trials[TrialAttr.REUSED_FROM].isna()
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
