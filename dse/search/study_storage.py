"""Where a campaign's Optuna studies live and what each is called: the storage a run folder
stands for, and one study name per device profile, stable when the campaign gains or loses a
device."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dse.core import StudyAttr

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dse.storage import CampaignStorage


def storage_url(run_dir: Path) -> str:
    """The SQLAlchemy URL of a run folder's SQLite study (the default storage)."""
    return f"sqlite:///{run_dir / 'study.db'}"


def campaign_storage(where: Path | CampaignStorage) -> CampaignStorage:
    """``where`` as a storage: a run folder stands for its SQLite study."""
    from dse.storage import CampaignStorage

    return where if isinstance(where, CampaignStorage) else CampaignStorage.sqlite(where)


def study_name(campaign: str, profile: str, device_count: int) -> str:
    """A single-device campaign's study is named like the campaign; with several devices each
    profile has its own study, ``<campaign>@<profile>``, in the same storage."""
    return campaign if device_count == 1 else f"{campaign}@{profile}"


def resolve_study_names(where: Path | CampaignStorage, campaign: str,
                        profiles: Sequence[str]) -> dict[str, str]:
    """Each profile's study name in the campaign's storage (``where``: a run folder's SQLite
    study, or a :class:`~dse.storage.CampaignStorage`): :func:`study_name`, unless the
    profile's study exists under the other form. A campaign rerun with a device added keeps its
    first device's study ``<campaign>`` (so that it resumes, and can seed the new device's
    study); one rerun with a device left out keeps ``<campaign>@<profile>``. A name held by
    another profile's study is never taken: that profile gets ``<campaign>@<profile>``."""
    import optuna

    storage = campaign_storage(where)
    owners: dict[str, str | None] = {}
    # A file storage not written yet is not created by a look at it.
    if storage.path is None or storage.path.is_file():
        url = storage.for_writing()
        summaries = storage.guarded(
            lambda: optuna.get_all_study_summaries(url, include_best_trial=False))
        for summary in summaries:
            owner = summary.user_attrs.get(StudyAttr.DEVICE_PROFILE)
            owners[summary.study_name] = None if owner is None else str(owner)
    names = {}
    for profile in profiles:
        preferred = study_name(campaign, profile, len(profiles))
        forms = [preferred, campaign, f"{campaign}@{profile}"]
        mine = [name for name in forms if name in owners and owners[name] == profile]
        if mine:
            names[profile] = mine[0]
        elif preferred in owners and owners[preferred] not in (None, profile):
            names[profile] = f"{campaign}@{profile}"
        else:
            names[profile] = preferred
    return names
