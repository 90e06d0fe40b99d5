"""The table of the front, as plain data: what a reader compares first (trial, device, the
objectives, the configuration in one cell), then, folded, every parameter and metric on its own
column, and per row its configuration as YAML to paste and its provenance.

A front of three objectives on a space of ten parameters and thirty metrics is some forty columns:
spread out, the objectives end up screens to the right of the trial they belong to. So the first
columns are few and fit a 1366-pixel window; the rest are one click away
(:attr:`~dse.report.table_info.TableInfo.shown`).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence

import pandas as pd
import yaml

from dse.core import DUEL_COLUMN, Direction, TrialAttr, find_metric
from dse.report.table_info import TableInfo
from dse.report.values import PROVENANCE_KEYS, TrialProvenance, label, plain, trial_keys
from dse.results import (
    PARAM_PREFIX,
    duel_text,
    has_unclean,
    is_missing,
    metric_column,
    metric_columns,
    param_columns,
)

# Keys of an experiment's ``baseline:`` (dse.spec.models.BaselineSpec), in its field order.
DEPLOYMENT_FIELDS = ("backend", "precision", "batch_size")
CONFIGURATION = "configuration"
"""The heading of the cell that says a row's configuration in one line."""
# Characters that would end a YAML comment line early and start YAML of their own.
_LINE_BREAKS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]+")


def objective_heading(name: str) -> str:
    """``latency_p99_ms [ms] ↓``: the column, and the arrow pointing the way that is better."""
    spec = find_metric(name)
    if spec is None:
        return metric_column(name)
    return f"{spec.column} {'↑' if spec.direction is Direction.MAXIMIZE else '↓'}"


def front_table_info(front: pd.DataFrame, objectives: Sequence[str],
                     provenance: TrialProvenance | None = None) -> TableInfo:
    """One row per front configuration. Shown first: trial, device, the objectives (units and
    which way is better in the headings), and the configuration in one cell — backend,
    precision, batch size, then the parameters that differ between front rows (those the same on
    every row are said once, in the note). Folded behind them: every parameter and every other
    metric on its own column, and the measurement's quality where a row was not measured cleanly.
    Each row carries its configuration as a ``baseline:`` block to paste
    (:func:`baseline_yaml`) and, with ``provenance`` (:func:`dse.report.info.trial_provenance`),
    the facts of where and with what it was measured. Columns empty on the whole front are left
    out."""
    if front.empty:
        return TableInfo([], [], "no feasible trial has been measured yet")
    first = [metric_column(name) for name in objectives if metric_column(name) in front.columns]
    params = param_columns(front)
    varying = [c for c in params if front[c].nunique(dropna=False) > 1]
    deployment = {PARAM_PREFIX + key for key in DEPLOYMENT_FIELDS}  # in every configuration
    constant = [c for c in params if c not in varying and c not in deployment
                and front[c].notna().any()]
    others = [column for column in metric_columns(front) if column not in first]
    quality = [TrialAttr.MEASUREMENT_QUALITY] if has_unclean(front) else []
    folded = [column for column in [*params, *others, *quality] if front[column].notna().any()]
    shown = [column for column in ["trial", "device", *first] if front[column].notna().any()]
    # A front point a duel ordered against another says so beside its configuration.
    dueled = [DUEL_COLUMN] if DUEL_COLUMN in front and front[DUEL_COLUMN].notna().any() else []
    headings = ([objective_heading(_metric(c, objectives)) if c in first else c for c in shown]
                + [CONFIGURATION] + ["duel" for _ in dueled]
                + [c.removeprefix(PARAM_PREFIX) for c in folded])
    records = front.to_dict("records")
    rows = [[label(record[c]) for c in shown] + [configuration_text(record, varying)]
            + [duel_text(record[c]) for c in dueled]
            + [label(record[c]) for c in folded] for record in records]
    configs = [baseline_yaml({name: record[name] for name in params}, _yaml_comment(record))
               for record in records]
    note = ("Same on every row: " + ", ".join(
        f"{c.removeprefix(PARAM_PREFIX)} {label(front[c].dropna().iloc[0])}" for c in constant)
            + "." if constant else "")
    facts = None
    if provenance:
        facts = [[f"{key}: {found[key]}" for key in PROVENANCE_KEYS if key in found]
                 for found in (provenance.get(key, {}) for key in trial_keys(front))]
    return TableInfo(headings, rows, None, deploy_yaml=configs, note=note,
                     shown=len(shown) + 1 + len(dueled), provenance=facts,
                     prose=tuple(range(len(shown), len(shown) + 1 + len(dueled))))


def configuration_text(record: Mapping[Hashable, object], varying: Sequence[str]) -> str:
    """``onnxruntime/int8 · batch 8 · depth 2, kernel_size 5 · intra_op_threads 2``: the
    deployment, then each parameter of ``varying`` the row has (arch, knobs, free parameters),
    by its short name."""
    def value(key: str) -> str:
        found = record.get(PARAM_PREFIX + key)
        return "" if found is None or is_missing(found) else label(found)

    stack = "/".join(v for v in (value("backend"), value("precision")) if v)
    batch = value("batch_size")
    parts = [stack, f"batch {batch}" if batch else ""]
    deployment = {PARAM_PREFIX + key for key in (*DEPLOYMENT_FIELDS, "family")}
    for group in ("arch.", "knob.", ""):
        named = [f"{column.removeprefix(PARAM_PREFIX + group)} {label(record[column])}"
                 for column in varying if column not in deployment
                 and _in_group(column, group) and not is_missing(record.get(column))]
        parts.append(", ".join(named))
    return " · ".join(p for p in parts if p)


def _in_group(column: str, group: str) -> bool:
    """Whether a parameter column is an arch one, a knob, or (group '') a free parameter."""
    rest = column.removeprefix(PARAM_PREFIX)
    if group:
        return rest.startswith(group)
    return not rest.startswith(("arch.", "knob."))


def _metric(column: str, objectives: Sequence[str]) -> str:
    return next(name for name in objectives if metric_column(name) == column)


def _yaml_comment(row: Mapping[Hashable, object]) -> str:
    """``cnn · trial 3 on local-cpu``: what the baseline block itself has no key for."""
    family, device = row.get(PARAM_PREFIX + "family"), row.get("device")
    where = f"trial {label(row['trial'])}" + ("" if is_missing(device) else f" on {device}")
    return where if family is None or is_missing(family) else f"{family} · {where}"


def baseline_yaml(params: Mapping[str, object], comment: str = "") -> str:
    """A configuration as an experiment's ``baseline:`` block, ready to paste: ``arch``,
    ``backend``, ``precision``, ``batch_size``, ``knobs`` and free ``params``, the keys of
    ``dse.spec.models.BaselineSpec``. ``params`` are a trials-table row's parameters, named with
    or without the ``param.`` prefix (``arch.depth``, ``knob.num_threads``); missing values are
    left out. ``comment`` (the family, where it was measured) goes on a comment line above.
    """
    arch: dict[str, object] = {}
    knobs: dict[str, object] = {}
    top: dict[str, object] = {}
    free: dict[str, object] = {}
    for name, value in params.items():
        key = str(name).removeprefix(PARAM_PREFIX)
        if is_missing(value) or key == "family":
            continue  # the family is the space's, not the baseline's
        group, _, rest = key.partition(".")
        if group == "arch" and rest:
            arch[rest] = plain(value)
        elif group == "knob" and rest:
            knobs[rest] = plain(value)
        elif key in DEPLOYMENT_FIELDS:
            top[key] = plain(value)
        elif not rest:
            free[key] = plain(value)
    block: dict[str, object] = {}
    if arch:
        block["arch"] = arch
    block.update((key, top[key]) for key in DEPLOYMENT_FIELDS if key in top)
    if knobs:
        block["knobs"] = knobs
    if free:
        block["params"] = free
    text = yaml.safe_dump({"baseline": block}, sort_keys=False, default_flow_style=False,
                          allow_unicode=True)
    line = _LINE_BREAKS.sub(" ", comment).strip()
    return (f"# {line}\n" if line else "") + text
