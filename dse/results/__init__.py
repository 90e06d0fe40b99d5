"""Study storage -> tidy tables (one row per trial, unit-suffixed columns) and their files."""

from dse.core import (
    CONSTRAINT_PREFIX,
    COST_COLUMNS,
    IDENTITY_COLUMNS,
    PARAM_PREFIX,
    TIME_COLUMNS,
    competing_mask,
    constraint_columns,
    metric_column,
    metric_columns,
    metric_name,
    param_columns,
)
from dse.results.dtypes import is_missing
from dse.results.duels import duel_summary, duel_text, short_name
from dse.results.run_files import load_campaign, load_study, write_results
from dse.results.screening_costs import ScreeningSummary, screening_summary
from dse.results.table import (
    front_frame,
    has_unclean,
    outcomes,
    portable_front,
    quality_summary,
    study_constraints,
    study_objectives,
    trials_frame,
)
from dse.results.trial_lookup import device_study, farm_device, measured_trial, original_trial
from dse.util import atomic_write, atomic_write_text

__all__ = [
    "CONSTRAINT_PREFIX",
    "COST_COLUMNS",
    "IDENTITY_COLUMNS",
    "PARAM_PREFIX",
    "TIME_COLUMNS",
    "ScreeningSummary",
    "atomic_write",
    "atomic_write_text",
    "competing_mask",
    "constraint_columns",
    "device_study",
    "duel_summary",
    "duel_text",
    "farm_device",
    "front_frame",
    "has_unclean",
    "is_missing",
    "load_campaign",
    "load_study",
    "measured_trial",
    "metric_column",
    "metric_columns",
    "metric_name",
    "original_trial",
    "outcomes",
    "param_columns",
    "portable_front",
    "quality_summary",
    "screening_summary",
    "short_name",
    "study_constraints",
    "study_objectives",
    "trials_frame",
    "write_results",
]
