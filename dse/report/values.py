"""How a trial's values read on the dashboard: a cell's label, a bounded length, a stable order of
mixed values, the plain Python value behind a cell, and a trial's hover details."""

from __future__ import annotations

import html
import json
import math
import numbers
import re
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

import pandas as pd

from dse.core import TrialAttr, find_metric
from dse.results import (
    CONSTRAINT_PREFIX,
    PARAM_PREFIX,
    constraint_columns,
    is_missing,
    metric_column,
    metric_columns,
    metric_name,
    param_columns,
)

ELLIPSIS = "…"
# Floats in this range read as whole numbers; beyond it, in exponent notation.
_WHOLE_FROM, _WHOLE_UNTIL = 1e4, 1e12
# Bounds on one hover value: a page holds thousands of hovers, and an error message or a path
# can be long; the whole text stays in the study.
VALUE_LIMIT = 60
REASON_LIMIT = 160

# What of a measurement's provenance (``dse.measure.provenance`` and the runner's describe())
# a reader needs to judge a point: the machine, the accelerator and its driver stack, the power
# mode, the runtime's version and settings, and whether the timing met its precision target.
# The rest (pids, timestamps, cache keys, paths) stays in the study.
PROVENANCE_KEYS: tuple[str, ...] = (
    "device_id", "host", "cpu_model", "gpu_name", "compute_capability", "power_mode",
    "l4t_release", "nvidia_driver", "cuda_runtime", "cudnn", "dse_version", "backend_version",
    "execution_provider", "tensorrt_api", "mode", "threads", "target_met", "achieved_rel_ci",
)

TrialKey = tuple[str, int]
"""A trial of a campaign: (device, trial number); each device's study numbers from 0."""
TrialProvenance = Mapping[TrialKey, Mapping[str, str]]

_CONSTRAINT_METRIC = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)")


class HoverTable(NamedTuple):
    """The hover details of some trials: one text per field per trial, all HTML-escaped."""

    fields: list[str]
    """Labels, ``trial`` first; a field no trial has is left out."""
    rows: list[list[str]]
    """Per trial, its text for each field ('' where it has none)."""


def label(value: object) -> str:
    """A cell as text: floats to four significant digits (whole numbers from 10,000 on, so a
    throughput reads 153908, not 1.539e+05), missing as empty. No thousands separator: the
    tables sort a column by its text as numbers."""
    if is_missing(value):
        return ""
    if isinstance(value, float):
        if math.isfinite(value) and _WHOLE_FROM <= abs(value) < _WHOLE_UNTIL:
            return f"{value:.0f}"
        return f"{value:.4g}"
    return str(value)


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, the cut marked with an ellipsis, so that one
    long value cannot swell a page holding thousands of them."""
    return text if len(text) <= limit else text[:max(limit - 1, 0)] + ELLIPSIS


def sort_key(value: object) -> tuple[int, float, str]:
    """Numbers first, in numeric order, then everything else by its text."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def plain(value: object) -> object:
    """The Python value a trials-table cell stands for, as a YAML writer takes it.

    numpy and pandas scalars become ``int``/``float``/``bool``. A column whose values mix kinds
    holds text (``dse.results.dtypes.typed_column``): a knob with choices ``[1, "auto"]`` reads
    ``"1"``. Search-space values are scalars, so such text is read back into the number it was
    written from, and ``"True"``/``"False"`` (how the table writes a bool) into a bool; any other
    text stays text.
    """
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, str | bytes):
        value = item()
    if not isinstance(value, str):
        return value
    if value in ("True", "False"):
        return value == "True"
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    if isinstance(parsed, bool) or not isinstance(parsed, int | float):
        return value
    return parsed if math.isfinite(parsed) else value


def trial_keys(rows: pd.DataFrame) -> list[TrialKey]:
    """Each row's (device, trial number); a row without a device has device ''."""
    return list(zip(rows["device"].astype("string").fillna("").tolist(),
                    [int(n) for n in rows["trial"]], strict=True))


def constraint_metrics(frame: pd.DataFrame) -> list[str]:
    """The metrics the table's constraint columns bound (``process_rss_peak_mb <= 4096``), in order."""
    names: list[str] = []
    for column in constraint_columns(frame):
        match = _CONSTRAINT_METRIC.match(column.removeprefix(CONSTRAINT_PREFIX))
        if match is not None and match[1] not in names:
            names.append(match[1])
    return names


def device_provenance(rows: pd.DataFrame,
                      provenance: TrialProvenance | None) -> dict[str, dict[str, str]]:
    """Per device of ``rows``, the :data:`PROVENANCE_KEYS` that every one of its trials with a
    provenance recorded, with one value (the host, the driver): said once for the device, not per
    trial. A key only some trials recorded (a runtime's own setting: ONNX Runtime's
    ``execution_provider``, torch's ``mode``) stays with those trials: said for the device, it
    would be read as true of the other runtime's points too."""
    if not provenance:
        return {}
    seen: dict[str, dict[str, set[str]]] = {}
    recorded: dict[str, int] = {}
    counts: dict[str, dict[str, int]] = {}
    for device, number in trial_keys(rows):
        record = provenance.get((device, number))
        values = seen.setdefault(device, {})
        if not record:
            continue  # a trial that recorded nothing (failed early) says nothing either way
        recorded[device] = recorded.get(device, 0) + 1
        for key in PROVENANCE_KEYS:
            if key in record:
                values.setdefault(key, set()).add(str(record[key]))
                counts.setdefault(device, {})[key] = counts.get(device, {}).get(key, 0) + 1
    return {device: {key: next(iter(found)) for key, found in values.items()
                     if len(found) == 1 and counts[device][key] == recorded[device]}
            for device, values in seen.items()}


def hover_table(rows: pd.DataFrame, metrics: Sequence[str] | None = None,
                provenance: TrialProvenance | None = None,
                shared: Mapping[str, Collection[str]] | None = None) -> HoverTable:
    """The hover details of ``rows``: ``trial`` (and the trial whose measurement it reuses), how
    it ended when not ok, every parameter, the ``metrics`` (default: every metric column) with
    units, and the :data:`PROVENANCE_KEYS` it recorded, but those ``shared`` names for its device
    (said elsewhere). Each text is cut to :data:`VALUE_LIMIT` characters (a reason to
    :data:`REASON_LIMIT`), then escaped."""
    keys = trial_keys(rows)
    texts: dict[str, list[str]] = {"trial": _trial_texts(rows), "outcome": _outcome_texts(rows)}
    for column in param_columns(rows):
        texts[column.removeprefix(PARAM_PREFIX)] = [clip(label(v), VALUE_LIMIT)
                                                    for v in rows[column].tolist()]
    for column in _metric_columns(rows, metrics):
        name = metric_name(column)
        spec = find_metric(name)
        unit = f" {spec.unit}" if spec is not None else ""
        texts[name] = ["" if is_missing(v) else clip(label(v), VALUE_LIMIT) + unit
                       for v in rows[column].tolist()]
    if provenance:
        said = shared or {}
        for key in PROVENANCE_KEYS:
            texts.setdefault(key, [
                "" if key in said.get(device, ()) else
                clip(str(provenance.get((device, number), {}).get(key, "")), VALUE_LIMIT)
                for device, number in keys])
    kept = [field for field, column in texts.items() if field == "trial" or any(column)]
    escaped = [[html.escape(text, quote=False) for text in texts[field]] for field in kept]
    return HoverTable([html.escape(field, quote=False) for field in kept],
                      [list(row) for row in zip(*escaped, strict=True)])


def _metric_columns(rows: pd.DataFrame, metrics: Sequence[str] | None) -> list[str]:
    if metrics is None:
        return metric_columns(rows)
    wanted = [metric_column(name) for name in metrics]
    return [column for column in dict.fromkeys(wanted) if column in rows.columns]


def _trial_texts(rows: pd.DataFrame) -> list[str]:
    reused = (rows[TrialAttr.REUSED_FROM].tolist() if TrialAttr.REUSED_FROM in rows.columns
              else [None] * len(rows))
    return [str(int(number)) + ("" if is_missing(source) else
                                f" (measurement reused from trial {int(source)})")
            for number, source in zip(rows["trial"].tolist(), reused, strict=True)]


def _outcome_texts(rows: pd.DataFrame) -> list[str]:
    """Why a trial is not a feasible result: its status and reason, or the constraints it
    breaks; '' for a feasible one (and for one still running)."""
    bounds = constraint_columns(rows)
    texts = []
    for status, reason, state, feasible, limits in zip(
            rows[TrialAttr.STATUS].tolist(), rows[TrialAttr.REASON].tolist(),
            rows["state"].tolist(), rows["feasible"].tolist(),
            rows[bounds].itertuples(index=False), strict=True):
        if not is_missing(status) and status != "ok":
            why = "" if is_missing(reason) or not reason else f": {reason}"
            texts.append(clip(f"{status}{why}", REASON_LIMIT))
        elif state == "COMPLETE" and not feasible:
            broken = [column.removeprefix(CONSTRAINT_PREFIX)
                      for column, value in zip(bounds, limits, strict=True)
                      if is_missing(value) or value > 0]
            texts.append(clip("violates " + ("; ".join(broken) or "a constraint"),
                              REASON_LIMIT))
        else:
            texts.append("")
    # A result measured but not cleanly says so, and whether that kept it off the front.
    if TrialAttr.MEASUREMENT_QUALITY in rows.columns:
        blocks = (rows["quality_blocks_front"].tolist() if "quality_blocks_front" in rows.columns
                  else [False] * len(rows))
        for i, (quality, blocked) in enumerate(zip(rows[TrialAttr.MEASUREMENT_QUALITY].tolist(),
                                                   blocks, strict=True)):
            if not texts[i] and not is_missing(quality) and quality != "ok":
                texts[i] = f"measured {quality}" + (" (kept off the front)" if blocked else "")
    return texts
