"""Column names of the trials table, and which rows may stand on a front, in one place: a leaf
module, read by the search (its loop, study and Pareto maths), the results tables and the report.

The table groups its columns as identity, parameters, metrics, constraints, times, costs. Parameters and
constraints carry a prefix; a known metric's column — built in, or declared by the campaign's search
space — carries its unit (``latency_p99_ms [ms]``), an unknown one (written by a newer dse) keeps
its bare name. Metric columns are therefore the ones that are neither identity, time, parameter
nor constraint columns.
"""

from __future__ import annotations

import pandas as pd

from dse.metrics import find_metric, name_of_column

IDENTITY_COLUMNS: tuple[str, ...] = (
    "trial", "state", "status", "reason", "missing", "feasible", "device", "candidate_id",
)
TIME_COLUMNS: tuple[str, ...] = ("started", "completed", "duration_s", "reused_from")
# What measuring a trial cost the device, and at which fidelity (``dse.search.screening``); each
# column is in the table only when some trial has it (a device measured, screening was on).
COST_COLUMNS: tuple[str, ...] = ("fidelity", "device_seconds", "screen_seconds", "full_seconds")
# A trial's side of the duels that ordered it against others (``dse.search.duel_records``): JSON
# text, in the table only when some trial of it was in a duel.
DUEL_COLUMN = "duels"
# The trial a second look measured again at the end of the search (``dse.search.second_looks``):
# in the table only when some trial is one. A trial with a second look whose status is ok
# competes no more; the second look does, in its place — unless that look is marked slower.
SECOND_LOOK_COLUMN = "second_look_of"
# True on a second look of a clean trial that measured its candidate slower than the first did:
# the first keeps its place on the front and the look competes no more (the machine ran a slow
# spell in one of them: dse.search.second_looks). In the table only when some look has it.
SLOWER_LOOK_COLUMN = "slower_than_first"
PARAM_PREFIX = "param."
CONSTRAINT_PREFIX = "constraint."


def metric_column(name: str) -> str:
    """The column of metric ``name``: with its unit when known, bare when not."""
    spec = find_metric(name)
    return spec.column if spec is not None else name


def metric_name(column: str) -> str:
    """The metric name behind a metric column (inverse of :func:`metric_column`)."""
    spec = find_metric(name_of_column(column))
    return spec.name if spec is not None and spec.column == column else column


def constraint_column(text: str) -> str:
    """The column of the constraint ``text`` (e.g. ``process_rss_peak_mb <= 4096``)."""
    return f"{CONSTRAINT_PREFIX}{text}"


def param_columns(frame: pd.DataFrame) -> list[str]:
    """The ``param.*`` columns of a trials table, in table order."""
    return [str(c) for c in frame.columns if str(c).startswith(PARAM_PREFIX)]


def constraint_columns(frame: pd.DataFrame) -> list[str]:
    """The ``constraint.*`` columns of a trials table, in table order."""
    return [str(c) for c in frame.columns if str(c).startswith(CONSTRAINT_PREFIX)]


# Suffix of the columns that give an objective relative to the device's baseline (a ratio).
RELATIVE_SUFFIX = " vs baseline"


def metric_columns(frame: pd.DataFrame) -> list[str]:
    """The metric columns of a trials table, in table order (not the ratios to the baseline)."""
    fixed = (set(IDENTITY_COLUMNS) | set(TIME_COLUMNS) | set(COST_COLUMNS)
             | {DUEL_COLUMN, SECOND_LOOK_COLUMN, SLOWER_LOOK_COLUMN})
    return [
        str(c) for c in frame.columns
        if str(c) not in fixed
        and not str(c).startswith((PARAM_PREFIX, CONSTRAINT_PREFIX))
        and not str(c).endswith(RELATIVE_SUFFIX)
    ]


# The study attribute that says whether trials not measured cleanly may be on the front (the
# campaign's measurement.non_ok_on_front, as of its last run).
NON_OK_ON_FRONT_ATTR = "non_ok_on_front"
# The study attribute holding the duels of close calls on the device's front and their verdicts
# (``dse.search.duel_records``: written by the search, read by the tables and the report).
DUELS_ATTR = "duels"


def blocks_front(quality: str | None, non_ok_on_front: bool) -> bool:
    """Whether a trial's ``measurement_quality`` keeps it off the front: any label but ``ok``,
    unless the campaign allows them; no label (not measured by the harness) never does."""
    return quality not in (None, "ok") and not non_ok_on_front


def competing_mask(trials: pd.DataFrame) -> pd.Series:
    """True for the rows allowed on a front: state COMPLETE, status ok, feasible, measured
    cleanly (``quality_blocks_front`` false: see ``measurement.non_ok_on_front``), and not
    looked at again by a second look that measured it (that one competes in its place), unless
    the look was slower than its clean first (then the look is the one left out)."""
    ok = (trials["state"] == "COMPLETE") & (trials["status"] == "ok")
    mask = ok & trials["feasible"]
    if "quality_blocks_front" in trials.columns:
        mask = mask & ~trials["quality_blocks_front"].fillna(False).astype(bool)
    if SECOND_LOOK_COLUMN in trials.columns:
        # Trial numbers are per device: a look names a trial of its own device.
        devices = trials["device"].astype("string").fillna("")
        looks = ok.fillna(False).astype(bool) & trials[SECOND_LOOK_COLUMN].notna()
        if SLOWER_LOOK_COLUMN in trials.columns:
            slower = trials[SLOWER_LOOK_COLUMN].astype("boolean").fillna(False).astype(bool)
            mask = mask & ~(looks & slower)
            looks = looks & ~slower
        looked = pd.MultiIndex.from_arrays(
            [devices[looks], trials.loc[looks, SECOND_LOOK_COLUMN].astype("int64")])
        superseded = pd.MultiIndex.from_arrays([devices, trials["trial"]]).isin(looked)
        mask = mask & ~pd.Series(superseded, index=trials.index)
    return mask.fillna(False).astype(bool)
