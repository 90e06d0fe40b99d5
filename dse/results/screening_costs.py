"""What screening (multi-fidelity measurement) cost and saved a campaign, from its trials table.

Each trial a device measured with screening on carries ``fidelity`` (``screen``: stopped after the
screening timing; ``full``: went on to the full protocol), ``screen_seconds`` and ``full_seconds``
(see ``dse.search.screening``). What a screened-out trial saved is not observed, only estimated:
the full protocol's median duration on the same device in the same campaign.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd

from dse.core import TrialAttr

SCREENING_FILE = "screening.json"


class ScreeningSummary(NamedTuple):
    """A campaign's screening figures (all devices together)."""

    screened_out: int
    """Trials stopped after the screening timing."""
    fully_measured: int
    """Trials measured with the full protocol (screened first, or with no front to screen on)."""
    screen_device_seconds: float
    """Device seconds of every screening timing, those of fully measured trials included."""
    full_device_seconds: float
    """Device seconds of the full protocols."""
    median_full_seconds: float
    """Median full protocol, over the campaign's fully measured trials (NaN when none)."""
    device_seconds_saved_est: float
    """Estimate: each device's screened-out trials times its median full protocol."""

    def as_dict(self) -> dict[str, object]:
        """The figures as JSON data (NaN as null), with what the estimate is."""
        out: dict[str, object] = {k: None if isinstance(v, float) and math.isnan(v) else v
                                  for k, v in self._asdict().items()}
        out["device_seconds_saved_est_is"] = (
            "an estimate: screened-out trials x the median full-protocol seconds of their device "
            "in this campaign")
        return out


def screening_summary(trials: pd.DataFrame) -> ScreeningSummary | None:
    """The figures of a trials table (``dse.results.trials_frame``); None when no trial was
    measured with screening on. Repeats (``reused_from``) measured nothing and are left out."""
    if TrialAttr.FIDELITY not in trials.columns:
        return None
    measured = trials[trials[TrialAttr.FIDELITY].notna() & trials[TrialAttr.REUSED_FROM].isna()]
    if measured.empty:
        return None
    screen = measured[TrialAttr.FIDELITY] == "screen"
    full = measured[TrialAttr.FIDELITY] == "full"
    full_seconds = measured[TrialAttr.FULL_SECONDS].astype("float64")
    saved = 0.0
    for _, rows in measured.groupby(measured["device"].astype("string").fillna(""), sort=True):
        out = int((rows[TrialAttr.FIDELITY] == "screen").sum())
        if out:
            # A device screens only against a front of its own full measurements, so it has some.
            median = float(rows.loc[rows[TrialAttr.FIDELITY] == "full",
                                    TrialAttr.FULL_SECONDS].median())
            saved += out * median if math.isfinite(median) else 0.0
    return ScreeningSummary(
        screened_out=int(screen.sum()), fully_measured=int(full.sum()),
        screen_device_seconds=float(measured[TrialAttr.SCREEN_SECONDS].astype("float64").sum()),
        full_device_seconds=float(full_seconds[full].sum()),
        median_full_seconds=float(full_seconds[full].median()) if full.any() else math.nan,
        device_seconds_saved_est=saved)
