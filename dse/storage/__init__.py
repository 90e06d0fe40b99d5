"""Where a campaign's Optuna study lives: SQLite in the run folder (the default), Optuna's journal
file in the run folder, or a PostgreSQL database shared by a team (see :mod:`dse.storage.campaign`).
Imports nothing heavy: Optuna and SQLAlchemy load when a storage is opened."""

from dse.storage.campaign import (
    JOURNAL_FILE,
    LEASE_FILE,
    POINTER_FILE,
    STORAGE_FORMS,
    STUDY_FILE,
    CampaignStorage,
    setting_problem,
)

__all__ = ["JOURNAL_FILE", "LEASE_FILE", "POINTER_FILE", "STORAGE_FORMS", "STUDY_FILE",
           "CampaignStorage", "setting_problem"]
