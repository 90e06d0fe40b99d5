"""Study storage -> one tidy row per trial, and the Pareto front of those rows.

The search loop writes each trial's candidate, metrics and status as Optuna user attributes and its
constraints with ``set_constraint``; this module reads them back into a ``pandas.DataFrame`` whose
columns are stable and ordered: identity, parameters, metrics (in :data:`dse.core.metrics.METRICS` order,
unit in the name), constraints, times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
import pandas as pd

from dse.core import (
    COST_COLUMNS,
    METRICS,
    PARAM_PREFIX,
    MetricSpec,
    StudyAttr,
    TrialAttr,
    blocks_front,
    competing_mask,
    constraint_column,
    current_constraint_text,
    current_metric_keys,
    current_metric_name,
    declare,
    find_metric,
    metric_column,
)
from dse.results.dtypes import is_missing, text_column, typed_column
from dse.results.duels import duel_columns
from dse.search import front_mask

# Candidate fields shown first, in this order; arch and knobs follow, then fields unknown to us.
_LEADING_FIELDS = ("family", "backend", "precision", "batch_size")
_NESTED_FIELDS = {"arch": "arch", "knobs": "knob"}
_METRIC_RANK = {name: rank for rank, name in enumerate(METRICS)}


@dataclass(frozen=True)
class _Row:
    """What one trial contributes, before columns are aligned across trials."""

    trial: optuna.trial.FrozenTrial
    text: dict[str, object]
    feasible: bool
    params: dict[str, object]
    metrics: dict[str, object]
    constraints: dict[str, float]


def study_objectives(study: optuna.Study) -> list[str]:
    """The objective metric names, in objective order: the ``objectives`` study attribute, or
    Optuna's own metric names when a study was written without it; a metric renamed since the
    study was written under its current name."""
    names = study.user_attrs.get(StudyAttr.OBJECTIVES) or study.metric_names or []
    return [current_metric_name(str(name)) for name in names]


def declare_study_metrics(study: optuna.Study) -> None:
    """Make the metrics the study's search space declared (its ``metrics`` attribute) known, so
    their columns carry their units and fronts their directions (see ``dse.core.metrics.declare``)."""
    try:
        declare(MetricSpec.from_dict(spec) for spec in study.user_attrs.get(StudyAttr.METRICS, []))
    except ValueError as exc:
        raise ValueError(f"study {study.study_name!r}: {exc}") from None


def study_constraints(study: optuna.Study) -> list[str]:
    """The declared constraint texts (``process_rss_peak_mb <= 4096``), in declaration order; a
    metric renamed since the study was written under its current name."""
    return [current_constraint_text(str(text))
            for text in study.user_attrs.get(StudyAttr.CONSTRAINTS, [])]


def trials_frame(study: optuna.Study | Sequence[optuna.Study]) -> pd.DataFrame:
    """One row per trial of ``study``, ordered by trial number; for several studies (a
    multi-device campaign: one per device profile), their tables one after the other, each
    ordered by trial number — a trial is then identified by ``device`` and ``trial``.

    ``feasible`` is true for a COMPLETE trial whose constraints are all <= 0; a declared constraint
    with no recorded value counts as violated, since nothing shows it holds. Objective columns and
    declared constraint columns are always present, so an all-failed study still has them; the
    cost columns (:data:`~dse.core.columns.COST_COLUMNS`) come last, where some trial has them.
    """
    if not isinstance(study, optuna.Study):
        frames = [trials_frame(one) for one in study]
        if not frames:
            raise ValueError("trials_frame needs at least one study")
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    declare_study_metrics(study)
    objectives = study_objectives(study)
    declared = study_constraints(study)
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    rows = [_row(trial, objectives, declared) for trial in trials]

    columns: dict[str, pd.Series] = {
        "trial": pd.Series([row.trial.number for row in rows], dtype="int64"),
        "state": text_column([row.trial.state.name for row in rows]),
        TrialAttr.STATUS: text_column([row.text[TrialAttr.STATUS] for row in rows]),
        TrialAttr.REASON: text_column([row.text[TrialAttr.REASON] for row in rows]),
        TrialAttr.MISSING: text_column([row.text[TrialAttr.MISSING] for row in rows]),
        "feasible": pd.Series([row.feasible for row in rows], dtype="bool"),
        # ok | disturbed | underpowered | unstable | imprecise, for trials the harness measured
        # (the worker's provenance says why); empty for others (an evaluator's, or from before
        # it existed).
        TrialAttr.MEASUREMENT_QUALITY: text_column(
            [row.trial.user_attrs.get(TrialAttr.MEASUREMENT_QUALITY) for row in rows]),
        "quality_blocks_front": pd.Series(
            [blocks_front(row.trial.user_attrs.get(TrialAttr.MEASUREMENT_QUALITY),
                          bool(study.user_attrs.get(StudyAttr.NON_OK_ON_FRONT, False)))
             for row in rows], dtype="bool"),
        "remeasures": pd.Series([_remeasures(row.trial) for row in rows], dtype="Int64"),
        "device": text_column([row.text["device"] for row in rows]),
        TrialAttr.CANDIDATE_ID: text_column([row.text[TrialAttr.CANDIDATE_ID] for row in rows]),
    }
    for key in _ordered_keys((row.params for row in rows), _param_rank):
        columns[key] = typed_column([row.params.get(key) for row in rows])
    metric_names = _ordered_keys([dict.fromkeys(objectives), *(r.metrics for r in rows)],
                                 _metric_rank)
    for name in metric_names:
        columns[metric_column(name)] = _metric_series(name, rows)
    for text in _ordered_keys([dict.fromkeys(declared), *(r.constraints for r in rows)],
                              lambda _: 0):
        columns[constraint_column(text)] = pd.Series(
            [row.constraints.get(text, np.nan) for row in rows], dtype="float64")
    columns["started"] = pd.Series([r.trial.datetime_start for r in rows], dtype="datetime64[us]")
    columns["completed"] = pd.Series([r.trial.datetime_complete for r in rows],
                                     dtype="datetime64[us]")
    columns["duration_s"] = pd.Series(
        [np.nan if r.trial.duration is None else r.trial.duration.total_seconds() for r in rows],
        dtype="float64")
    columns[TrialAttr.REUSED_FROM] = pd.Series(
        [r.trial.user_attrs.get(TrialAttr.REUSED_FROM) for r in rows], dtype="Int64")
    looks = [r.trial.user_attrs.get(TrialAttr.SECOND_LOOK_OF) for r in rows]
    if any(look is not None for look in looks):
        columns[TrialAttr.SECOND_LOOK_OF] = pd.Series(looks, dtype="Int64")
    slower = [r.trial.user_attrs.get(TrialAttr.SLOWER_THAN_FIRST) for r in rows]
    if any(slower):
        columns[TrialAttr.SLOWER_THAN_FIRST] = pd.Series(
            [None if look is None else bool(flag) for look, flag in zip(looks, slower, strict=True)],
            dtype="boolean")
    for name in COST_COLUMNS:
        values = [r.trial.user_attrs.get(name) for r in rows]
        if any(value is not None for value in values):
            columns[name] = (text_column(values) if name == TrialAttr.FIDELITY
                             else pd.Series([np.nan if v is None else float(v) for v in values],
                                            dtype="float64"))
    columns.update(duel_columns(study, [row.trial.number for row in rows]))
    return pd.DataFrame(columns, index=pd.RangeIndex(len(rows)))


def front_frame(trials: pd.DataFrame, objectives: Sequence[str]) -> pd.DataFrame:
    """The Pareto-optimal rows of ``trials`` over ``objectives``, each device's front on its own
    (a design competes with the others measured on the same device), sorted by the first
    objective (ascending, ties by the next objectives then trial number).

    Only measured, feasible trials compete: state COMPLETE, status ok, ``feasible`` true. An
    infeasible trial never dominates, however good its values. Rows missing an objective value are
    left out; an objective no trial measured gives an empty front. Where a duel decided two
    trials' order on an objective (the ``duels`` column), that order decides it, not their values.
    """
    columns = [metric_column(name) for name in objectives]
    if any(column not in trials.columns for column in columns):
        return trials.iloc[0:0].reset_index(drop=True)
    # A repeat (``reused_from`` set) carries an earlier trial's measurement of the same candidate;
    # that earlier trial competes, so the front lists each configuration once.
    competing = trials[competing_mask(trials) & trials[TrialAttr.REUSED_FROM].isna()]
    # Each device has its own front: a design is compared with the others on the same device.
    fronts = []
    for _, rows in competing.groupby(competing["device"].astype("string").fillna(""), sort=True):
        fronts.append(rows[front_mask(rows, objectives)])
    if not fronts:
        return trials.iloc[0:0].reset_index(drop=True)
    front = pd.concat(fronts)
    return front.sort_values([*columns, "trial"], kind="mergesort").reset_index(drop=True)


def has_unclean(rows: pd.DataFrame) -> bool:
    """Whether any of ``rows`` was not measured cleanly: a front shows a quality column then
    (only possible with ``measurement.non_ok_on_front``)."""
    return TrialAttr.MEASUREMENT_QUALITY in rows.columns and bool(
        (rows[TrialAttr.MEASUREMENT_QUALITY].fillna("ok") != "ok").any())


#: Failure reasons the summary line names, most frequent first; the rest are counted.
TOP_REASONS = 2


def quality_summary(trials: pd.DataFrame) -> str:
    """One line on how every trial ended and how cleanly the measured ones were measured ("32
    trials: 27 measured cleanly (3 after re-measuring), 1 imprecise, 1 underpowered (kept off the
    front); 2 second looks at the end of the search: 1 clean, 1 slower than the first (which kept
    its place); 2 failed (2: <reason>); 1 reused an earlier result"), or "" when the harness
    measured none (a campaign of evaluators). The labels count first measurements; a second
    look's outcome is counted on its own."""
    if TrialAttr.MEASUREMENT_QUALITY not in trials.columns:
        return ""
    fresh = trials[trials[TrialAttr.REUSED_FROM].isna()]
    measured = fresh[fresh[TrialAttr.MEASUREMENT_QUALITY].notna()]
    if measured.empty:
        return ""
    looks = (measured[TrialAttr.SECOND_LOOK_OF].notna()
             if TrialAttr.SECOND_LOOK_OF in measured.columns
             else pd.Series(False, index=measured.index))
    second, measured = measured[looks], measured[~looks]
    labels = measured[TrialAttr.MEASUREMENT_QUALITY].astype(str)
    again = measured["remeasures"].fillna(0).astype(int)
    clean = labels == "ok"
    line = f"{len(trials)} trials: {int(clean.sum())} measured cleanly"
    if int((again[clean] > 0).sum()):
        line += f" ({int((again[clean] > 0).sum())} after re-measuring)"
    unclean = [f"{count} {label}" for label, count in labels[~clean].value_counts()
               .sort_index().items()]
    if unclean:
        blocked = int(measured["quality_blocks_front"].sum())
        line += ", " + ", ".join(unclean)
        line += (" (kept off the front)" if blocked == int((~clean).sum())
                 else " (allowed on the front)" if blocked == 0 else "")
    if int(again.sum()):
        line += f"; {int(again.sum())} re-measurement(s) in all"
    if not second.empty:
        line += (f"; {len(second)} second look{'' if len(second) == 1 else 's'} at the end of the "
                 f"search: {int((second[TrialAttr.MEASUREMENT_QUALITY] == 'ok').sum())} clean")
        slower = (int(second[TrialAttr.SLOWER_THAN_FIRST].astype("boolean").fillna(False).sum())
                  if TrialAttr.SLOWER_THAN_FIRST in second.columns else 0)
        if slower:
            line += f", {slower} slower than the first (which kept its place)"
        apart = looks_apart(fresh, second)
        if apart:
            pairs = ", ".join(f"{first} and {look}: {ratio:.1f}x" for first, look, ratio
                              in apart[:TOP_REASONS])
            more = f", {len(apart) - TOP_REASONS} more" if len(apart) > TOP_REASONS else ""
            one = len(apart) == 1
            its = "its" if one else "their"
            line += (f"; {len(apart)} candidate{'' if one else 's'} timed at least "
                     f"{LOOKS_APART:g}x apart at {its} two clean looks (trials {pairs}{more}): "
                     f"{its} speed on the device moves")
    parts = [_failures(fresh[fresh[TrialAttr.STATUS] == "failed"])]
    infeasible = int((fresh[TrialAttr.STATUS] == "infeasible").sum())
    parts.append(f"{infeasible} infeasible" if infeasible else "")
    reused = len(trials) - len(fresh)
    parts.append(f"{reused} reused an earlier result" if reused else "")
    return "; ".join([line, *(part for part in parts if part)])


#: Two clean looks at one candidate whose p50 latencies lie this far apart (the slower over the
#: faster) are named in the closing line: far beyond one configuration's run-to-run variation on a
#: quiet machine (p50 within 2.5-15% on the development VM), so the configuration's own speed on
#: the device moved between them — as configurations that use every core do there, by 2x for
#: minutes (docs/benchmarks.md, "What moves the fronts now"). Of the two the faster competes
#: (dse.search.second_looks); this says the front point is one speed of two.
LOOKS_APART = 1.25


def looks_apart(trials: pd.DataFrame, second: pd.DataFrame) -> list[tuple[int, int, float]]:
    """(first trial, second look, slower p50 over faster) for each of ``second`` (second looks of
    ``trials``) that measured cleanly, as its first did, at least :data:`LOOKS_APART` apart on
    p50 latency; the farthest first. A device's looks are matched to firsts of the same device."""
    column = metric_column("latency_p50_ms")
    if column not in trials.columns or second.empty:
        return []

    def clean(rows: pd.DataFrame) -> pd.DataFrame:
        return rows[rows[TrialAttr.MEASUREMENT_QUALITY].astype("string") == "ok"]

    device = [name for name in ("device",) if name in trials.columns]
    firsts = clean(trials)[[*device, "trial", column]].rename(
        columns={"trial": "first_trial", column: "first_p50"})
    pairs = clean(second).astype({TrialAttr.SECOND_LOOK_OF: "int64"}).merge(
        firsts, left_on=[*device, TrialAttr.SECOND_LOOK_OF], right_on=[*device, "first_trial"])
    both = pairs[[column, "first_p50"]].where(pairs[[column, "first_p50"]] > 0)
    ratio = both.max(axis=1) / both.min(axis=1)
    found = [(int(first), int(look), float(r)) for first, look, r
             in zip(pairs["first_trial"], pairs["trial"], ratio, strict=True)
             if r >= LOOKS_APART]
    return sorted(found, key=lambda item: (-item[2], item[0]))


def _failures(failed: pd.DataFrame) -> str:
    """"N failed (k: reason; ...)": the most frequent reasons whole, the others counted."""
    if failed.empty:
        return ""
    # Equal counts keep the order the reasons first came in (value_counts' sort is stable).
    reasons = failed[TrialAttr.REASON].fillna("no reason recorded").astype(str).value_counts()
    named = "; ".join(f"{int(count)}: {reason}" for reason, count
                      in reasons.iloc[:TOP_REASONS].items())
    others = len(reasons) - TOP_REASONS
    more = f"; {others} other reason(s)" if others > 0 else ""
    return f"{len(failed)} failed ({named}{more})"


def _remeasures(trial: optuna.trial.FrozenTrial) -> int | None:
    text = (trial.user_attrs.get(TrialAttr.PROVENANCE) or {}).get("remeasures")
    return int(text) if isinstance(text, str) and text.isdigit() else None


def outcomes(trials: pd.DataFrame) -> pd.Series:
    """How each trial ended: its status, or its lower-case state while it has none (running)."""
    return trials[TrialAttr.STATUS].fillna(trials["state"].str.lower())


def _row(trial: optuna.trial.FrozenTrial, objectives: Sequence[str],
         declared: Sequence[str]) -> _Row:
    attrs = trial.user_attrs
    candidate: Mapping[str, Any] = attrs.get(TrialAttr.CANDIDATE) or {}
    # Written before a metric was renamed, a trial holds it under its former name.
    constraints = {current_constraint_text(str(k)): float(v) for k, v in trial.constraints.items()}
    feasible = (
        trial.state is optuna.trial.TrialState.COMPLETE
        and all(text in constraints for text in declared)
        and all(value <= 0 for value in constraints.values())
    )
    metrics: dict[str, object] = current_metric_keys(attrs.get(TrialAttr.METRICS) or {})
    # The objective values Optuna holds are measurements too; they fill a metric the attrs lack.
    if trial.values is not None and len(trial.values) == len(objectives):
        for name, value in zip(objectives, trial.values, strict=True):
            metrics.setdefault(name, value)
    text = {
        TrialAttr.STATUS: attrs.get(TrialAttr.STATUS),
        TrialAttr.REASON: attrs.get(TrialAttr.REASON),
        "device": candidate.get("device_profile"),
        TrialAttr.CANDIDATE_ID: attrs.get(TrialAttr.CANDIDATE_ID),
        # Metrics the device could not give, with why ("power_mean_w: no RAPL domain ..."):
        # one text cell, since most trials of a device miss the same few for the same reasons.
        TrialAttr.MISSING: "; ".join(
            f"{k}: {v}" for k, v
            in sorted(current_metric_keys(attrs.get(TrialAttr.MISSING) or {}).items())) or None,
    }
    return _Row(trial, text, feasible, _flatten_candidate(candidate), metrics, constraints)


def _flatten_candidate(candidate: Mapping[str, Any]) -> dict[str, object]:
    """``param.<field>`` for plain fields, ``param.arch.<k>`` / ``param.knob.<k>`` for the nested
    ones, ``param.<k>`` for free parameters; ``device_profile`` is the ``device`` column and the
    model source's settings are not parameters. A
    mapping field unknown to this version is flattened the same way rather than dropped."""
    params: dict[str, object] = {}
    for key, value in candidate.items():
        # ``model`` holds the source's settings (file path and hash, evaluator, proxy filter),
        # fixed for the campaign: ``param.family`` names the source, the provenance the rest.
        if key in ("device_profile", "model"):
            continue
        if key == "params" and isinstance(value, Mapping):
            params.update({f"{PARAM_PREFIX}{k}": v for k, v in value.items()})
        elif isinstance(value, Mapping):
            prefix = f"{PARAM_PREFIX}{_NESTED_FIELDS.get(key, key)}."
            params.update({f"{prefix}{k}": v for k, v in value.items()})
        else:
            params[f"{PARAM_PREFIX}{key}"] = value
    return params


def _param_rank(column: str) -> int:
    name = column.removeprefix(PARAM_PREFIX)
    if name in _LEADING_FIELDS:
        return _LEADING_FIELDS.index(name)
    nested = list(_NESTED_FIELDS.values())
    group = name.split(".", 1)[0]
    if "." in name and group in nested:
        return len(_LEADING_FIELDS) + nested.index(group)
    return len(_LEADING_FIELDS) + len(nested)


def _metric_rank(name: str) -> int:
    # Unknown metrics (from a newer dse) go after the known ones, in order of first appearance.
    return _METRIC_RANK.get(name, len(_METRIC_RANK))


def _ordered_keys(mappings: Iterable[Mapping[str, object]],
                  rank: Callable[[str], int]) -> list[str]:
    """Keys of all ``mappings`` ordered by ``rank``, ties by first appearance (stable order)."""
    seen: dict[str, None] = {}
    for mapping in mappings:
        seen.update(dict.fromkeys(str(k) for k in mapping))
    return sorted(seen, key=rank)


def _metric_series(name: str, rows: Sequence[_Row]) -> pd.Series:
    values = [row.metrics.get(name) for row in rows]
    if find_metric(name) is None:
        return typed_column(values)
    # Known metrics are floats by contract; anything else is a bug in the writer, so name it.
    floats: list[float] = []
    for row, value in zip(rows, values, strict=True):
        if is_missing(value):
            floats.append(np.nan)
        elif isinstance(value, int | float):
            floats.append(float(value))
        else:
            raise ValueError(f"trial {row.trial.number}: metric {name!r} must be a number, "
                             f"but got {value!r}")
    return pd.Series(floats, dtype="float64")


def portable_front(front: pd.DataFrame) -> pd.DataFrame:
    """The architectures on the front of more than one device (``front``: a per-device front,
    as :func:`front_frame` gives), one row each: its ``param.arch.*`` values (or, for a space of
    free parameters, every ``param.*`` value), the devices, how many, and the trials there.

    An architecture portable across devices may be deployed differently on each (another
    precision, runtime or batch size); what is compared is the model itself.
    """
    arch = [c for c in front.columns if c.startswith(PARAM_PREFIX + "arch.")]
    keys = arch or [c for c in front.columns if c.startswith(PARAM_PREFIX)
                    and c not in (PARAM_PREFIX + "batch_size", PARAM_PREFIX + "backend",
                                  PARAM_PREFIX + "precision", PARAM_PREFIX + "family")
                    and not c.startswith(PARAM_PREFIX + "knob.")]
    columns = [*keys, "devices", "device_count", "trials"]
    if front.empty or not keys or front["device"].nunique() < 2:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})
    rows = []
    for values, group in front.groupby(keys, dropna=False, sort=True):
        devices = sorted(group["device"].dropna().astype(str).unique())
        if len(devices) < 2:
            continue
        values = values if isinstance(values, tuple) else (values,)
        trials = ", ".join(f"{d}#{int(t)}" for d, t in sorted(zip(group["device"].astype(str),
                                                                  group["trial"], strict=True)))
        rows.append([*values, ", ".join(devices), len(devices), trials])
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["device_count", *keys], ascending=[False, *[True] * len(keys)],
                             kind="mergesort").reset_index(drop=True)
