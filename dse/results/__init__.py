"""Study storage -> tidy tables (one row per trial, unit-suffixed columns) and their files."""

from dse.core.columns import (
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
from dse.results.duels import duel_summary, duel_text
from dse.results.run_files import load_campaign, load_study, write_results
from dse.results.screening_summary import ScreeningSummary, screening_summary
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
from dse.util.atomic import atomic_write, atomic_write_text

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
    "duel_summary",
    "duel_text",
    "front_frame",
    "has_unclean",
    "load_campaign",
    "load_study",
    "metric_column",
    "metric_columns",
    "metric_name",
    "outcomes",
    "param_columns",
    "portable_front",
    "quality_summary",
    "screening_summary",
    "study_constraints",
    "study_objectives",
    "trials_frame",
    "write_results",
]
