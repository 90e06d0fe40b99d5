"""Where a campaign's Optuna study lives: SQLite in the run folder (the default), Optuna's journal
file in the run folder, or a PostgreSQL database shared by a team (see :mod:`dse.storage.campaign`).
Imports nothing heavy: Optuna and SQLAlchemy load when a storage is opened."""

from dse.storage.activity import has_running_trials, stamp, started
from dse.storage.campaign import (
    JOURNAL_FILE,
    LEASE_FILE,
    POINTER_FILE,
    STORAGE_FORMS,
    STUDY_FILE,
    CampaignStorage,
    setting_problem,
)
from dse.storage.write_failure import (
    REPORT_ADVICE,
    RESUME_ADVICE,
    describe_write_failure,
    refused_writes_as_errors,
)

__all__ = [
    "JOURNAL_FILE",
    "LEASE_FILE",
    "POINTER_FILE",
    "REPORT_ADVICE",
    "RESUME_ADVICE",
    "STORAGE_FORMS",
    "STUDY_FILE",
    "CampaignStorage",
    "describe_write_failure",
    "has_running_trials",
    "refused_writes_as_errors",
    "setting_problem",
    "stamp",
    "started",
]
