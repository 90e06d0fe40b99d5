"""Which pairs of a device's measured trials to duel: close calls on or near its front.

A pair qualifies when both trials compete for the front (the results tables' rule: complete, ok,
feasible, measured cleanly unless ``non_ok_on_front``, not a repeat), both are on its
noise-aware front (no other trial beats either beyond the noise; the strict front lies inside
it), their intervals overlap on at least one timing objective (a latency percentile with an
interval; throughput, whose interval follows the median's; never accuracy or another exact
metric; two values within ``measurement.duels.close_within`` of each other count as
overlapping, since separate runs drift further apart than one run's interval says), and the
order on those objectives decides whether one dominates the other: on every other objective one
of them is at least as good. Pairs that differ the other way elsewhere stay
on the front whatever a duel says; they are not dueled.

Most valuable first: pairs with more strict-front members, then the closest (the smallest
relative gap between their values on a contested objective), then by trial number. The first
``max_pairs`` are chosen (fewer where the device's search spent too little time for them:
``time_share``, a pair at :func:`planned_duel_seconds`), whatever earlier duels found, so the
same trials give the same pairs and a resumed run duels only those among them not yet decided
(:func:`pending_pairs`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.core import (
    Candidate,
    Direction,
    StudyAttr,
    TrialAttr,
    blocks_front,
    current_constraint_text,
    current_metric_keys,
    metric,
)
from dse.search.duel_records import DISTURBED, read_records
from dse.search.pareto import CI_COLUMNS, noise_aware_mask, pareto_mask
from dse.search.second_looks import outranked
from dse.util import percentile_quantile

if TYPE_CHECKING:
    import optuna

    from dse.spec import DuelSpec

THROUGHPUT = "throughput_sps"


@dataclass(frozen=True)
class DuelPair:
    """Two trials ``a`` < ``b`` of one device to duel, their candidates, and the objectives
    their intervals overlap on (the ones the duel decides)."""

    a: int
    b: int
    candidate_a: Candidate
    candidate_b: Candidate
    metrics: tuple[str, ...]

    @property
    def quantiles(self) -> tuple[float, ...]:
        """The latency quantiles the duel must order (throughput follows the median)."""
        return tuple(sorted({duel_quantile(name) for name in self.metrics}))


def duel_quantile(name: str) -> float:
    """The latency quantile behind a timing objective (``latency_p99_ms`` -> 0.99)."""
    if name == THROUGHPUT:
        return 0.5
    return percentile_quantile(name.removeprefix("latency_").removesuffix("_ms"))


def timing_objectives(objectives: Sequence[str]) -> list[str]:
    """The objectives a duel can decide: latency percentiles with an interval, and throughput
    where the median has one (a generative model's request times are not a duel's calls)."""
    return [name for name in objectives
            if (name in CI_COLUMNS and name.startswith("latency_")) or name == THROUGHPUT]


def pending_pairs(study: optuna.Study, objectives: Sequence[str],
                  spec: DuelSpec) -> list[DuelPair]:
    """The chosen pairs of ``study`` (:func:`choose_pairs`) without a duel that counts or
    failed: never dueled, or dueled while other work disturbed the device. As many pairs are
    chosen as ``max_pairs`` and ``time_share`` of the device time the trials spent allow."""
    if not spec.enabled or spec.max_pairs == 0 or not timing_objectives(objectives):
        return []
    trials = study.get_trials(deepcopy=False)
    spent = sum(_number(t.user_attrs.get(TrialAttr.DEVICE_SECONDS)) for t in trials
                if TrialAttr.DEVICE_SECONDS in t.user_attrs)
    affordable = min(spec.max_pairs,
                     math.floor(spec.time_share * spent / planned_duel_seconds(spec)))
    done = {(r.a, r.b): r.status for r in read_records(study.user_attrs)}
    chosen = choose_pairs(trials, objectives, affordable, spec.close_within,
                          bool(study.user_attrs.get(StudyAttr.NON_OK_ON_FRONT, False)),
                          study.user_attrs.get(StudyAttr.CONSTRAINTS, []))
    return [pair for pair in chosen if done.get((pair.a, pair.b), DISTURBED) == DISTURBED]


def planned_duel_seconds(spec: DuelSpec) -> float:
    """The device time one duel is planned at: its warm-up and ``min_rounds`` rounds of two
    warmed blocks, a duel that decides at its first look (0.7 s at the defaults, where the
    median duel took 0.8-1.1 s on the development VM). One that goes on takes up to
    ``max_seconds`` and its warm-up; charging every duel that cap planned none in a small
    campaign."""
    from dse.measure import BLOCK_WARM_SHARE, WARMUP_MAX_S, WARMUP_SHARE

    warm_up = min(WARMUP_MAX_S, WARMUP_SHARE * spec.max_seconds)
    rounds = spec.min_rounds * 2 * spec.block_seconds * (1 + BLOCK_WARM_SHARE)
    return warm_up + min(spec.max_seconds, rounds)


def choose_pairs(trials: Sequence[optuna.trial.FrozenTrial], objectives: Sequence[str],
                 max_pairs: int, close_within: float = 0.0, non_ok_on_front: bool = False,
                 constraints: Sequence[str] = ()) -> list[DuelPair]:
    """The at most ``max_pairs`` pairs of ``trials`` (one device's) most worth a duel (see the
    module's rule), each timing interval widened to reach ``close_within`` / 2 of its value
    either side (two values that close count as overlapping)."""
    # Of a trial and its second look only one competes (dse.search.second_looks.outranked).
    left_out = outranked(trials, non_ok_on_front)
    rows = [t for t in trials if t.number not in left_out
            and _competes(t, len(objectives), non_ok_on_front, constraints)]
    if len(rows) < 2 or not timing_objectives(objectives):
        return []
    values, lows, highs = _arrays(rows, objectives)
    # Only a measured interval is widened: an evaluator's exact value is never a close call.
    reach = 1.0 + close_within / 2
    measured = np.isfinite(lows) & np.isfinite(highs)
    lows = np.where(measured, np.fmin(lows, values / reach), np.nan)
    highs = np.where(measured, np.fmax(highs, values * reach), np.nan)
    near = noise_aware_mask(values, lows, highs, objectives)
    strict = pareto_mask(values, objectives)
    signs = np.array([-1.0 if metric(n).direction is Direction.MAXIMIZE else 1.0
                      for n in objectives])
    ranked: list[tuple[tuple[Any, ...], DuelPair]] = []
    picks = [int(i) for i in np.flatnonzero(near)]
    for x, i in enumerate(picks):
        for j in picks[x + 1:]:
            contested = _contested(i, j, values, lows, highs, objectives)
            if not contested or not _order_matters(i, j, values * signs, objectives, contested):
                continue
            gap = min(abs(math.log(values[i, k] / values[j, k])) for k in contested)
            first, second = sorted((rows[i], rows[j]), key=lambda t: t.number)
            pair = DuelPair(first.number, second.number, _candidate(first), _candidate(second),
                            tuple(objectives[k] for k in contested))
            ranked.append(((-int(strict[i]) - int(strict[j]), gap, pair.a, pair.b), pair))
    ranked.sort(key=lambda item: item[0])
    return [pair for _, pair in ranked[:max_pairs]]


def _competes(trial: optuna.trial.FrozenTrial, objectives: int, non_ok_on_front: bool,
              constraints: Sequence[str]) -> bool:
    """The results tables' front rule, on a stored trial with a candidate to build again."""
    from optuna.trial import TrialState

    attrs = trial.user_attrs
    measured = {current_constraint_text(str(k)): float(v) for k, v in trial.constraints.items()}
    declared = [current_constraint_text(str(text)) for text in constraints]
    return (trial.state == TrialState.COMPLETE and attrs.get(TrialAttr.STATUS) == "ok"
            and TrialAttr.REUSED_FROM not in attrs
            and isinstance(attrs.get(TrialAttr.CANDIDATE), dict)
            and trial.values is not None and len(trial.values) == objectives
            and all(text in measured for text in declared)
            and all(v <= 0 for v in measured.values())
            and not blocks_front(attrs.get(TrialAttr.MEASUREMENT_QUALITY), non_ok_on_front))


def _arrays(rows: Sequence[optuna.trial.FrozenTrial],
            objectives: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values and interval bounds, one row per trial; throughput's interval is the median's,
    inverted (throughput is the batch over the median latency)."""
    values = np.array([t.values for t in rows], dtype=np.float64)
    lows, highs = np.full(values.shape, np.nan), np.full(values.shape, np.nan)
    for r, trial in enumerate(rows):
        found: Mapping[str, Any] = current_metric_keys(
            trial.user_attrs.get(TrialAttr.METRICS) or {})
        for k, name in enumerate(objectives):
            if name in CI_COLUMNS:
                lows[r, k], highs[r, k] = (_number(found.get(b)) for b in CI_COLUMNS[name])
            elif name == THROUGHPUT:
                median, low, high = (_number(found.get(m)) for m in (
                    "latency_p50_ms", *CI_COLUMNS["latency_p50_ms"]))
                lows[r, k] = values[r, k] * median / high
                highs[r, k] = values[r, k] * median / low
    return values, lows, highs


def _contested(i: int, j: int, values: np.ndarray, lows: np.ndarray, highs: np.ndarray,
               objectives: Sequence[str]) -> list[int]:
    """The timing objectives on which the intervals of rows ``i`` and ``j`` overlap."""
    timing = set(timing_objectives(objectives))
    return [k for k, name in enumerate(objectives)
            if name in timing and np.isfinite([lows[i, k], highs[i, k], lows[j, k], highs[j, k]]).all()
            and values[i, k] > 0 and values[j, k] > 0
            and lows[i, k] <= highs[j, k] and lows[j, k] <= highs[i, k]]


def _order_matters(i: int, j: int, minimised: np.ndarray, objectives: Sequence[str],
                   contested: Sequence[int]) -> bool:
    """Whether one row is at least as good as the other on every uncontested objective: then
    the order on the contested ones decides whether it dominates."""
    rest = [k for k in range(len(objectives)) if k not in contested]
    return bool(np.all(minimised[i, rest] <= minimised[j, rest])
                or np.all(minimised[j, rest] <= minimised[i, rest]))


def _candidate(trial: optuna.trial.FrozenTrial) -> Candidate:
    return Candidate.from_dict(dict(trial.user_attrs[TrialAttr.CANDIDATE]))


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else math.nan
