"""Every trial against the baseline: the user's current configuration, measured first.

A new study queues the baseline as its first trial and records its candidate id in the study
attribute ``baseline_candidate_id`` (see ``dse.search.study.open_study``). The baseline is found in
the trials table by that id rather than by trial number: a baseline that an interrupted run caught
mid-measurement is re-queued under a new number, and a later repeat of the same configuration
carries the same measurement (``reused_from``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import optuna
import pandas as pd

from dse.core import RELATIVE_SUFFIX, StudyAttr, TrialAttr, metric_column


def relative_column(name: str) -> str:
    """The column of metric ``name`` relative to the baseline (``latency_p99_ms vs baseline``)."""
    return f"{name}{RELATIVE_SUFFIX}"


def baseline_ids(studies: optuna.Study | Sequence[optuna.Study]) -> dict[str, str]:
    """Device profile -> the candidate id of its baseline, for each study that has one (a study
    made without a baseline, or on a device that cannot run it, has none)."""
    found = {}
    for study in [studies] if isinstance(studies, optuna.Study) else studies:
        attrs = study.user_attrs
        if StudyAttr.DEVICE_PROFILE in attrs and StudyAttr.BASELINE_CANDIDATE_ID in attrs:
            found[str(attrs[StudyAttr.DEVICE_PROFILE])] = str(
                attrs[StudyAttr.BASELINE_CANDIDATE_ID])
    return found


def relative_to_baseline(trials: pd.DataFrame, objectives: Sequence[str],
                         baselines: Mapping[str, str]) -> pd.DataFrame:
    """A copy of ``trials`` (a ``trials_frame``) with one ``<metric> vs baseline`` column per
    objective: the trial's value divided by the baseline's value on the same device.

    The ratio keeps the metric's direction: below 1 is better for latency, above 1 for accuracy.
    The baseline's value is that of its first COMPLETE, ok trial on the device (``baselines``:
    device -> candidate id, from :func:`baseline_ids`). NaN where the device has no baseline,
    the baseline has no such trial yet, either value is missing, or the baseline's value is 0
    or infinite (a proxy's ``-inf``).
    A campaign without a baseline (``baselines`` empty) gets ``trials`` back unchanged.
    """
    if not baselines:
        return trials
    out = trials.copy()
    measured = ((out["state"] == "COMPLETE") & (out[TrialAttr.STATUS] == "ok")).fillna(False)
    for name in objectives:
        column = metric_column(name)
        ratio = pd.Series(np.nan, index=out.index, dtype="float64")
        if column in out.columns:
            values = out[column].astype("float64")
            for device, candidate_id in baselines.items():
                on_device = (out["device"] == device).fillna(False).astype(bool)
                is_baseline = (on_device
                               & (out[TrialAttr.CANDIDATE_ID] == candidate_id).fillna(False)
                               & measured)
                reference = values[is_baseline].dropna()
                if reference.empty or reference.iloc[0] == 0 or not np.isfinite(reference.iloc[0]):
                    continue
                ratio[on_device] = values[on_device] / float(reference.iloc[0])
        out[relative_column(name)] = ratio
    return out
