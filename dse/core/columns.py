"""Column names of the trials table, and which rows may stand on a front, in one place: a leaf
module, read by the search (its loop, study and Pareto maths), the results tables and the report.

The table groups its columns as identity, parameters, metrics, constraints, times, costs. Parameters and
constraints carry a prefix; a known metric's column — built in, or declared by the campaign's search
space — carries its unit (``latency_p99_ms [ms]``), an unknown one (written by a newer dse) keeps
its bare name. Metric columns are therefore the ones that are neither identity, time, parameter
nor constraint columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.core.metrics import find_metric, name_of_column
from dse.core.trial_record import TrialAttr

if TYPE_CHECKING:  # pandas loads with the first table: the contracts stay light to import
    import pandas as pd

# A column named after a trial attribute (dse.core.trial_record) holds that attribute.
IDENTITY_COLUMNS: tuple[str, ...] = (
    "trial", "state", TrialAttr.STATUS, TrialAttr.REASON, TrialAttr.MISSING, "feasible", "device",
    TrialAttr.CANDIDATE_ID,
)
TIME_COLUMNS: tuple[str, ...] = ("started", "completed", "duration_s", TrialAttr.REUSED_FROM)
# What measuring a trial cost the device, and at which fidelity (``dse.search.screening``); each
# column is in the table only when some trial has it (a device measured, screening was on).
COST_COLUMNS: tuple[str, ...] = (TrialAttr.FIDELITY, TrialAttr.DEVICE_SECONDS,
                                  TrialAttr.SCREEN_SECONDS, TrialAttr.FULL_SECONDS)
# A trial's side of the duels that ordered it against others (``dse.search.duel_records``): JSON
# text, in the table only when some trial of it was in a duel.
DUEL_COLUMN = "duels"
# A trial's second look (TrialAttr.SECOND_LOOK_OF) and a look slower than its clean first
# (TrialAttr.SLOWER_THAN_FIRST) are columns only when some trial has them; these names of theirs
# are kept for callers outside dse.
SECOND_LOOK_COLUMN = TrialAttr.SECOND_LOOK_OF
SLOWER_LOOK_COLUMN = TrialAttr.SLOWER_THAN_FIRST
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
             | {DUEL_COLUMN, TrialAttr.SECOND_LOOK_OF, TrialAttr.SLOWER_THAN_FIRST})
    return [
        str(c) for c in frame.columns
        if str(c) not in fixed
        and not str(c).startswith((PARAM_PREFIX, CONSTRAINT_PREFIX))
        and not str(c).endswith(RELATIVE_SUFFIX)
    ]


def blocks_front(quality: str | None, non_ok_on_front: bool) -> bool:
    """Whether a trial's ``measurement_quality`` keeps it off the front: any label but ``ok``,
    unless the campaign allows them; no label (not measured by the harness) never does."""
    return quality not in (None, "ok") and not non_ok_on_front


def competing_mask(trials: pd.DataFrame) -> pd.Series:
    """True for the rows allowed on a front: state COMPLETE, status ok, feasible, measured
    cleanly (``quality_blocks_front`` false: see ``measurement.non_ok_on_front``), and not
    looked at again by a second look that measured it (that one competes in its place), unless
    the look was slower than its clean first, or labelled where its first was clean (then the
    look is the one left out: a look the machine disturbed takes no clean result's place)."""
    import pandas as pd

    ok = (trials["state"] == "COMPLETE") & (trials[TrialAttr.STATUS] == "ok")
    mask = ok & trials["feasible"]
    if "quality_blocks_front" in trials.columns:
        mask = mask & ~trials["quality_blocks_front"].fillna(False).astype(bool)
    if TrialAttr.SECOND_LOOK_OF in trials.columns:
        # Trial numbers are per device: a look names a trial of its own device.
        devices = trials["device"].astype("string").fillna("")
        looks = ok.fillna(False).astype(bool) & trials[TrialAttr.SECOND_LOOK_OF].notna()
        if TrialAttr.SLOWER_THAN_FIRST in trials.columns:
            slower = (trials[TrialAttr.SLOWER_THAN_FIRST].astype("boolean").fillna(False)
                      .astype(bool))
            mask = mask & ~(looks & slower)
            looks = looks & ~slower
        if "quality_blocks_front" in trials.columns:
            blocked = trials["quality_blocks_front"].fillna(False).astype(bool)
            clean = pd.MultiIndex.from_arrays([devices[ok & ~blocked],
                                               trials.loc[ok & ~blocked, "trial"]])
            firsts = pd.MultiIndex.from_arrays(
                [devices, trials[TrialAttr.SECOND_LOOK_OF].fillna(-1).astype("int64")])
            looks = looks & ~(blocked & pd.Series(firsts.isin(clean), index=trials.index))
        looked = pd.MultiIndex.from_arrays(
            [devices[looks], trials.loc[looks, TrialAttr.SECOND_LOOK_OF].astype("int64")])
        superseded = pd.MultiIndex.from_arrays([devices, trials["trial"]]).isin(looked)
        mask = mask & ~pd.Series(superseded, index=trials.index)
    return mask.fillna(False).astype(bool)
